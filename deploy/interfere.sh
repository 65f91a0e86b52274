#!/usr/bin/env bash
# interfere.sh - adaptive plans under interference, measured on an emulated
# lab (deploy/lab.sh; root): someone starts a game on one device mid-way
# through a long greedy completion.
#
#   deploy/interfere.sh [SPEC] [-m MODEL] [-d DEVICE] [-n TOKENS] [--hog-at N]
#
#   1. the reference: `hearth run --temp 0` (single process) on the prompt;
#   2. lab A (SPEC, default deploy/labs/interfere.json): a streamed greedy
#      completion of TOKENS tokens over the HTTP API; after N tokens a CPU
#      hog starts in DEVICE's cgroups (lab.sh hog; default: the device the
#      plan in use gives the most layers);
#      the head must re-plan by itself (status "adapt");
#   3. lab B, fresh: the same spec with the hog running before the agents
#      start (lab.sh up --hog: the profiles see it), the same completion.
#
# Prints: the time from the hog to the adaptive plan being decided and
# ready; the replay of the request on the new plan; tokens/s before the hog,
# with the hog before the re-plan, after the re-plan (from the first token
# after the replay) and on the fresh lab over the same token positions; and
# whether both answers equal the reference. Fails (exit 1) when the re-plan
# takes more than 5 s, the rate after it is below 85% of the fresh plan's,
# or an answer differs. The lab uses its own names (HR_LAB_PREFIX ia-,
# cgroups hearth-adapt, HR_LAB_DIR /tmp/hearth-interfere), so it can run
# next to another lab.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEARTH:-$ROOT/build/hearth}
export HEARTH=$BIN
export HR_LAB_PREFIX=${HR_LAB_PREFIX:-ia-}
export HR_LAB_CGROUP=${HR_LAB_CGROUP:-hearth-adapt}
export HR_LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-interfere}
OUT=$(mktemp -d /tmp/interfere.XXXXXX)
# profiles measured now, under the machine's present load (not a cached one)
export HR_LAB_CACHE=${HR_LAB_CACHE:-$OUT/cache}
LAB="$ROOT/deploy/lab.sh"
SPEC=$ROOT/deploy/labs/interfere.json
MODEL="" DEVICE="" N=120 HOG_AT=20
PROMPT="The history of the city begins"
REPLAN_MAX_S=5
RATIO_MIN=0.85
API_PORT=8180

while [ $# -gt 0 ]; do
    case "$1" in
    -m) MODEL=$2; shift 2 ;;
    -d) DEVICE=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --hog-at) HOG_AT=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "interfere.sh: unknown option $1" >&2; exit 2 ;;
    *) SPEC=$1; shift ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "interfere.sh: needs root (lab.sh)" >&2; exit 1; }
[ -n "$MODEL" ] || MODEL=$(jq -r '.model // ""' "$SPEC")
if [ ! -f "$MODEL" ]; then
    echo "interfere.sh: generating $MODEL (1.1B shape, q4_0)" >&2
    "$BIN" mkmodel -o "$MODEL" --shape tinyllama --type q4_0 >/dev/null
