#!/usr/bin/env bash
# ab.sh - two hearth builds side by side on the same machine and model,
# interleaved (A, B, A, B, ...): a change's speed against the build before
# it, measured in one run so that the machine's load hits both alike.
#
#   deploy/ab.sh OLD_HEARTH NEW_HEARTH [MODEL]
#
# Per round, for each build in turn:
#   1. single node: `hearth bench -t 2 -P 64 -N 64 -r 1`, generation tok/s;
#   2. 3 agents on loopback (-t 1 each, CURVE on, --parallel 1), one
#      request of N_GEN tokens through `hearth prompt`: generation tok/s;
#   3. the same ring with --parallel 4 and the HTTP API: aggregate tok/s of
#      4 concurrent streams (deploy/stream-bench.py, N_GEN tokens each).
# ROUNDS (default 3), N_GEN (48) and PORT (7900) tune it. The model
# defaults to a generated TinyLlama-1.1B shape, Q4_0, at /tmp/tl-q4_0.gguf.
# Prints every measurement, then the medians and NEW / OLD per line.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=${1:?usage: $0 OLD_HEARTH NEW_HEARTH [MODEL]}
B=${2:?usage: $0 OLD_HEARTH NEW_HEARTH [MODEL]}
MODEL=${3:-/tmp/tl-q4_0.gguf}
ROUNDS=${ROUNDS:-3}
N_GEN=${N_GEN:-48}
PORT=${PORT:-7900}
API=127.0.0.1:$((PORT + 90))
PROMPT="The history of the city begins"
CL="$ROOT/deploy/cluster.sh"
[ -f "$MODEL" ] || "$B" mkmodel -o "$MODEL" --shape tinyllama --type q4_0
trap 'HEARTH=$A "$CL" stop >/dev/null 2>&1 || true' EXIT
echo "model $MODEL; $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
echo "A = $A"
echo "B = $B"

tps() { sed -n 's/.*generation: [0-9]* tokens[^,]*, \([0-9.]*\) tokens\/s.*/\1/p' | tail -1; }
bench() { "$1" bench -m "$MODEL" -t 2 -P 64 -N 64 -r 1 2>&1 |
    sed -n 's/^generation: *\([0-9.]*\) tokens\/s.*/\1/p' | tail -1; }
ring1() {
    HEARTH=$1 "$CL" start -m "$MODEL" -n 3 -t 1 -p "$PORT" -- --ctx 512 --parallel 1 >/dev/null
    HEARTH=$1 "$CL" prompt --temp 0 -n 4 "$PROMPT" >/dev/null 2>&1 || true
    HEARTH=$1 "$CL" prompt --temp 0 -n "$N_GEN" --timeout 600 "$PROMPT" 2>&1 >/dev/null | tps
    HEARTH=$1 "$CL" stop >/dev/null
}
ring4() {
    HEARTH=$1 "$CL" start -m "$MODEL" -n 3 -t 1 -p "$PORT" -- --ctx 512 --parallel 4 \
        --api-listen "$API" >/dev/null
    python3 "$ROOT/deploy/stream-bench.py" "http://$API" -c 4 -n "$N_GEN" -r 1 |
        sed -n 's/^4 stream(s), rep 1: .* = \([0-9.]*\) tokens\/s aggregate.*/\1/p' | head -1
    HEARTH=$1 "$CL" stop >/dev/null
}

declare -A res
for r in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin=${!side}
        b=$(bench "$bin")
        o=$(ring1 "$bin")
        f=$(ring4 "$bin")
        echo "round $r $side: bench tg $b tok/s | ring --parallel 1: $o tok/s | ring 4 streams: $f tok/s"
        res[$side,bench]+="$b "
        res[$side,ring1]+="$o "
        res[$side,ring4]+="$f "
    done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for k in bench ring1 ring4; do
    a=$(echo "${res[A,$k]}" | med)
    b=$(echo "${res[B,$k]}" | med)
    awk -v k="$k" -v a="$a" -v b="$b" \
        'BEGIN { printf "%-6s median A %8.2f  B %8.2f  B/A %.3f\n", k, a, b, (a > 0 ? b / a : 0) }'
done
