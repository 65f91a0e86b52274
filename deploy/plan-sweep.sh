#!/usr/bin/env bash
# plan-sweep.sh - measures every candidate plan of a lab (deploy/lab.sh) and
# compares the head's own plan with the best one.
#
#   deploy/plan-sweep.sh SPEC.json [-m MODEL] [-n TOKENS] [--max N] [--reps R]
#                                  [--screen S] [--cut F] [--keep]
#                                  [-- extra head options, e.g. --ctx 512]
#
# First the lab comes up with the head's own plan (no --k, no --windows):
# that run warms the per-device profile caches and gives the layer count L.
# Then for each k dividing L (k <= 4) a coarse grid of windows (the head
# first, then the other devices in spec order; 0 leaves a device out of the
# ring): an even split, splits proportional to CPU share and to memory, the
# head alone, the weakest device left out, a heavy and a light head, taken in
# turn across k and cut at --max candidates (default 12); the head left out
# of the ring (0 layers: it keeps the embeddings and the output head) is
# tried with the head-alone ones, and the head's own k is swept too when it
# is above 4. Each plan is a
# fresh lab (`lab.sh up ... -- --k K --windows a,b,c`) after the page cache
# is dropped (memory-limited labs), then one unmeasured 2-token prompt (the
# cold start), then R greedy prompts (--reps, default 1) of TOKENS tokens
# (default 8) whose median generation rate counts. Candidates are raced:
# with --screen S (default 4; 0 turns it off) a candidate first runs one
# greedy prompt of S tokens, and when that rate is below F (--cut, default
# 0.5) times the best median measured so far (the head's first run
# included) the R full prompts are skipped: the row shows the screening rate
# marked "screened", and it is not taken as the best. A plan that slow
# cannot be the one the head's plan is compared against unless the screen
# misjudged it by 1/F; the slowest plans of a memory-short lab (0.2-0.7
# tok/s) no longer take minutes each. The head's own plan is
# measured again after the candidates (profile caches warm, as theirs were)
# and that run is the one judged; the first is listed too. Prints a
# table: plan, generation tok/s (the client's figure; min-max of the reps),
# predicted ms/token (the scheduler's latency for the plan in use,
# `pred_ms_token` of `hearth status --json`, when the head planned it; forced
# windows have none), its error against the measured ms/token, and the
# head's plan as a % of the best measured. Exits 1 when the head's plan is
# below 95% of the best swept plan or its prediction is off by more than 20%
# (the planner's acceptance bounds); 0 otherwise.
# Output also goes to $HR_LAB_DIR/sweep-<spec>.txt. --keep leaves the last lab up.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB="$ROOT/deploy/lab.sh"
export HR_LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
PROMPT="Once upon a time, in a small village by the sea, there lived an old fisherman who"

spec="" model="" ntok=8 max=12 reps=1 keep=0 extra=() screen=4 cut=0.5 best_so_far=0
[ $# -gt 0 ] && { spec=$1; shift; }
while [ $# -gt 0 ]; do
    case "$1" in
    -m) model=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --screen) screen=$2; shift 2 ;;
    --cut) cut=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "plan-sweep.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -f "$spec" ] || { echo "usage: $0 SPEC.json [-m MODEL] [-n TOKENS] [--max N] [-- head opts]" >&2; exit 2; }
margs=()
[ -n "$model" ] && margs=(-m "$model")
[ "$keep" = 1 ] || trap 'bash "$LAB" down >/dev/null 2>&1 || true' EXIT
mkdir -p "$HR_LAB_DIR"
out=$HR_LAB_DIR/sweep-$(basename "$spec" .json).txt
t_start=$SECONDS

# ring order: the head, then the others in spec order
n=$(jq '.devices | length' "$spec")
h=$(jq -r '(.head // 0) as $h | if ($h | type) == "number" then $h
           else ([.devices[].name] | index($h)) // -1 end' "$spec")
order=("$h")
for i in $(seq 0 $((n - 1))); do [ "$i" = "$h" ] || order+=("$i"); done
names=() cpus=() mems=()
for i in "${order[@]}"; do
    names+=("$(jq -r --argjson i "$i" '.devices[$i].name' "$spec")")
    cpus+=("$(jq -r --argjson i "$i" '.devices[$i].cpu // 1' "$spec")")
    mems+=("$(jq -r --argjson i "$i" '.devices[$i].mem_mb // 100000' "$spec")")
done
memlimited=$(jq -r '[.devices[].mem_mb // 0] | add > 0' "$spec")

log() { echo "[sweep $((SECONDS - t_start))s] $*" >&2; }

# alloc W WEIGHT...: W layers split in proportion to the weights (largest
# remainder; a weight of 0 gets 0), comma-separated.
alloc() {
    local W=$1
    shift
    echo "$@" | awk -v W="$W" '{
        s = 0; for (i = 1; i <= NF; i++) s += $i
        t = 0
        for (i = 1; i <= NF; i++) { q = W * $i / s; w[i] = int(q); r[i] = q - w[i]; t += w[i] }
        while (t < W) { b = 0; for (i = 1; i <= NF; i++) if ($i > 0 && (b == 0 || r[i] > r[b])) b = i; w[b]++; r[b] = -1; t++ }
        o = w[1]; for (i = 2; i <= NF; i++) o = o "," w[i]; print o }'
}