fi
HEAD_IDX=$(jq -r '(.head // 0) as $h | if ($h | type) == "number" then $h
                  else ([.devices[].name] | index($h)) end' "$SPEC")
API_ADDR=10.77.1.$((HEAD_IDX + 1)):$API_PORT
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT

# stream OUTFILE: a streamed greedy completion over the head's API; one
# line per token: wall time (s), then the text as JSON.
cat >"$OUT/stream.py" <<'EOF'
import http.client, json, sys, time
addr, n, prompt, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if len(sys.argv) > 5:
    n = int(sys.argv[5])
host, port = addr.rsplit(":", 1)
body = {"prompt": prompt, "max_tokens": n, "temperature": 0,
        "repeat_penalty": 1.0, "stream": True}
# a 503 (the head re-planning, e.g. after its first link measurement) is
# retried after its Retry-After, as a client honouring it would
for attempt in range(30):
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 503:
        break
    r.read()
    time.sleep(float(r.getheader("Retry-After") or 1))
if r.status != 200:
    sys.exit("HTTP %d: %s" % (r.status, r.read()[:300]))
with open(out, "w") as f:
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            if ch.get("text"):
                f.write("%.6f %s\n" % (time.time(), json.dumps(ch["text"])))
                f.flush()
EOF

stream() { # OUTFILE [TOKENS]
    nsenter --net="/run/netns/${HR_LAB_PREFIX}ns$HEAD_IDX" -- python3 "$OUT/stream.py" "$API_ADDR" "$N" "$PROMPT" "$@"
}
# warm OUTFILE: a first request (pages in, first plans settled), then waits
# until an adaptive decision it caused is past the hold-off
warm() {
    local s age hold
    stream "$1" 48
    for _ in $(seq 300); do
        s=$(st)
        age=$(echo "$s" | jq -r '.adapt.last_age_s // -1')
        hold=$(echo "$s" | jq -r '.adapt.holdoff_s // 10')
        [ "$(echo "$s" | jq -r '.ready')" = true ] && awk -v a="$age" -v h="$hold" 'BEGIN { exit !(a < 0 || a > h) }' && break
        sleep 0.2
    done
    echo "  warm-up: $(echo "$s" | jq -r '.adapt.replans') adaptive re-plans, $(echo "$s" | jq -r '.adapt.rescaled') rate updates; plan $(echo "$s" | jq -r '.plan_id'): $(echo "$s" | jq -r '[.devices[] | "\(.name) \(.layers)"] | join(", ")')"
}
text_of() { python3 -c 'import json,sys; print("".join(json.loads(l.split(" ",1)[1]) for l in open(sys.argv[1])), end="")' "$1"; }
now() { date +%s.%N; }
st() { "$LAB" status --json 2>/dev/null || echo '{}'; }
# rate FILE FROM_TOKEN TO_TOKEN: tokens/s between two token positions (1-based)
rate() { awk -v a="$2" -v b="$3" 'NR == a { t0 = $1 } NR == b { t1 = $1 } END { if (t1 > t0 && b > a) printf "%.3f", (b - a) / (t1 - t0); else print "nan" }' "$1"; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $MODEL; spec $SPEC; hog in '${DEVICE:-the device with the most layers}' after $HOG_AT of $N tokens"

# ---- 1. the reference ----
"$BIN" run -m "$MODEL" --temp 0 --repeat-penalty 1 -n "$N" -t 1 -p "$PROMPT" >"$OUT/ref.txt" 2>"$OUT/ref.log"
echo "reference: $(wc -c <"$OUT/ref.txt") bytes of text from hearth run"

# ---- 2. lab A: the hog starts mid-generation ----
"$LAB" up "$SPEC" -m "$MODEL" -- --api-listen "$API_ADDR" >"$OUT/upA.log" 2>&1 || { cat "$OUT/upA.log"; exit 1; }
stA=$(st)
echo "lab A plan $(echo "$stA" | jq -r '.plan_id'): $(echo "$stA" | jq -r '[.devices[] | "\(.name) \(.layers)"] | join(", ")')"
echo "  $(echo "$stA" | jq -r '.plan_source')"
warm "$OUT/a-warm.txt"
stA=$(st)
planA=$(echo "$stA" | jq -r '.plan_id')
replans0=$(echo "$stA" | jq -r '.adapt.replans')
# by default the hog goes where the plan put the most layers
[ -n "$DEVICE" ] || DEVICE=$(echo "$stA" | jq -r '.devices | max_by((.windows // []) | add // 0) | .name') # "w" is absent where rounds differ
echo "  the hog goes into '$DEVICE'"
stream "$OUT/a.txt" &
spid=$!
# tokens so far, counted with builtins only: a command substitution, a
# subshell and wc every 50 ms (with an external sleep, ~60 process starts a
# second) ran beside lab A's request and not beside lab B's, on the lab's
# two cores (lab A ran 255-324 ms per token before the hog, lab B 83-90
# with it)
n_lines() {
    local n=0 _l
    [ -f "$1" ] || { echo 0; return; }
    while IFS= read -r _l; do n=$((n + 1)); done <"$1"
    echo $n
}
n_tok=0
while [ "$n_tok" -lt "$HOG_AT" ]; do
    kill -0 $spid 2>/dev/null || { echo "interfere.sh: the request ended early" >&2; exit 1; }
    sleep 0.2
    n_lines "$OUT/a.txt" >"$OUT/n_tok"
    read -r n_tok <"$OUT/n_tok"
done
t_hog=$(now)
"$LAB" hog "$DEVICE" 2>/dev/null
t_decide="" t_ready="" planB="" last=$stA
loadA=$(cut -d' ' -f1 /proc/loadavg)
while kill -0 $spid 2>/dev/null; do
    s=$(st)
    [ "$s" = '{}' ] || last=$s
    if [ -z "$t_decide" ] && [ "$(echo "$s" | jq -r '.adapt.replans // 0')" -gt "$replans0" ]; then
        t_decide=$(now)
        echo "$s" | jq -r '.adapt.last' >"$OUT/reason.txt"
    fi
    if [ -n "$t_decide" ] && [ -z "$t_ready" ] && [ "$(echo "$s" | jq -r '.plan_id')" != "$planA" ] &&
        [ "$(echo "$s" | jq -r '.ready')" = true ]; then
        t_ready=$(now)
        planB=$(echo "$s" | jq -r '.plan_id')
        echo "$s" >"$OUT/statusA2.json"
        break
    fi
    sleep 0.2
done
# no status polls once the new plan is ready: each one starts a client
# (bash, nsenter, hearth, jq) on the lab's two cores and costs the head's
# quota an answer; lab B's request runs without them, so lab A's after the
# re-plan must too
wait $spid || { echo "interfere.sh: the request failed" >&2; exit 1; }
s=$(st)
[ "$s" = '{}' ] || last=$s
"$LAB" hog "$DEVICE" stop 2>/dev/null
cp "$HR_LAB_DIR"/*.log "$OUT/" 2>/dev/null || true
"$LAB" down >/dev/null
nA=$(wc -l <"$OUT/a.txt")
n_replans=$(($(echo "$last" | jq -r '.adapt.replans') - replans0))
[ -n "$t_ready" ] || { echo "FAIL no adaptive re-plan within the request ($nA tokens)"; exit 1; }
# tokens streamed before the hog, with the hog before the re-plan, after the replay
k_hog=$(awk -v t="$t_hog" '$1 <= t' "$OUT/a.txt" | wc -l)
k_ready=$(awk -v t="$t_ready" '$1 <= t' "$OUT/a.txt" | wc -l)
t_first_after=$(sed -n "$((k_ready + 1))p" "$OUT/a.txt" | cut -d' ' -f1)
replay_s=$(awk -v a="$t_ready" -v b="$t_first_after" 'BEGIN { printf "%.2f", b - a }')
# the steady state after the re-plan: from the 2nd token after the replay on
from=$((k_ready + 2))
[ "$from" -lt "$nA" ] || { echo "FAIL too few tokens after the re-plan (give more -n)"; exit 1; }

# ---- 3. lab B: a fresh plan with the hog running from the start ----
"$LAB" up "$SPEC" -m "$MODEL" --hog "$DEVICE" -- --api-listen "$API_ADDR" >"$OUT/upB.log" 2>&1 || { cat "$OUT/upB.log"; exit 1; }
stB=$(st)
echo "lab B (fresh, hog from the start) plan: $(echo "$stB" | jq -r '[.devices[] | "\(.name) \(.layers)"] | join(", ")')"
echo "  $(echo "$stB" | jq -r '.plan_source')"
warm "$OUT/b-warm.txt"
loadB=$(cut -d' ' -f1 /proc/loadavg)
stream "$OUT/b.txt"
"$LAB" down >/dev/null
nB=$(wc -l <"$OUT/b.txt")

# ---- numbers ----
decide_s=$(awk -v a="$t_hog" -v b="$t_decide" 'BEGIN { printf "%.2f", b - a }')
ready_s=$(awk -v a="$t_hog" -v b="$t_ready" 'BEGIN { printf "%.2f", b - a }')
r_before=$(rate "$OUT/a.txt" 2 "$k_hog")
r_hog=$(rate "$OUT/a.txt" "$((k_hog + 1))" "$k_ready")
r_after=$(rate "$OUT/a.txt" "$from" "$nA")
r_fresh=$(rate "$OUT/b.txt" "$from" "$nA")
r_fresh_all=$(rate "$OUT/b.txt" 2 "$nB")
ratio=$(awk -v a="$r_after" -v b="$r_fresh" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
echo "adaptive plan (lab A): $(cat "$OUT/reason.txt")"
echo "  plan after it: $(jq -r '[.devices[] | "\(.name) \(.layers) (x\(.rate_scale * 1000 | round / 1000))"] | join(", ")' "$OUT/statusA2.json")"
echo "hog started at token $k_hog; re-plan decided after $decide_s s, plan $planB ready after $ready_s s"
echo "replay of the request on plan $planB: $replay_s s from ready to the next token (the token history fed again: the prompt in chunks, generated tokens as decode rows; the first steps also fault in the weights of windows that moved); $n_replans adaptive re-plans during the request in all"
# (no such line when the re-plan had nothing to replay)
replayed=$(grep -h "replayed [0-9]* positions" "$OUT"/*.log 2>/dev/null | head -1 | sed 's/.*session [0-9]*: //' || true)
[ -z "$replayed" ] || echo "  the head: $replayed"
echo "load average (1 min) at the start of the measured requests: lab A $loadA, lab B $loadB"
echo "tokens/s lab A: before the hog $r_before (tokens 2-$k_hog), with the hog before the re-plan $r_hog, after the re-plan $r_after (tokens $from-$nA)"
echo "tokens/s lab B (fresh plan, hog running): $r_fresh over tokens $from-$nA ($r_fresh_all over 2-$nB)"
echo "after the re-plan / fresh plan: $ratio"
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
check "re-plan within ${REPLAN_MAX_S} s of the hog ($ready_s s)" "awk -v x=$ready_s 'BEGIN { exit !(x <= $REPLAN_MAX_S) }'"
check "throughput after the re-plan >= ${RATIO_MIN} x the fresh plan's ($ratio)" "awk -v x=$ratio 'BEGIN { exit !(x >= $RATIO_MIN) }'"
check "lab A answer equals hearth run ($nA tokens)" '[ "$(text_of "$OUT/a.txt")" = "$(cat "$OUT/ref.txt")" ]'
check "lab B answer equals hearth run ($nB tokens)" '[ "$(text_of "$OUT/b.txt")" = "$(cat "$OUT/ref.txt")" ]'
echo "files in $OUT"
exit $fail
