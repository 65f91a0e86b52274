#!/bin/sh
# check_cgroup.sh - the profile inside a memory cgroup smaller than the model:
# the reported available memory must be the cgroup's limit, and the predicted
# disk term must be within a factor of 2 of the measured slowdown
# (generation ms/token inside the cgroup minus outside it).
#
# usage: profiler/check_cgroup.sh HEARTH_BINARY MODEL.gguf LIMIT_MIB [THREADS]
#
# Needs root and a cgroup v1 memory controller at /sys/fs/cgroup/memory (or
# cgroup v2 at /sys/fs/cgroup with the memory controller enabled). Creates
# its own child cgroup, runs `hearth profile` and `hearth bench` in it, and
# removes it again. Evicts the model file from the page cache first (so its
# pages are charged to the new cgroup): the next run reads it from disk.
# Speeds come from `hearth run` (greedy, 24 tokens after a 28-token prompt):
# `hearth bench` allocates a 1 GiB bandwidth buffer and would be OOM-killed.
set -eu
H=${1:?hearth binary}
M=${2:?model file}
LIMIT=${3:?limit in MiB}
T=${4:-2}
BYTES=$((LIMIT * 1024 * 1024))
if [ -d /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/hearth-prof-check-$$
    mkdir "$CG"
    echo "$BYTES" > "$CG/memory.limit_in_bytes"
else
    CG=/sys/fs/cgroup/hearth-prof-check-$$
    mkdir "$CG"
    echo "$BYTES" > "$CG/memory.max"
fi
CACHE=$(mktemp -d)
cleanup() {
    rmdir "$CG" 2>/dev/null || true
    rm -rf "$CACHE"
}
trap cleanup EXIT
PROMPT="the quick brown fox jumps over the lazy dog while hearth profiles"
gen_ms() { sed -n 's/.*generation: [0-9]* tokens in [0-9.]* s, \([0-9.]*\) tokens\/s.*/\1/p' |
    awk '{ printf "%.2f", 1000 / $1 }'; }
run_ms() { "$@" run -m "$M" -t "$T" -p "$PROMPT" -n 24 --temp 0 2>&1 >/dev/null | gen_ms; }
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"; }
# The machine may be shared: wait (up to $WAIT s) for the CPUs to be idle.
WAIT=${WAIT:-300}
busy_pct() {
    a=$(head -1 /proc/stat)
    sleep 2
    b=$(head -1 /proc/stat)
    printf '%s\n%s\n' "$a" "$b" | awk '{ idle = $5 + $6; tot = 0; for (k = 2; k <= NF; k++) tot += $k
        if (NR == 1) { i0 = idle; t0 = tot } else printf "%d", 100 * (1 - (idle - i0) / (tot - t0)) }'
}
wait_idle() {
    waited=0
    calm=0
    while [ "$waited" -lt "$WAIT" ] && [ "$calm" -lt 3 ]; do
        if [ "$(busy_pct)" -lt 15 ]; then calm=$((calm + 1)); else calm=0; fi
        waited=$((waited + 2))
    done
    [ "$calm" -ge 3 ] || echo "  (machine still busy after ${WAIT} s; measuring anyway)"
}

echo "baseline (no limit):"
wait_idle
base=$(run_ms "$H")
echo "  generation $base ms/token"
dd if="$M" iflag=nocache count=0 2>/dev/null || true
echo "inside a ${LIMIT} MiB cgroup:"
in_cg "$H" profile -m "$M" -t "$T" -P 28 -N 24 --cache-dir "$CACHE" --json 2>/dev/null \
    > "$CACHE/p.json"
jq -r '"  cgroup v\(.device.memory.cgroup.version) limit \(.device.memory.cgroup.limit_bytes / 1048576) MiB, available for weights \(.device.memory.weights_available_bytes / 1048576 | floor) MiB, resident assumed \(.prediction.resident_bytes / 1048576 | floor) MiB\n  predicted: total \(.prediction.token.total_ms) ms/token, disk term \(.prediction.token.disk_ms) ms (mmap fault rate \(.device.disk.mmap_read_mbs) MB/s)"' "$CACHE/p.json"
dd if="$M" iflag=nocache count=0 2>/dev/null || true
wait_idle
cg=$(run_ms in_cg "$H")
echo "  generation $cg ms/token"
disk=$(jq -r '.prediction.token.disk_ms' "$CACHE/p.json")
awk -v b="$base" -v c="$cg" -v d="$disk" 'BEGIN { s = c - b; printf "measured slowdown %.1f ms/token, predicted disk term %.1f ms: ratio %.2f %s\n", s, d, d / s, (d / s >= 0.5 && d / s <= 2) ? "ok" : "OUT" }'
