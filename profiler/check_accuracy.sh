#!/bin/sh
# check_accuracy.sh - predicted vs measured decode time per token.
#
# usage: profiler/check_accuracy.sh HEARTH_BINARY MODEL.gguf [THREADS] [ROUNDS]
#
# Alternates `hearth profile --no-cache` (predicted ms/token for the whole
# model on this device, all weights resident) with `hearth bench` (measured
# generation tokens/s, median of 5) ROUNDS times (default 3), printing each
# pair, the 1-minute load average and the ratio predicted/measured. The
# acceptance band is 0.75..1.25. The machine should be otherwise idle:
# `bench` has no defence against other programs taking the CPU (the profile
# repeats contended repetitions, see "repetitions" in its JSON), so before
# each round the script waits (up to $WAIT s, default 300) for three
# consecutive 2 s windows with the CPUs less than 15% busy.
set -eu
H=${1:?hearth binary}
M=${2:?model file}
T=${3:-2}
R=${4:-3}
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
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
    [ "$calm" -ge 3 ] || echo "(machine still busy after ${WAIT} s; measuring anyway)"
}
i=1
while [ "$i" -le "$R" ]; do
    wait_idle
    load0=$(cut -d' ' -f1 /proc/loadavg)
    pred=$("$H" profile -m "$M" -t "$T" --no-cache --cache-dir "$CACHE" --json 2>/dev/null |
        jq -r '[.prediction.token.total_ms, .device.repetitions.contended,
                .device.repetitions.total] | @tsv')
    pms=$(echo "$pred" | cut -f1)
    cont=$(echo "$pred" | cut -f2)
    tot=$(echo "$pred" | cut -f3)
    tps=$("$H" bench -m "$M" -t "$T" -r 5 2>/dev/null | sed -n 's/^generation: *\([0-9.]*\) tokens.*/\1/p')
    load1=$(cut -d' ' -f1 /proc/loadavg)
    awk -v i="$i" -v p="$pms" -v t="$tps" -v l0="$load0" -v l1="$load1" -v c="$cont" -v n="$tot" \
        'BEGIN { m = 1000 / t; printf "round %d: predicted %.1f ms/token, measured %.1f ms/token (%.2f tokens/s), ratio %.2f %s  [load %s -> %s, %d/%d reps contended]\n", i, p, m, t, p / m, (p / m >= 0.75 && p / m <= 1.25) ? "ok" : "OUT", l0, l1, c, n }'
    i=$((i + 1))
done