# candidates L: "k windows" lines, interleaved across k, unique, at most $max.
candidates() {
    local L=$1 ks=() k
    for k in 1 2 3 4; do [ $((L % k)) = 0 ] && ks+=("$k"); done
    # and the head's own k, when it is another (the same window shapes there)
    case "$own_k" in '' | *[!0-9]*) ;; *)
        [ "$own_k" -gt 4 ] && [ $((L % own_k)) = 0 ] && ks+=("$own_k") ;;
    esac
    local weak=1 i ws=()
    for i in $(seq 1 $((n - 1))); do # the weakest worker: smallest cpu x memory
        awk -v a="${cpus[i]}" -v b="${mems[i]}" -v c="${cpus[weak]}" -v d="${mems[weak]}" \
            'BEGIN { exit !(a * b < c * d) }' && weak=$i
    done
    for k in "${ks[@]}"; do
        local W=$((L / k)) ones=() drop=() heavy light rest
        for i in $(seq 0 $((n - 1))); do ones+=(1); done
        drop=("${ones[@]}")
        [ "$n" -gt 1 ] && drop[weak]=0
        ws=()
        ws[0]=$(alloc "$W" "${ones[@]}")
        ws[1]=$(alloc "$W" "${cpus[@]}")
        ws[2]=$(alloc "$W" "${mems[@]}")
        ws[3]=$W$(printf ',0%.0s' $(seq 2 "$n"))
        ws[4]=$(alloc "$W" "${drop[@]}")
        heavy=$((W / 2)) light=$((W / (2 * n)))
        if [ "$n" -gt 1 ]; then
            rest=$(alloc $((W - heavy)) "${ones[@]:1}")
            ws[5]=$heavy,$rest
            rest=$(alloc $((W - light)) "${ones[@]:1}")
            ws[6]=$light,$rest
        fi
        for i in "${!ws[@]}"; do echo "$i $k ${ws[i]}"; done
        # the head left out (it keeps the embeddings and the output head):
        # taken with the head-alone candidates
        if [ "$n" -gt 1 ]; then
            echo "3 $k 0,$(alloc "$W" "${ones[@]:1}")"
        fi
    done | sort -n -s -k1,1 | awk '!seen[$2 " " $3]++ { print $2, $3 }' | head -n "$max"
}

# pred_err PRED_MS TOK_S: the prediction's error against the measured
# ms/token, signed percent ("-" when either is unknown).
pred_err() {
    awk -v p="$1" -v t="$2" 'BEGIN { if (p + 0 > 0 && t + 0 > 0) printf "%+.0f%%", 100 * (p - 1000 / t) / (1000 / t); else print "-" }'
}

# gen_of OUTPUT: "TOKENS TOK/S" of a `lab.sh prompt` run's generation line
# (empty when there is none)
gen_of() {
    echo "$1" | sed -n 's/.*generation: \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' | tail -1
}

# run_plan LABEL [head options...]: one fresh lab, one prompt; prints
# "LABEL|k|windows|tok/s|pred_ms|note".
run_plan() {
    local label=$1
    shift
    bash "$LAB" down >/dev/null 2>&1 || true
    if [ "$memlimited" = true ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
    fi
    local upout st k ws pred tps gen note=""
    if ! upout=$(bash "$LAB" up "$spec" "${margs[@]}" -- "$@" "${extra[@]}" 2>&1); then
        note=$(echo "$upout" | grep -m1 "lab.sh:" | cut -c1-60)
        echo "$label|-|-|-|-|failed: $note"
        return
    fi
    st=$(bash "$LAB" status --json)
    k=$(echo "$st" | jq -r '.k')
    ws=$(echo "$st" | jq -r '[.devices[] | .w] | map(tostring) | join(",")')
    local perr r rates=()
    # one short unmeasured prompt first: the first request faults the cold
    # weights in, which is not the steady state the planner predicts
    bash "$LAB" prompt -n 2 --temp 0 --seed 1 --timeout 900 "$PROMPT" >/dev/null 2>&1 || true
    local nrep=$reps
    if [ "$race" = 1 ] && [ "$screen" -gt 0 ]; then
        perr=$(bash "$LAB" prompt -n "$screen" --temp 0 --seed 1 --timeout 900 "$PROMPT" 2>&1 >/dev/null) || true
        gen=$(gen_of "$perr")
        gen=${gen#* }
        if [ -n "$gen" ] && awk -v a="$gen" -v b="$best_so_far" -v f="$cut" 'BEGIN { exit !(a + 0 < f * b) }'; then
            rates=("$gen")
            nrep=0
            note="screened: $screen tokens below $cut x the best so far ($best_so_far)"
        fi
    fi
    for r in $(seq 1 "$nrep"); do
        perr=$(bash "$LAB" prompt -n "$ntok" --temp 0 --seed 1 --timeout 900 "$PROMPT" 2>&1 >/dev/null) ||
            note="prompt failed: $(echo "$perr" | grep -v '^$' | tail -1 | cut -c1-70)"
        gen=$(gen_of "$perr")
        [ -z "$gen" ] || [ "${gen%% *}" = "$ntok" ] || note="${gen%% *} tokens"
        [ -n "$gen" ] && rates+=("${gen#* }")
    done
    tps=-
    if [ "${#rates[@]}" -gt 0 ]; then # median, and the spread when repeated
        tps=$(printf '%s\n' "${rates[@]}" | sort -g | awk '{ v[NR] = $1 } END {
            m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }')
        [ "${#rates[@]}" -gt 1 ] && note="${note:+$note; }reps $(printf '%s\n' "${rates[@]}" | sort -g |
            sed -n '1p;$p' | paste -sd- -)"
    fi
    st=$(bash "$LAB" status --json)
    # the scheduler's ms per token for the plan in use (ring, links, exposed
    # disk and the head's embedding / output head / sampling)
    pred=$(echo "$st" | jq -r 'if (.pred_ms_token // 0) > 0 then .pred_ms_token * 10 | round / 10 else "-" end')
    echo "$label|$k|$ws|$tps|$pred|$note"
}

# best_of ROW: raises best_so_far to the row's rate unless it was screened out
best_of() {
    local label k ws tps pred note
    IFS='|' read -r label k ws tps pred note <<<"$1"
    case "$note" in screened*) return ;; esac
    awk -v a="$tps" -v b="$best_so_far" 'BEGIN { exit !(a + 0 > b + 0) }' && best_so_far=$tps
    return 0
}

