#!/bin/sh
# check_accuracy.sh - predicted vs measured decode time per token.
#
# usage: profiler/check_accuracy.sh HEARTH_BINARY MODEL.gguf [THREADS] [ROUNDS]
#
# Alternates `hearth profile --no-cache` (predicted ms/token for the whole
# model on this device, all weights resident) with `hearth bench` (measured
# generation tokens/s, median of 3) ROUNDS times (default 3), printing each
# pair, the 1-minute load average and the ratio predicted/measured. The
# acceptance band is 0.75..1.25. The machine should be otherwise idle:
# `bench` has no defence against other programs taking the CPU (the profile
# repeats contended repetitions, see "repetitions" in its JSON).
set -eu
H=${1:?hearth binary}
M=${2:?model file}
T=${3:-2}
R=${4:-3}
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
i=1
while [ "$i" -le "$R" ]; do
    load0=$(cut -d' ' -f1 /proc/loadavg)
    pred=$("$H" profile -m "$M" -t "$T" --no-cache --cache-dir "$CACHE" --json 2>/dev/null |
        jq -r '[.prediction.token.total_ms, .device.repetitions.contended,
                .device.repetitions.total] | @tsv')
    pms=$(echo "$pred" | cut -f1)
    cont=$(echo "$pred" | cut -f2)
    tot=$(echo "$pred" | cut -f3)
    tps=$("$H" bench -m "$M" -t "$T" 2>/dev/null | sed -n 's/^generation: *\([0-9.]*\) tokens.*/\1/p')
    load1=$(cut -d' ' -f1 /proc/loadavg)
    awk -v i="$i" -v p="$pms" -v t="$tps" -v l0="$load0" -v l1="$load1" -v c="$cont" -v n="$tot" \
        'BEGIN { m = 1000 / t; printf "round %d: predicted %.1f ms/token, measured %.1f ms/token (%.2f tokens/s), ratio %.2f %s  [load %s -> %s, %d/%d reps contended]\n", i, p, m, t, p / m, (p / m >= 0.75 && p / m <= 1.25) ? "ok" : "OUT", l0, l1, c, n }'
    i=$((i + 1))
done
