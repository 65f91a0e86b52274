#!/usr/bin/env bash
# floor.sh - how close a memory-short lab (deploy/lab.sh) comes to its disk
# floor, and how the head's own plan compares with the earlier streaming
# runtime on the same lab, measured in one run.
#
#   deploy/floor.sh [SPEC.json] [-m MODEL] [-n TOKENS] [--reps R]
#
# SPEC defaults to deploy/labs/memory-short.json. Runs, each on a fresh lab
# with the page cache dropped, R greedy prompts of TOKENS tokens (median
# generation tok/s, the client's figure):
#   own          the head's own plan (no --k, no --windows)
#   legacy k=1   HEARTH_STREAM=legacy --no-prefetch, --k 1, windows even
#   legacy k=1+p HEARTH_STREAM=legacy, --k 1, windows even (prefetch on)
#   legacy k=2+p HEARTH_STREAM=legacy, --k 2, windows even (prefetch on)
# (HEARTH_STREAM=legacy is the earlier scheme: whole windows, WILLNEED of the
# next one, MADV_COLD of the finished one, on the computing thread.) Windows
# are the even split over all devices; where the head refuses that plan (a
# device cannot hold what its window needs), the even split over the devices
# the own plan gives layers, the note saying why.
#
# The floor, from the own plan's run:
#   weights      bytes of the layers and the output head (the file's tensors
#                less the embedding table, of which one row is read per token)
#   room_d       cgroup limit of device d less its agent's anonymous memory
#                (RssAnon sampled after the prompts: KV, buffers, heap)
#   nonresident  max(0, weights - sum_d room_d), bytes that must be read every token
#   disk         sum_d of each device's measured streaming rate (profile: min of
#                mmap and sequential reads under its throttle): every device
#                reads its own share in parallel
#   disk_ms      nonresident / disk, ms per token
#   compute_ms   the plan's predicted compute ms per token (profiled rates)
#   floor        1000 / max(disk_ms, compute_ms) tok/s
# and prints own / floor and own / best legacy. Exits 1 when own < 90% of the
# floor or own <= the best legacy run. Output also in $HR_LAB_DIR/floor-<spec>.txt.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB="$ROOT/deploy/lab.sh"
BIN=${HEARTH:-$ROOT/build/hearth}
export HR_LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
PROMPT="Once upon a time, in a small village by the sea, there lived an old fisherman who"

spec="$ROOT/deploy/labs/memory-short.json" model="" ntok=16 reps=2
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    spec=$1
    shift
fi
while [ $# -gt 0 ]; do
    case "$1" in
    -m) model=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "floor.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -f "$spec" ] || { echo "usage: $0 [SPEC.json] [-m MODEL] [-n TOKENS] [--reps R]" >&2; exit 2; }
[ -n "$model" ] || model=$(jq -r '.model' "$spec")
[ -f "$model" ] || { echo "floor.sh: no model $model (hearth mkmodel --shape tinyllama --type q4_0 -o $model)" >&2; exit 2; }
trap 'bash "$LAB" down >/dev/null 2>&1 || true' EXIT
mkdir -p "$HR_LAB_DIR"
out=$HR_LAB_DIR/floor-$(basename "$spec" .json).txt
t_start=$SECONDS
log() { echo "[floor $((SECONDS - t_start))s] $*" >&2; }
n=$(jq '.devices | length' "$spec")