log "spec $spec: ${names[*]} (ring order); $ntok tokens per plan"
log "head's own plan (no --k, no --windows)"
race=0
own=$(run_plan "head's plan")
log "$own"
best_of "$own"
race=1
L=$(bash "$LAB" status --json 2>/dev/null | jq -r '.n_layer' || echo "")
[ -n "$L" ] && [ "$L" != null ] || { echo "plan-sweep.sh: lab did not come up: $own" >&2; exit 1; }
own_k=$(echo "$own" | cut -d'|' -f2)
mapfile -t cands < <(candidates "$L")
log "$L layers; ${#cands[@]} candidates"
rows=()
j=0
for c in "${cands[@]}"; do
    j=$((j + 1))
    set -- $c
    log "plan $j/${#cands[@]}: k $1 windows $2"
    r=$(run_plan "k=$1 w=$2" --k "$1" --windows "$2")
    log "$r"
    rows+=("$r")
    best_of "$r"
done
# the head's own plan once more, measured like every candidate: profile
# caches warm, a fresh lab (its first start above also profiled each
# device while the others came up); the verdict takes this run
log "head's own plan again (warm profile caches)"
first=$own
race=0
own=$(run_plan "head's plan")
log "$own"

{
    echo "# plan sweep: $(jq -r '.name // "lab"' "$spec") ($spec), ring order: ${names[*]}"
    echo "# $L layers, $ntok generated tokens per plan x $reps reps (a candidate whose $screen-token screen ran below $cut x the best so far: that screen only), prompt of $(echo "$PROMPT" | wc -w) words; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
    printf '%-22s %-3s %-12s %10s %14s %8s  %s\n' plan k windows "tok/s" "pred ms/tok" "pred err" note
    best=0
    for r in "${rows[@]}" "${first/head\'s plan/head\'s plan, 1st}" "$own"; do
        IFS='|' read -r label k ws tps pred note <<<"$r"
        printf '%-22s %-3s %-12s %10s %14s %8s  %s\n' "$label" "$k" "$ws" "$tps" "$pred" \
            "$(pred_err "$pred" "$tps")" "$note"
        case "$label" in "head's plan"*) continue ;; esac
        case "$note" in screened*) continue ;; esac
        awk -v a="$tps" -v b="$best" 'BEGIN { exit !(a + 0 > b + 0) }' && best=$tps
    done
    IFS='|' read -r _ k ws tps pred _ <<<"$own"
    share=$(awk -v a="$tps" -v b="$best" 'BEGIN { if (b > 0 && a + 0 > 0) printf "%.1f", 100 * a / b; else print "n/a" }')
    err=$(pred_err "$pred" "$tps")
    echo "head's plan (k $k, windows $ws): $tps tok/s = $share% of the best swept plan ($best tok/s); predicted $pred ms/token, error $err"
    verdict=pass
    awk -v s="$share" 'BEGIN { exit !(s == "n/a" || s + 0 < 95) }' && verdict=fail && echo "FAIL: the head's plan is below 95% of the best swept plan"
    awk -v e="$err" 'BEGIN { sub(/%/, "", e); exit !(e == "-" || e + 0 > 20 || e + 0 < -20) }' && verdict=fail && echo "FAIL: the head's prediction is not within 20% of the measured ms/token"
    echo "verdict: $verdict"
    echo "# total $((SECONDS - t_start)) s"
} | tee "$out"
grep -q "^verdict: pass" "$out"
