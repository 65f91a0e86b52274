#!/usr/bin/env bash
# bench-cluster.sh - generation tokens/s of local hearth clusters against the
# single process, on a ~600 MB+ model (default: generated TinyLlama-1.1B
# shape, Q4_0, at /tmp/tl-q4_0.gguf).
#
#   deploy/bench-cluster.sh [MODEL] [MEM_MB_PER_AGENT]
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
MODEL=${1:-/tmp/tl-q4_0.gguf}
N_GEN=${N_GEN:-32}
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