# even W N: W layers over N devices, the first ones one more
even() { awk -v W="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) { w = int(W / n) + (i < W % n); o = o (i ? "," : "") w } print o }'; }

# run LABEL ENV [head options...]: one fresh lab; sets R_TPS (median tok/s), R_ST (status JSON)
run() {
    local label=$1 envs=$2
    shift 2
    bash "$LAB" down >/dev/null 2>&1 || true
    sync
    echo 3 >/proc/sys/vm/drop_caches
    R_TPS=- R_ST="" R_NOTE=""
    local upout
    if ! upout=$(env $envs bash "$LAB" up "$spec" -m "$model" -- "$@" 2>&1); then
        R_NOTE="lab failed: $(echo "$upout" | grep -m1 'lab.sh:' | cut -c1-160)"
        return
    fi
    local r perr gen rates=()
    bash "$LAB" prompt -n 2 --temp 0 --seed 1 --timeout 900 "$PROMPT" >/dev/null 2>&1 || true # cold start
    for r in $(seq 1 "$reps"); do
        perr=$(bash "$LAB" prompt -n "$ntok" --temp 0 --seed 1 --timeout 900 "$PROMPT" 2>&1 >/dev/null) ||
            R_NOTE="prompt failed: $(echo "$perr" | grep -v '^$' | tail -1 | cut -c1-100)"
        gen=$(echo "$perr" | sed -n 's/.*generation: \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\2/p' | tail -1)
        [ -n "$gen" ] && rates+=("$gen")
    done
    if [ "${#rates[@]}" -gt 0 ]; then
        R_TPS=$(printf '%s\n' "${rates[@]}" | sort -g | awk '{ v[NR] = $1 } END {
            m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }')
        R_NOTE="${R_NOTE:+$R_NOTE; }reps $(printf '%s\n' "${rates[@]}" | paste -sd' ' -)"
    fi
    R_ST=$(bash "$LAB" status --json)
    # each agent's anonymous memory now (kB), in device order
    R_ANON=()
    local i pid
    for i in $(seq 0 $((n - 1))); do
        pid=$(cat "$HR_LAB_DIR/pid.$i" 2>/dev/null || echo 0)
        R_ANON+=("$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)")
    done
    log "$label: $R_TPS tok/s ($R_NOTE); k $(echo "$R_ST" | jq -r .k), windows $(echo "$R_ST" | jq -r '[.devices[] | .w] | map(tostring) | join(",")')"
}

L=$("$BIN" info -m "$model" | sed -n 's/.*embd [0-9]*, layers \([0-9]*\),.*/\1/p')
log "spec $spec, model $model ($L layers), $ntok tokens x $reps reps per run"

run "own plan" ""
own_tps=$R_TPS own_st=$R_ST own_note=$R_NOTE own_anon=("${R_ANON[@]}")
# the own plan's windows, which also say the devices it gives layers
own_mask=$(echo "$own_st" | jq -r '[.devices[] | .w] | map(tostring) | join(",")')
rows=("own plan (k $(echo "$own_st" | jq -r .k), windows $own_mask)|$own_tps|$own_note")
own_active=$(echo "$own_mask" | tr ',' '\n' | awk '$1 > 0 { c++ } END { print c + 0 }')
best_legacy=0
for v in "1 --no-prefetch" "1" "2"; do
    set -- $v
    k=$1
    shift
    ws=$(even $((L / k)) "$n")
    run "legacy k=$k${1:-+prefetch}" "HEARTH_STREAM=legacy" --k "$k" --windows "$ws" "$@"
    if [ "$R_TPS" = - ] && [ -n "$own_active" ] && [ "$own_active" != "$n" ]; then
        # the head refused the even split over every device (a device
        # cannot hold its window's needs): the even split over the devices
        # the own plan uses, the others left out as there
        first_note=$R_NOTE
        ws=$(even $((L / k)) "$own_active" | awk -F, -v m="$own_mask" '{
            split(m, a, ","); j = 1; o = ""
            for (i = 1; i <= length(a); i++) { w = a[i] > 0 ? $(j++) : 0; o = o (i > 1 ? "," : "") w }
            print o }')
        run "legacy k=$k${1:-+prefetch}" "HEARTH_STREAM=legacy" --k "$k" --windows "$ws" "$@"
        R_NOTE="$R_NOTE; the even split over all devices: ${first_note#lab failed: }"
    fi
    rows+=("legacy k=$k $([ -z "${1:-}" ] && echo "+prefetch" || echo "no prefetch") (windows $ws)|$R_TPS|$R_NOTE")
    awk -v a="$R_TPS" -v b="$best_legacy" 'BEGIN { exit !(a + 0 > b + 0) }' && best_legacy=$R_TPS
done

# the floor's terms
weights=$("$BIN" info -m "$model" | awk '/MiB in layers/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "MiB" && $(i+2) == "in") l = $i; if ($(i+1) == "MiB" && $(i+2) == "output") o = $i } } END { printf "%.0f", (l + o) * 1048576 }')
{
    echo "# floor: $(jq -r '.name // "lab"' "$spec") ($spec), model $model"
    echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $ntok tokens, $reps reps per run"
    printf '%-48s %10s  %s\n' run "tok/s" note
    for r in "${rows[@]}"; do
        IFS='|' read -r label tps note <<<"$r"
        printf '%-48s %10s  %s\n' "$label" "$tps" "$note"
    done
    echo "weights (layers + output head): $(awk -v b="$weights" 'BEGIN { printf "%.1f MiB", b / 1048576 }')"
    room=0 disk=0
    for i in $(seq 0 $((n - 1))); do
        name=$(jq -r --argjson i "$i" '.devices[$i].name' "$spec")
        lim=$(jq -r --argjson i "$i" '.devices[$i].mem_mb // 0' "$spec")
        anon=${own_anon[i]:-0}
        mbs=$(echo "$own_st" | jq -r --arg n "$name" '.devices[] | select(.name == $n) | .info | [.disk_mbs, .disk_mmap_mbs] | map(select(. > 0)) | min // 0')
        r=$(awk -v l="$lim" -v a="$anon" 'BEGIN { r = l * 1048576 - a * 1024; printf "%.0f", (r > 0 ? r : 0) }')
        room=$((room + r))
        disk=$(awk -v d="$disk" -v m="$mbs" 'BEGIN { printf "%.3f", d + m }')
        echo "  $name: limit $lim MiB, agent anonymous $(awk -v a="$anon" 'BEGIN { printf "%.1f", a / 1024 }') MiB -> room $(awk -v r="$r" 'BEGIN { printf "%.1f", r / 1048576 }') MiB; streaming rate $(printf '%.1f' "$mbs") MB/s (measured)"
    done
    nonres=$(awk -v w="$weights" -v r="$room" 'BEGIN { v = w - r; printf "%.0f", (v > 0 ? v : 0) }')
    disk_ms=$(awk -v b="$nonres" -v d="$disk" 'BEGIN { printf "%.1f", (d > 0 ? 1000 * b / (d * 1e6) : 0) }')
    comp_ms=$(echo "$own_st" | jq -r ".pred_compute_ms_token // 0")
    [ "$comp_ms" = null ] && comp_ms=0
    comp_ms=$(printf '%.1f' "$comp_ms")
    echo "nonresident: $(awk -v b="$nonres" 'BEGIN { printf "%.1f", b / 1048576 }') MiB per token; disk $disk MB/s together -> $disk_ms ms per token"
    echo "compute: $comp_ms ms per token (the plan's prediction from profiled rates)"
    floor=$(awk -v a="$disk_ms" -v c="$comp_ms" 'BEGIN { m = a > c ? a : c; printf "%.3f", (m > 0 ? 1000 / m : 0) }')
    echo "floor: $floor tok/s"
    pred=$(echo "$own_st" | jq -r 'if (.pred_ms_token // 0) > 0 then .pred_ms_token * 10 | round / 10 else "n/a" end')
    echo "own plan predicted $pred ms per token by the scheduler, measured $(awk -v t="$own_tps" 'BEGIN { printf "%.1f", (t > 0 ? 1000 / t : 0) }') ms"
    share=$(awk -v a="$own_tps" -v f="$floor" 'BEGIN { if (f > 0 && a + 0 > 0) printf "%.1f", 100 * a / f; else print "n/a" }')
    vs=$(awk -v a="$own_tps" -v b="$best_legacy" 'BEGIN { if (b > 0 && a + 0 > 0) printf "%.2f", a / b; else print "n/a" }')
    echo "own plan: $own_tps tok/s = $share% of the floor; $vs x the best legacy run ($best_legacy tok/s)"
    verdict=pass
    awk -v s="$share" 'BEGIN { exit !(s == "n/a" || s + 0 < 90) }' && verdict=fail && echo "FAIL: below 90% of the floor"
    awk -v v="$vs" 'BEGIN { exit !(v == "n/a" || v + 0 <= 1) }' && verdict=fail && echo "FAIL: not faster than the best legacy run"
    echo "verdict: $verdict"
    echo "# total $((SECONDS - t_start)) s"
} | tee "$out"
grep -q '^verdict: pass' "$out"
