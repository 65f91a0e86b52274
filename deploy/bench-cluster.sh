#!/usr/bin/env bash
# bench-cluster.sh - generation tokens/s of local hearth clusters against the
# single process, on a ~600 MB+ model (default: generated TinyLlama-1.1B
# shape, Q4_0, at /tmp/tl-q4_0.gguf).
#
#   deploy/bench-cluster.sh [MODEL] [MEM_MB_PER_AGENT]
#   deploy/bench-cluster.sh --parallel [MODEL]
#
# --parallel: several requests at once on a 3-agent loopback ring (one
# thread each, CURVE on, --parallel 4, the HTTP API on the head):
#   a. aggregate generation tokens/s of 4 concurrent streams against one
#      stream (deploy/stream-bench.py: REPS repetitions, interleaved);
#   b. time to first token of a prompt of about 512 tokens (with the Llama-2
#      vocabulary of the shared fixtures; each run prints its count), pipelined
#      prefill (chunks of --batch tokens following each other around the
#      ring) against --prefill-depth 1 (one chunk at a time), same ring.
# For reference, a. also runs one stream with --parallel 1 (the
# single-request path). N_GEN (default 32), REPS (3), PROMPT_WORDS (for b.,
# default 290), RING_BATCHES (--ring-batches for a.) and PORT (7800) tune it.
#
# 1. single process, no memory limit (-t 1 and -t 2)
# 2. 2 agents on loopback, no limits (overhead of the ring)
# 3. 3 agents, each in a cgroup v1 memory group of MEM_MB (default: half of
#    its share of the model plus 40 MB for KV and buffers), page cache
#    dropped before each run: k=1 no prefetch, k=1 prefetch, k=2 prefetch,
#    k=2 prefetch + release.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEARTH:-$ROOT/build/hearth}
export HEARTH=$BIN
PARALLEL=0
if [ "${1:-}" = "--parallel" ]; then
    PARALLEL=1
    shift
fi
MODEL=${1:-/tmp/tl-q4_0.gguf}
N_GEN=${N_GEN:-32}
PROMPT_WORDS=${PROMPT_WORDS:-290}
PROMPT="The history of the city begins"
if [ ! -f "$MODEL" ]; then
    "$BIN" mkmodel -o "$MODEL" --shape tinyllama --type q4_0
fi
SIZE_MB=$(( $(stat -c %s "$MODEL") / 1048576 ))
MEM_MB=${2:-$(( SIZE_MB / 3 / 2 + 40 ))}
CL="$ROOT/deploy/cluster.sh"
trap '"$CL" stop >/dev/null 2>&1 || true' EXIT

tps() { sed -n 's/.*generation: [0-9]* tokens[^,]*, \([0-9.]*\) tokens\/s.*/\1/p' | tail -1; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

if [ "$PARALLEL" = 1 ]; then
    PORT=${PORT:-7800}
    API=127.0.0.1:$((PORT + 90))
    REPS=${REPS:-3}
    SB=(python3 "$ROOT/deploy/stream-bench.py" "http://$API")
    pids() { cat "${HR_CLUSTER_DIR:-/tmp/hearth-cluster}"/pid.* | paste -sd,; }
    echo "model $MODEL ($SIZE_MB MiB); $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    start_ring() { # head options...
        "$CL" start -m "$MODEL" -n 3 -t 1 -p "$PORT" -- --ctx 1024 --parallel 4 \
            --api-listen "$API" "$@" >/dev/null
    }
    echo "a. 3 agents loopback, -t 1, --parallel 4: 1 stream against 4 streams, $N_GEN tokens each"
    start_ring ${RING_BATCHES:+--ring-batches "$RING_BATCHES"}
    "${SB[@]}" -c 1,4 -n "$N_GEN" -r "$REPS" --pids "$(pids)"
    "$CL" stop >/dev/null
    echo "   for reference, one stream on the same ring with --parallel 1 (one request at a time):"
    "$CL" start -m "$MODEL" -n 3 -t 1 -p "$PORT" -- --ctx 1024 --parallel 1 \
        --api-listen "$API" >/dev/null
    "${SB[@]}" -c 1 -n "$N_GEN" -r "$REPS" --pids "$(pids)" | grep -v "^aggregate\|x1.00 of" |
        sed 's/^/   /'
    "$CL" stop >/dev/null
    echo "b. time to first token, prompt of ~512 tokens ($PROMPT_WORDS words), same ring"
    declare -A ttft
    for depth in 1 0; do
        start_ring --prefill-depth "$depth"
        label="pipelined (default depth)"
        [ "$depth" = 1 ] && label="one chunk at a time (--prefill-depth 1)"
        echo "  $label:"
        out=$("${SB[@]}" -c 1 -n 1 -r "$REPS" --prompt-words "$PROMPT_WORDS" --pids "$(pids)")
        echo "$out" | grep -v "aggregate tokens/s\|x1.00 of" | sed 's/^/    /'
        ttft[$depth]=$(echo "$out" | sed -n 's/.*time to the last first token \([0-9.]*\) s.*/\1/p')
        echo "    time to first token (median): ${ttft[$depth]} s"
        "$CL" stop >/dev/null
    done
    awk -v a="${ttft[0]}" -v b="${ttft[1]}" \
        'BEGIN { if (b > 0) printf "  pipelined / one chunk at a time: x%.2f\n", a / b }'
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi

echo "model $MODEL ($SIZE_MB MiB), $N_GEN tokens, $(nproc) cores"
for t in 1 2; do
    "$BIN" run -m "$MODEL" --temp 0 -n 4 -t $t -p "$PROMPT" >/dev/null 2>&1
    r=$("$BIN" run -m "$MODEL" --temp 0 -n "$N_GEN" -t $t -p "$PROMPT" 2>&1 >/dev/null | tps)
    echo "single process, -t $t, no limit:            $r tokens/s"
done

run_cluster() { # label n threads mem_mb head-options...
    local label=$1 n=$2 t=$3 mem=$4
    shift 4
    local start=("$CL" start -m "$MODEL" -n "$n" -t "$t" -p 7800)
    [ "$mem" -gt 0 ] && start+=(--mem-mb "$mem")
    [ "$mem" -gt 0 ] && drop
    "${start[@]}" -- --ctx 512 "$@" >/dev/null
    # a short warm-up prompt, then the measured one
    "$CL" prompt --temp 0 -n 4 "$PROMPT" >/dev/null 2>&1 || true
    local r
    r=$("$CL" prompt --temp 0 -n "$N_GEN" --timeout 600 "$PROMPT" 2>&1 >/dev/null | tps)
    printf "%-46s %s tokens/s\n" "$label:" "${r:-FAILED}"
    if [ -n "${VERBOSE:-}" ]; then "$CL" status; fi
    "$CL" stop >/dev/null
}

for t in 1 2; do
    run_cluster "2 agents loopback, -t $t, no limit, k=1" 2 $t 0 --k 1
done
echo "3 agents, cgroup limit $MEM_MB MiB each (share $((SIZE_MB / 3)) MiB):"
run_cluster "  k=1, no prefetch" 3 1 "$MEM_MB" --k 1 --no-prefetch --release off
run_cluster "  k=1, prefetch" 3 1 "$MEM_MB" --k 1 --release off
run_cluster "  k=2, prefetch" 3 1 "$MEM_MB" --k 2 --release off
run_cluster "  k=2, prefetch + release" 3 1 "$MEM_MB" --k 2 --release on
