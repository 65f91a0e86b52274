#!/usr/bin/env bash
# soak.sh - a 3-agent local cluster serves N sequential requests while one
# worker is killed (SIGKILL) and restarted every INTERVAL seconds.
#
#   deploy/soak.sh [-m MODEL] [-r REQUESTS] [-i INTERVAL_S] [-n TOKENS] [-p BASE_PORT]
#
# Every request must give exactly the text a single-process run (a lone head
# agent, same F32 arithmetic) gives for the same prompt and seed: a different
# answer and a request that fails (recovery must hide the kills) both make
# the soak fail, with the failed request's error printed. No agent may
# crash (the head must live to the end; a worker may only die by our kill)
# and the head's RSS must stay within 10% of its size after warm-up. A soak
# in which no kill happened (the requests ended within the first interval)
# proved nothing and fails too. Each failure ends in a "soak: FAILED: why" line.
# Defaults: the shared small-llama-q4_0 model, 200 requests, 30 s, 48 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
model=$ROOT/../shared/models/small-llama-q4_0.gguf
reqs=200 interval=30 ntok=48 base=7960
while [ $# -gt 0 ]; do
    case "$1" in
    -m) model=$2; shift 2 ;;
    -r) reqs=$2; shift 2 ;;
    -i) interval=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    -p) base=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [-r REQUESTS] [-i INTERVAL_S] [-n TOKENS] [-p PORT]" >&2; exit 2 ;;
    esac
done
BIN=${HEARTH:-$ROOT/build/hearth}
export HEARTH=$BIN
export HR_CLUSTER_DIR=${HR_CLUSTER_DIR:-/tmp/hearth-soak}
W=$HR_CLUSTER_DIR.work
rm -rf "$W" && mkdir -p "$W" && : >"$W/kills"
CL="bash $ROOT/deploy/cluster.sh"
prompts=("Once upon a time" "The quick brown fox" "In a hole in the ground there lived"
         "Why is the sky blue?" "Write a haiku about the sea")

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# 1. references: a lone head (single process), same wire arithmetic
ref_port=$((base + 30))
"$BIN" agent -m "$model" --listen 127.0.0.1:$ref_port --name ref --no-profile --wire f32 \
    --key-dir "$W/refkey" 2>"$W/ref.log" &
ref_pid=$!
for i in "${!prompts[@]}"; do
    for _ in $(seq 100); do
        "$BIN" prompt --head 127.0.0.1:$ref_port --key-dir "$W/refkey" --temp 0.8 --seed $((i + 1)) \
            -n "$ntok" --timeout 30 "${prompts[i]}" >"$W/ref.$i" 2>/dev/null && break
        sleep 0.2
    done
done
kill $ref_pid; wait $ref_pid 2>/dev/null || true

# 2. the cluster (keys paired by cluster.sh), F32 wire, k 1
$CL start -m "$model" -n 3 -p "$base" -- --wire f32 --k 1 >/dev/null
head_pid=$(cat "$HR_CLUSTER_DIR/pid.0")

# 3. the killer: every interval, SIGKILL agent1 or agent2 and restart it
killer() {
    local victim=1 n=0
    while [ ! -e "$W/stop" ]; do
        sleep "$interval"
        [ -e "$W/stop" ] && break
        local pf=$HR_CLUSTER_DIR/pid.$victim pid
        pid=$(cat "$pf")
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "agent$victim (pid $pid) died on its own" >>"$W/crashes"
        fi
        local -a cmd
        mapfile -d '' cmd <"/proc/$pid/cmdline"
        kill -9 "$pid" 2>/dev/null || true
        n=$((n + 1))
        echo "$(date +%T) kill $n: agent$victim (pid $pid)" >>"$W/kills"
        sleep 2
        "${cmd[@]}" 2>>"$HR_CLUSTER_DIR/agent$victim.log" &
        echo $! >"$pf"
        victim=$((3 - victim))
    done
}
killer &
killer_pid=$!

# 4. requests
ok=0 failed=0 wrong=0 rss0=0 rss_max=0 rss_last=0
t0=$(date +%s)
for r in $(seq 1 "$reqs"); do
    i=$(((r - 1) % ${#prompts[@]}))
    if $CL prompt --temp 0.8 --seed $((i + 1)) -n "$ntok" --timeout 60 "${prompts[i]}" \
        >"$W/out" 2>"$W/err"; then
        if cmp -s "$W/out" "$W/ref.$i"; then
            ok=$((ok + 1))
        else
            wrong=$((wrong + 1))
            cp "$W/out" "$W/wrong.$r"
            echo "request $r: WRONG answer (saved $W/wrong.$r)"
        fi
    else
        failed=$((failed + 1))
        echo "request $r: failed: $(grep -v '^$' "$W/err" | tail -1)"
    fi
    rss_last=$(rss "$head_pid")
    [ "$r" = 20 ] && rss0=$rss_last
    [ "$r" -ge 20 ] && [ "$rss_last" -gt "$rss_max" ] && rss_max=$rss_last
    if [ $((r % 20)) = 0 ]; then
        echo "$(date +%T) $r requests: $ok exact, $failed failed, $wrong wrong; head RSS $rss_last kB;" \
             "kills $(wc -l <"$W/kills" 2>/dev/null || echo 0)"
    fi
done
touch "$W/stop"
kill "$killer_pid" 2>/dev/null || true
wait "$killer_pid" 2>/dev/null || true
alive=yes
kill -0 "$head_pid" 2>/dev/null || alive=NO
w_rss=""
for i in 1 2; do w_rss="$w_rss agent$i=$(rss "$(cat "$HR_CLUSTER_DIR/pid.$i")")kB"; done
$CL stop >/dev/null
kills=$(wc -l <"$W/kills" 2>/dev/null || echo 0)
recov=$(grep -c "recovered on plan" "$HR_CLUSTER_DIR/agent0.log" || true)
growth=0
[ "$rss0" -gt 0 ] && growth=$(((rss_max - rss0) * 100 / rss0))
echo "soak: $reqs requests in $(($(date +%s) - t0)) s: $ok exact, $failed failed with an error," \
     "$wrong wrong; $kills kills, $recov in-flight recoveries; head alive: $alive;" \
     "head RSS after warm-up $rss0 kB, max $rss_max kB (+$growth%), last $rss_last kB;" \
     "workers at the end:$w_rss"
fail=0
failed_because() { echo "soak: FAILED: $*"; fail=1; }
if [ -e "$W/crashes" ]; then
    while read -r line; do failed_because "$line"; done <"$W/crashes"
fi
[ "$kills" -gt 0 ] ||
    failed_because "no kill happened: the $reqs requests ended before the first kill" \
        "(every $interval s); give more requests (-r) or a shorter interval (-i)"
[ "$wrong" = 0 ] || failed_because "$wrong answers differ from the single-process run"
[ "$failed" = 0 ] || failed_because "$failed requests failed with an error"
[ "$alive" = yes ] || failed_because "the head (pid $head_pid) died"
[ "$growth" -le 10 ] || failed_because "head RSS grew $growth% after warm-up (10% allowed)"
[ "$fail" = 0 ] && echo "soak: PASS"
exit "$fail"
