#!/usr/bin/env bash
# plan-sweep.sh - measures candidate plans of a lab (deploy/lab.sh) and
# compares the head's own plan with the best of them, judged on medians of
# fresh labs measured in turn.
#
#   deploy/plan-sweep.sh SPEC.json [-m MODEL] [-n TOKENS] [--max N] [--reps R]
#                                  [--screen S] [--cut F] [--final B]
#                                  [--rounds N] [--keep]
#                                  [-- extra head options, e.g. --ctx 512]
#   deploy/plan-sweep.sh selftest  checks the statistics and the verdict on
#                                  made-up rows, then a whole sweep against a
#                                  stand-in lab (HR_SWEEP_LAB: a script that
#                                  answers up, down, status and prompt); no
#                                  root, no agents
#
# Every measurement below is one visit: a fresh lab (`lab.sh up`, for a
# candidate `-- --k K --windows a,b,c`) after the page cache is dropped
# (memory-limited labs), one unmeasured 2-token prompt (the cold start), a
# wait until every device that keeps its windows resident holds them all
# (`resident` of `hearth status --json`, at most 120 s; the row's note says
# when that ran out),
# then R greedy prompts (--reps, default 1) of TOKENS tokens (default 8),
# each giving the client's generation tok/s; the plan's predicted ms/token
# is `pred_ms_token` of `hearth status --json` after the prompts.
#
# 1. The head's own plan (no --k, no --windows): one visit, which warms the
#    per-device profile caches and gives the layer count L. Listed as
#    "head's plan, 1st"; it does not count in the verdict.
# 2. The sweep: for each k dividing L (k <= 4) a coarse grid of windows (the
#    head first, then the other devices in spec order; 0 leaves a device
#    out of the ring): an even split, splits proportional to CPU share and
#    to memory, the head alone, the weakest device left out, a heavy and a
#    light head, taken in turn across k and cut at --max candidates
#    (default 12); the head left out of the ring (0 layers: it keeps the
#    embeddings and the output head) is tried with the head-alone ones, and
#    the head's own k is swept too when it is above 4 (where a split gives
#    the head more layers a round than its own plan holds over a round, the
#    same split with the head capped at that comes first, the uncapped one
#    after every capped one: a head whose memory went to the output head
#    cannot hold them). Rounds with windows
#    of their own (`--windows 3,2,2/2,3,2`): for k > 1 dividing L the CPU
#    and memory splits in turn, and for k = 3, 5 and the head's own k when
#    they do not divide L rounds of L / k or one more split by memory and
#    rounds of ceil(L / k) with a shorter last one split by CPU share. One
#    visit each,
#    raced: with --screen S (default 4; 0 turns it off) a candidate first
#    runs one greedy prompt of S tokens, and when that rate is below F
#    (--cut, default 0.5) times the best median so far (the head's first
#    visit included) its R prompts are skipped: the row shows the screening
#    rate marked "screened" and the candidate goes no further.
# 3. Interleaved: the head's own plan and the B best swept candidates
#    (--final, default 2) by their sweep median, leaving out screened and
#    failed ones and any with the head's first plan (same k and windows),
#    are visited again in turn, N rounds (--rounds, default 3): A B C, A B
#    C, ..., so slow drifts of the machine and lab-to-lab differences fall
#    on every plan alike. Each plan gets N x R rates (the same number for
#    each, unless a visit failed: the row says so), their median and their
#    spread (min-max); the head re-plans in each of its fresh labs (a row
#    lists the plans it chose when they differ), and its prediction is the
#    median of its N visits' figures, with their min-max.
#
# Prints two tables: the sweep (plan, k, windows, tok/s median of its R
# prompts, predicted ms/token, the prediction's signed error against the
# measured ms/token, note: the reps' min-max, screened, failed) and the
# interleaved one (median tok/s, min-max, n, median prediction and its
# min-max, error of the median prediction against 1000 / the median rate).
# A prediction marked * is the cost model's figure for windows the
# scheduler did not choose (`pred_evaluated`: every forced candidate, and
# the head's plan when it fell back to an even split); unmarked ones are
# the scheduler's own prediction for the plan it chose. Then the verdict,
# on the interleaved medians only: the head's median as a % of the best
# interleaved candidate's median, and the error of the head's median
# prediction. Exits 1 when the head's plan is below 95% of that best or its
# prediction is off by more than 20% (the planner's acceptance bounds), or
# there is no candidate to compare with; 0 otherwise. Output also goes to
# $HR_LAB_DIR/sweep-<spec>.txt. --keep leaves the last lab up.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB=${HR_SWEEP_LAB:-$ROOT/deploy/lab.sh} # selftest: a stand-in lab
export HR_LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
PROMPT="Once upon a time, in a small village by the sea, there lived an old fisherman who"

# ---- statistics and the verdict (no lab: `plan-sweep.sh selftest` checks them)

# stats V...: "MEDIAN MIN MAX N" of the numbers given ("- - - 0" for none)
stats() {
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "- - - 0"; exit }
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3f %s %s %d\n", m, v[1], v[NR], NR }'
}

# pred_err PRED_MS TOK_S: the prediction's error against the measured
# ms/token, signed percent ("-" when either is unknown).
pred_err() {
    awk -v p="$1" -v t="$2" 'BEGIN { if (p + 0 > 0 && t + 0 > 0) printf "%+.0f%%", 100 * (p - 1000 / t) / (1000 / t); else print "-" }'
}

# finalists B OWNK OWNWS ROW...: the B best sweep rows by their median
# tok/s ("K WINDOWS" lines, best first), leaving out screened and failed
# rows and the head's own first plan (k OWNK, windows OWNWS). A row is
# "label|k|windows|tok/s|pred|note|rates|evaluated".
finalists() {
    local b=$1 ok=$2 ows=$3 r label k ws tps
    shift 3
    for r in "$@"; do
        IFS='|' read -r label k ws tps _ note _ <<<"$r"
        case "$note" in screened* | *failed*) continue ;; esac
        [[ $tps =~ ^[0-9.]+$ ]] || continue
        [ "$k $ws" = "$ok $ows" ] && continue
        echo "$tps $k $ws"
    done | sort -s -k1,1gr | head -n "$b" | cut -d' ' -f2-
}

# verdict HEADROW CANDROW...: the verdict lines on interleaved rows
# ("label|k|windows|median|min|max|n|pred median|pred min|pred max|note"):
# the head's median as a % of the best candidate median, the head's
# prediction error; last line "verdict: pass" or "verdict: fail". With no
# candidate left for the interleaved runs (every one screened out), the
# best screening rate stands in (SCREENED="rate|label", set by the caller),
# labelled as such: a screen ran below the cut of the head's first visit.
verdict() {
    local head=$1 r best=0 blabel="" bmin="" bmax="" bn=0 kind="interleaved medians"
    shift
    local label k ws med lo hi n pm _pl _ph note
    for r in "$@"; do
        IFS='|' read -r label k ws med lo hi n pm _pl _ph note <<<"$r"
        [[ $med =~ ^[0-9.]+$ ]] || continue
        if awk -v a="$med" -v b="$best" 'BEGIN { exit !(a + 0 > b + 0) }'; then
            best=$med blabel=$label bmin=$lo bmax=$hi bn=$n
        fi
    done
    if [ "$best" = 0 ] && [ -n "${SCREENED:-}" ]; then
        IFS='|' read -r best blabel <<<"$SCREENED"
        bn=1 bmin=$best bmax=$best kind="its interleaved median against the best candidate's screen (every candidate screened out)"
    fi
    IFS='|' read -r label k ws med lo hi n pm _pl _ph note <<<"$head"
    local share err v=pass
    share=$(awk -v a="$med" -v b="$best" 'BEGIN { if (b > 0 && a + 0 > 0) printf "%.1f", 100 * a / b; else print "n/a" }')
    err=$(pred_err "$pm" "$med")
    echo "head's plan (k $k, windows $ws): $med tok/s (median of $n, $lo-$hi) = $share% of the best swept plan by $kind (${blabel:-none}: $best tok/s, median of $bn, ${bmin:-}-${bmax:-}); predicted $pm ms/token (median), error $err"
    if awk -v s="$share" 'BEGIN { exit !(s == "n/a" || s + 0 < 95) }'; then
        v=fail
        echo "FAIL: the head's plan is below 95% of the best swept plan"
    fi
    if awk -v e="$err" 'BEGIN { sub(/%/, "", e); exit !(e == "-" || e + 0 > 20 || e + 0 < -20) }'; then
        v=fail
        echo "FAIL: the head's prediction is not within 20% of the measured ms/token"
    fi
    echo "verdict: $v"
}

# irow LABEL WANT RATES PREDS CHOSEN EVALUATED FAILS: a plan's interleaved
# row "label|k|windows|median|min|max|n|pred median|pred min|pred max|note"
# from its visits: RATES and PREDS space-separated, CHOSEN "k K: WINDOWS;"
# per visit (k and windows: the most frequent; the note lists them all
# when they differ), WANT the number of rates every plan should have,
# EVALUATED 1 when a prediction was the cost model's evaluation (pred *),
# FAILS the visits' failures.
irow() {
    local label=$1 want=$2 rates=$3 preds=$4 chosen=$5 peval=$6 fails=$7
    local med lo hi cnt pm pl ph top note="" plans
    # shellcheck disable=SC2086
    read -r med lo hi cnt <<<"$(stats $rates)"
    # shellcheck disable=SC2086
    read -r pm pl ph _ <<<"$(stats $preds)"
    [ "$pm" = - ] || pm=$(awk -v p="$pm" 'BEGIN { printf "%.1f", p }')
    plans=$(echo "$chosen" | tr ';' '\n' | grep . | sort | uniq -c | sort -s -k1,1nr)
    top=$(echo "$plans" | head -1 | sed 's/^ *[0-9]* k //')
    [ "$(echo "$plans" | wc -l)" -gt 1 ] &&
        note="plans: $(echo "$plans" | awk '{ printf "%s%s %s %s x%s", (NR > 1 ? ", " : ""), $2, $3, $4, $1 }')"
    [ "$cnt" = "$want" ] || note="${note:+$note; }$cnt of $want rates"
    [ -n "$fails" ] && note="${note:+$note; }$fails"
    [ "$peval" = 1 ] && [ "$pm" != - ] && pm="$pm*"
    echo "$label|${top%%:*}|${top#*: }|$med|$lo|$hi|$cnt|$pm|$pl|$ph|$note"
}

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

# rounds_ws L K MODE WEIGHT...: windows for K rounds of their own over L
# layers (K need not divide L): MODE even: rounds of L / K or one more (the
# longer first), each split by the weights; short: rounds of ceil(L / K)
# and a shorter last one; mix: rounds split by the weights (every second
# round by the second half of WEIGHT...: "cpus... -- mems..."). Rows are
# separated by "/", or one row when every round is the same.
rounds_ws() {
    local L=$1 K=$2 mode=$3 r R up rows=() w1=() w2=() x second=0
    shift 3
    for x in "$@"; do
        if [ "$x" = -- ]; then second=1
        elif [ "$second" = 1 ]; then w2+=("$x")
        else w1+=("$x"); fi
    done
    [ "${#w2[@]}" -gt 0 ] || w2=("${w1[@]}")
    up=$(((L + K - 1) / K))
    for r in $(seq 0 $((K - 1))); do
        case "$mode" in
        short) R=$up; [ "$r" = $((K - 1)) ] && R=$((L - (K - 1) * up)) ;;
        *) R=$((L / K + (r < L % K ? 1 : 0))) ;;
        esac
        [ "$R" -ge 0 ] || return 1
        if [ "$mode" = mix ] && [ $((r % 2)) = 1 ]; then
            rows+=("$(alloc "$R" "${w2[@]}")")
        else
            rows+=("$(alloc "$R" "${w1[@]}")")
        fi
    done
    if [ "$(printf '%s\n' "${rows[@]}" | sort -u | wc -l)" = 1 ]; then
        echo "${rows[0]}"
    else
        local IFS=/
        echo "${rows[*]}"
    fi
}

# alloc_cap W CAP WEIGHT...: alloc, with the first device's share at most
# CAP (the rest split over the others by their weights)
alloc_cap() {
    local W=$1 cap=$2 a
    shift 2
    a=$(alloc "$W" "$@")
    if [ "${a%%,*}" -gt "$cap" ]; then
        shift
        echo "$cap,$(alloc $((W - cap)) "$@")"
    else
        echo "$a"
    fi
}

# candidates L: "k windows" lines, interleaved across k, unique, at most $max
# (windows "a,b,c", or rounds of their own "a,b,c/d,e,f").
candidates() {
    local L=$1 ks=() k
    for k in 1 2 3 4; do [ $((L % k)) = 0 ] && ks+=("$k"); done
    # and the head's own k, when it is another (the same window shapes there)
    case "$own_k" in '' | *[!0-9]*) ;; *)
        [ "$own_k" -gt 4 ] && [ $((L % own_k)) = 0 ] && ks+=("$own_k") ;;
    esac
    local weak=1 i ws=() hown
    # the layers the head's own plan gives the head, all rounds together
    # (empty: unknown); its memory went to the output head and the others
    hown=$(echo "${own_ws:-}" | awk -F/ -v k="${own_k:-}" 'NF && k ~ /^[0-9]+$/ {
        for (r = 1; r <= NF; r++) { split($r, w, ","); s += w[1] }
        print (NF == 1 ? s * k : s) }')
    for i in $(seq 1 $((n - 1))); do # the weakest worker: smallest cpu x memory
        awk -v a="${cpus[i]}" -v b="${mems[i]}" -v c="${cpus[weak]}" -v d="${mems[weak]}" \
            'BEGIN { exit !(a * b < c * d) }' && weak=$i
    done
    {
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
        # a head given more layers a round than its own plan holds over a
        # round (its memory went to the output head, say) may not hold
        # them: the same splits with the head at that (the rest over the
        # others) come first, the uncapped ones after every capped one
        local cap="" off=0
        if [ -n "$hown" ] && [ "$n" -gt 1 ]; then
            cap=$((hown / k))
            echo "0 $k $(alloc_cap "$W" "$cap" "${ones[@]}")"
            echo "1 $k $(alloc_cap "$W" "$cap" "${cpus[@]}")"
            echo "2 $k $(alloc_cap "$W" "$cap" "${mems[@]}")"
            echo "4 $k $(alloc_cap "$W" "$cap" "${drop[@]}")"
            if [ "$cap" = 0 ]; then
                off=10
                [ "$k" -gt 1 ] && echo "2 $k $(rounds_ws "$L" "$k" mix 0 "${cpus[@]:1}" -- 0 "${mems[@]:1}")"
            fi
        fi
        for i in "${!ws[@]}"; do
            local head=${ws[i]%%,*}
            if [ "$i" = 3 ] || [ -z "$cap" ] || [ "$head" -le "$cap" ]; then
                echo "$i $k ${ws[i]}"
            else
                echo "$((i + 10)) $k ${ws[i]}"
            fi
        done
        # the head left out (it keeps the embeddings and the output head):
        # taken with the head-alone candidates
        if [ "$n" -gt 1 ]; then
            echo "3 $k 0,$(alloc "$W" "${ones[@]:1}")"
        fi
        # rounds of their own: the CPU and the memory split in turn
        [ "$k" -gt 1 ] && echo "$((2 + off)) $k $(rounds_ws "$L" "$k" mix "${cpus[@]}" -- "${mems[@]}")"
    done
    # k that do not divide L: rounds of L / k or one more, by memory; rounds
    # of ceil(L / k) and a shorter last one, by CPU
    local uk=(3 5)
    case "$own_k" in '' | *[!0-9]*) ;; *)
        [ "$own_k" -gt 1 ] && [ $((L % own_k)) != 0 ] && uk=("$own_k" "${uk[@]}") ;;
    esac
    for k in "${uk[@]}"; do
        if [ "$k" -lt "$L" ] && [ $((L % k)) != 0 ]; then
            local off=0
            if [ -n "$hown" ] && [ "$n" -gt 1 ] && [ $((hown / k)) = 0 ]; then
                off=10
                echo "1 $k $(rounds_ws "$L" "$k" even 0 "${mems[@]:1}")"
                echo "2 $k $(rounds_ws "$L" "$k" short 0 "${cpus[@]:1}")"
            fi
            echo "$((1 + off)) $k $(rounds_ws "$L" "$k" even "${mems[@]}")"
            echo "$((2 + off)) $k $(rounds_ws "$L" "$k" short "${cpus[@]}")"
        fi
    done
    } | awk 'NF == 3' | sort -n -s -k1,1 | awk '!seen[$2 " " $3]++ { print $2, $3 }' | head -n "$max"
}

# windows_of STATUS_JSON: the plan's windows as --windows takes them: one
# size per device ("3,2,1") when every round is the same, else each
# round's separated by "/" ("3,2,1/2,2,2"); a status without per-round
# windows gives the sizes ("w")
windows_of() {
    echo "$1" | jq -r '[.devices[] | (.windows // [.w])] as $d
        | ([$d[] | length] | max // 0) as $k
        | [range(0; $k) as $r | [$d[] | (.[$r] // .[0] // 0) | tostring] | join(",")]
        | if (unique | length) <= 1 then (.[0] // "") else join("/") end'
}

# selftest: the statistics, the choice of finalists and the verdict on
# made-up rows; exits 1 on the first wrong answer.
selftest() {
    local fail=0 got
    want() {
        if [ "$2" = "$3" ]; then echo "ok   $1"; else
            echo "FAIL $1: got '$2', want '$3'"
            fail=1
        fi
    }
    want "median, odd" "$(stats 3 1 2)" "2.000 1 3 3"
    want "median, even" "$(stats 4 1 3 2)" "2.500 1 4 4"
    want "no numbers" "$(stats - '')" "- - - 0"
    want "error" "$(pred_err 110 10)" "+10%"
    got=$(finalists 2 2 "6,1,2,2" \
        "k=1 w=22,0,0|1|22,0,0|8.0|100|| 8.0|1" \
        "k=2 w=5,1,4,1|2|5,1,4,1|9.5|100|| 9.5|1" \
        "k=2 w=6,1,2,2|2|6,1,2,2|9.9|100|| 9.9|1" \
        "k=3 w=3,2,2,0|3|3,2,2,0|12|100|screened: 4 tokens| 12|1" \
        "k=4 w=2,2,1,0|4|2,2,1,0|11|-|prompt failed: x| 11|1" \
        "k=1 w=11,11,0,0|1|11,11,0,0|7.0|100|| 7.0|1" | paste -sd';' -)
    want "finalists: best 2, not screened, failed or the head's own" "$got" "2 5,1,4,1;1 22,0,0"
    # the sweep's single visit said 9.5 for the candidate; interleaved, it is 7.0
    got=$(verdict "head's plan|2|6,1,2,2|7.2|6.9|7.5|3|140|130|150|" \
        "k=2 w=5,1,4,1|2|5,1,4,1|7.0|6.0|9.5|3|150|150|150|" \
        "k=1 w=22,0,0|1|22,0,0|6.0|5.9|6.1|3|160|160|160|")
    want "pass on interleaved medians" "$(echo "$got" | tail -1)" "verdict: pass"
    want "share of the best median" "$(echo "$got" | grep -o '= [0-9.]*%' | head -1)" "= 102.9%"
    got=$(verdict "head's plan|2|6,1,2,2|6.0|5.0|7.5|3|166|160|170|" \
        "k=2 w=5,1,4,1|2|5,1,4,1|7.0|6.0|9.5|3|150|150|150|")
    want "below 95%" "$(echo "$got" | grep -c 'below 95%')" 1
    want "fail" "$(echo "$got" | tail -1)" "verdict: fail"
    got=$(verdict "head's plan|2|6,1,2,2|7.0|6.9|7.5|3|100|90|110|" \
        "k=2 w=5,1,4,1|2|5,1,4,1|7.0|6.0|9.5|3|150|150|150|")
    want "prediction off by 30%" "$(echo "$got" | grep -c 'not within 20%')" 1
    got=$(verdict "head's plan|2|6,1,2,2|7.0|6.9|7.5|3|143|140|145|")
    want "no candidate" "$(echo "$got" | tail -1)" "verdict: fail"
    got=$(SCREENED="3.2|k=1 w=8,7,7" verdict "head's plan|2|6,1,2,2|7.0|6.9|7.5|3|143|140|145|")
    want "every candidate screened out: judged on the best screen" "$(echo "$got" | tail -1)" "verdict: pass"
    want "... and says so" "$(echo "$got" | grep -c "against the best candidate's screen")" 1
    got=$(SCREENED="7.9|k=1 w=8,7,7" verdict "head's plan|2|6,1,2,2|7.0|6.9|7.5|3|143|140|145|")
    want "a screen faster than the head's median" "$(echo "$got" | tail -1)" "verdict: fail"
    got=$(irow "head's plan" 3 " 7.8 3.6 3.7" " 147.6 134.3 150" "k 2: 2,7,2;k 1: 5,15,2;k 1: 5,15,2;" 0 "")
    want "interleaved row, the head's plans differing" "$got" \
        "head's plan|1|5,15,2|3.700|3.6|7.8|3|147.6|134.3|150|plans: k 1: 5,15,2 x2, k 2: 2,7,2 x1"
    got=$(irow "k=2 w=4,4,3" 3 " 4.0 3.0" " 378.1 325.7" "k 2: 4,4,3;k -: -;k 2: 4,4,3;" 1 "round 2: failed: x")
    want "interleaved row, a visit failed" "$got" \
        "k=2 w=4,4,3|2|4,4,3|3.500|3.0|4.0|2|351.9*|325.7|378.1|plans: k 2: 4,4,3 x2, k -: - x1; 2 of 3 rates; round 2: failed: x"
    # rounds of their own
    want "rounds, even" "$(rounds_ws 22 3 even 1 1 1)" "3,3,2/3,2,2/3,2,2"
    want "rounds, short last" "$(rounds_ws 22 3 short 2 1 1)" "4,2,2/4,2,2/3,2,1"
    want "rounds, one shape" "$(rounds_ws 12 2 mix 1 1 1 -- 1 1 1)" "2,2,2"
    want "rounds, two shapes" "$(rounds_ws 12 2 mix 2 1 1 -- 1 1 1)" "3,2,1/2,2,2"
    got=$(
        n=3 cpus=(1 0.5 0.5) mems=(400 200 100) own_k=7 max=100
        candidates 22
    )
    want "candidates: k not dividing L, each covering L once" "$(echo "$got" | awk '
        { k = $1; nr = split($2, rows, "/"); s = 0
          for (i = 1; i <= nr; i++) { nc = split(rows[i], c, ","); for (j = 1; j <= nc; j++) s += c[j] }
          if (nr > 1 && nr != k) bad++
          if (s * (nr == 1 ? k : 1) != 22) bad++
          if (22 % k) uneven[k] = 1 }
        END { print (bad + 0), (3 in uneven), (5 in uneven), (7 in uneven) }')" "0 1 1 1"
    want "candidates: some with rounds of their own" "$(echo "$got" | grep -c '/' | awk '{ print ($1 >= 4) }')" 1
    got=$(
        n=3 cpus=(1 1 0.5) mems=(120 300 200) own_k=2 own_ws=0,6,5 max=8
        candidates 22
    )
    want "candidates: a head its plan left without layers gets none first" \
        "$(echo "$got" | awk '{ nr = split($2, rows, "/"); for (i = 1; i <= nr; i++) if (rows[i] !~ /^0,/) bad++ }
                              END { print NR, (bad + 0) }')" "8 0"
    got=$(
        n=3 cpus=(1 1 0.5) mems=(120 300 200) own_k=2 own_ws=1,3,3/1,4,10 max=4
        candidates 22
    )
    want "candidates: the head capped at what its own plan holds a round, first" \
        "$(echo "$got" | awk '{ k = $1; nr = split($2, rows, "/")
                                for (i = 1; i <= nr; i++) { split(rows[i], w, ","); if (w[1] > int(2 / k)) bad++ } }
                              END { print NR, (bad + 0) }')" "4 0"
    want "windows from a status, per round" \
        "$(windows_of '{"devices": [{"w": 3, "windows": [3, 2]}, {"w": 2, "windows": [1, 2]}]}')" "3,1/2,2"
    want "windows from a status, uniform" \
        "$(windows_of '{"devices": [{"w": 3, "windows": [3, 3]}, {"w": 1, "windows": [1, 1]}]}')" "3,1"
    want "windows from an older status" "$(windows_of '{"devices": [{"w": 3}, {"w": 1}]}')" "3,1"
    # the whole sweep against a stand-in lab (up/down/status/prompt, no root):
    # the k=1 candidate is fast in its one sweep visit (12 tok/s) and slower
    # in the three interleaved ones (9.5, 9.8, 9.6); the head's plan runs at
    # 10, as predicted; the k=3 one is screened out
    local tmp
    tmp=$(mktemp -d)
    cat >"$tmp/lab.sh" <<'EOF'
d=$HR_LAB_DIR/fake
mkdir -p "$d"
case "$1" in
up)
    set -- "${@:3}"
    k=2 ws=3,2,1 ev=false pred=100
    while [ $# -gt 0 ]; do
        case "$1" in --k) k=$2 ev=true pred=120; shift ;; --windows) ws=$2 ;; esac
        shift
    done
    v=$(($(cat "$d/visits.$k.$ws" 2>/dev/null || echo 0) + 1))
    echo "$v" >"$d/visits.$k.$ws"
    echo "$k $ws $ev $pred $v" >"$d/plan" ;;
down) rm -f "$d/plan" ;;
status)
    read -r k ws ev pred v <"$d/plan"
    echo "{\"k\": $k, \"n_layer\": 12, \"pred_ms_token\": $pred, \"pred_evaluated\": $ev,
      \"devices\": [$(echo "$ws" | sed 's/[0-9]*/{"w": &}/g')]}" ;;
prompt)
    read -r k ws ev pred v <"$d/plan"
    case "$k $ws $v" in
    "2 3,2,1 "*) r=10 ;; "1 4,4,4 1") r=12 ;; "1 4,4,4 2") r=9.5 ;; "1 4,4,4 3") r=9.8 ;;
    "1 4,4,4 4") r=9.6 ;; "2 2,2,2 "*) r=8 ;; *) r=3 ;;
    esac
    echo "prompt: 18 tokens, 50 tokens/s | generation: $3 tokens, $r tokens/s" >&2 ;;
esac
EOF
    echo '{"name": "stand-in", "devices": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}' >"$tmp/spec.json"
    got=$(HR_SWEEP_LAB=$tmp/lab.sh HR_LAB_DIR=$tmp/lab bash "$0" "$tmp/spec.json" -n 4 --max 3 \
        --final 2 --rounds 3 2>/dev/null) && rc=0 || rc=$?
    want "stand-in sweep passes" "$rc $(echo "$got" | tail -2 | head -1)" "0 verdict: pass"
    want "its one visit" "$(echo "$got" | grep -c '^k=1 w=4,4,4 .* 12.000 ')" 1
    want "screened" "$(echo "$got" | grep -c '^k=3 w=2,1,1 .*screened')" 1
    want "interleaved head" "$(echo "$got" | awk '/^## interleaved/ { f = 1 } f && /^head.s plan +[0-9]/ { print $4, $5, $6, $7, $8, $9, $10 }')" \
        "3,2,1 10.000 10-10 3 100.0 100-100 +0%"
    want "interleaved candidate" "$(echo "$got" | awk '/^## interleaved/ { f = 1 } f && /^k=1/ { print $5, $6, $7, $8 }')" \
        "9.600 9.5-9.8 3 120.0*"
    want "the verdict on interleaved medians" "$(echo "$got" | grep -o '= [0-9.]*% of the best[^(]*(k=1 w=4,4,4: 9.600')" \
        "= 104.2% of the best swept plan by interleaved medians (k=1 w=4,4,4: 9.600"
    rm -rf "$tmp"
    echo "selftest: $([ $fail = 0 ] && echo passed || echo FAILED)"
    return $fail
}

if [ "${1:-}" = selftest ]; then
    selftest
    exit
fi

spec="" model="" ntok=8 max=12 reps=1 keep=0 extra=() screen=4 cut=0.5 best_so_far=0
final=2 rounds=3
[ $# -gt 0 ] && { spec=$1; shift; }
while [ $# -gt 0 ]; do
    case "$1" in
    -m) model=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --screen) screen=$2; shift 2 ;;
    --cut) cut=$2; shift 2 ;;
    --final) final=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "plan-sweep.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -f "$spec" ] || { echo "usage: $0 SPEC.json [-m MODEL] [-n TOKENS] [--max N] [--reps R] [--final B] [--rounds N] [-- head opts]" >&2; exit 2; }
[ "$final" -ge 1 ] && [ "$rounds" -ge 1 ] || { echo "plan-sweep.sh: --final and --rounds take 1 or more" >&2; exit 2; }
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

# gen_of OUTPUT: "TOKENS TOK/S" of a `lab.sh prompt` run's generation line
# (empty when there is none)
gen_of() {
    echo "$1" | sed -n 's/.*generation: \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' | tail -1
}

# warm: waits (at most 120 s) until every device that keeps its windows
# resident has them in memory: the cold prompt starts those reads, and from a
# slow disk they outlast its two tokens (a 142 MiB window at 200 MB/s: 0.7 s),
# which is not the steady state the planner predicts. Prints the seconds.
warm() {
    local t0=$SECONDS st
    while [ $((SECONDS - t0)) -lt 120 ]; do
        st=$(bash "$LAB" status --json 2>/dev/null) || break
        echo "$st" | jq -e '[.devices[] | select((.w // 0) > 0 and (.overloaded // false) == false
                             and (.resident // 1) < 0.99)] | length == 0' >/dev/null 2>&1 && break
        sleep 0.5
    done
    echo $((SECONDS - t0))
}

# run_plan LABEL [head options...]: one visit (a fresh lab, the cold
# prompt, the prompts); prints
# "LABEL|k|windows|tok/s|pred_ms|note|rates|evaluated" (rates: each
# prompt's tok/s, space-separated; evaluated: the prediction is the cost
# model's figure for windows the scheduler did not choose, 1 or 0).
run_plan() {
    local label=$1
    shift
    bash "$LAB" down >/dev/null 2>&1 || true
    if [ "$memlimited" = true ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
    fi
    local upout st k ws pred tps gen note="" peval=0
    if ! upout=$(bash "$LAB" up "$spec" "${margs[@]}" -- "$@" "${extra[@]}" 2>&1); then
        note=$(echo "$upout" | grep -m1 "lab.sh:" | cut -c1-60)
        echo "$label|-|-|-|-|failed: $note||0"
        return
    fi
    st=$(bash "$LAB" status --json)
    k=$(echo "$st" | jq -r '.k')
    ws=$(windows_of "$st")
    local perr r rates=()
    # one short unmeasured prompt first: the first request faults the cold
    # weights in, which is not the steady state the planner predicts
    bash "$LAB" prompt -n 2 --temp 0 --seed 1 --timeout 900 "$PROMPT" >/dev/null 2>&1 || true
    local waited
    waited=$(warm)
    [ "$waited" -lt 120 ] || note="not warm after 120 s"
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
        tps=$(stats "${rates[@]}" | cut -d' ' -f1)
        [ "${#rates[@]}" -gt 1 ] && note="${note:+$note; }reps $(stats "${rates[@]}" | awk '{ print $2 "-" $3 }')"
    fi
    st=$(bash "$LAB" status --json)
    # the cost model's ms per token for the plan in use (ring, links, exposed
    # disk and the head's embedding / output head / sampling)
    pred=$(echo "$st" | jq -r 'if (.pred_ms_token // 0) > 0 then .pred_ms_token * 10 | round / 10 else "-" end')
    [ "$(echo "$st" | jq -r '.pred_evaluated // false')" = true ] && peval=1
    echo "$label|$k|$ws|$tps|$pred|$note|${rates[*]}|$peval"
}

# best_of ROW: raises best_so_far to the row's rate unless it was screened out
best_of() {
    local label k ws tps pred note
    IFS='|' read -r label k ws tps pred note _ <<<"$1"
    case "$note" in screened*) return ;; esac
    awk -v a="$tps" -v b="$best_so_far" 'BEGIN { exit !(a + 0 > b + 0) }' && best_so_far=$tps
    return 0
}

# pred_col PRED EVALUATED: the prediction, marked * when the cost model only
# evaluated windows the scheduler did not choose
pred_col() { if [ "$1" != - ] && [ "$2" = 1 ]; then echo "$1*"; else echo "$1"; fi; }

log "spec $spec: ${names[*]} (ring order); $ntok tokens x $reps prompts per visit"
log "head's own plan (no --k, no --windows)"
race=0
first=$(run_plan "head's plan, 1st")
log "$first"
best_of "$first"
race=1
L=$(bash "$LAB" status --json 2>/dev/null | jq -r '.n_layer' || echo "")
[ -n "$L" ] && [ "$L" != null ] || { echo "plan-sweep.sh: lab did not come up: $first" >&2; exit 1; }
own_k=$(echo "$first" | cut -d'|' -f2)
own_ws=$(echo "$first" | cut -d'|' -f3)
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

# interleaved: the head's plan and the best candidates, a fresh lab each,
# in turn, round after round
race=0
mapfile -t fin < <(finalists "$final" "$own_k" "$own_ws" "${rows[@]}")
plans=("head's plan|")
for c in "${fin[@]}"; do
    set -- $c
    plans+=("k=$1 w=$2|--k $1 --windows $2")
done
log "interleaved: ${#plans[@]} plans x $rounds rounds"
pool=() preds=() chosen=() evals=() fails=()
for r in $(seq 1 "$rounds"); do
    for i in "${!plans[@]}"; do
        label=${plans[i]%%|*}
        log "round $r/$rounds: $label"
        # shellcheck disable=SC2086
        row=$(run_plan "$label" ${plans[i]#*|})
        log "$row"
        IFS='|' read -r _ k ws tps pred note rates peval <<<"$row"
        pool[i]="${pool[i]:-} $rates"
        [ "$pred" = - ] || preds[i]="${preds[i]:-} $pred"
        chosen[i]="${chosen[i]:-}k $k: $ws;"
        [ "$peval" = 1 ] && evals[i]=1
        case "$note" in *failed* | *" tokens"*) fails[i]="${fails[i]:-}${fails[i]:+; }round $r: $note" ;; esac
    done
done
irows=()
for i in "${!plans[@]}"; do
    irows+=("$(irow "${plans[i]%%|*}" $((rounds * reps)) "${pool[i]:-}" "${preds[i]:-}" "${chosen[i]}" \
        "${evals[i]:-0}" "${fails[i]:-}")")
done

{
    echo "# plan sweep: $(jq -r '.name // "lab"' "$spec") ($spec), ring order: ${names[*]}"
    echo "# $L layers, $ntok generated tokens x $reps prompts per visit (a fresh lab each; a candidate whose $screen-token screen ran below $cut x the best so far: that screen only), prompt of $(echo "$PROMPT" | wc -w) words; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
    echo "# pred ms/tok: the cost model's figure for the plan in use; * marks its evaluation of windows the scheduler did not choose (forced, or an even split), the others are the scheduler's own prediction for the plan it chose"
    echo "## sweep: one visit each"
    printf '%-22s %-3s %-14s %10s %14s %8s  %s\n' plan k windows "tok/s" "pred ms/tok" "pred err" note
    for r in "${rows[@]}" "$first"; do
        IFS='|' read -r label k ws tps pred note _ peval <<<"$r"
        printf '%-22s %-3s %-14s %10s %14s %8s  %s\n' "$label" "$k" "$ws" "$tps" "$(pred_col "$pred" "$peval")" \
            "$(pred_err "$pred" "$tps")" "$note"
    done
    echo "## interleaved: $rounds rounds of ${#plans[@]} plans in turn (A B C, A B C, ...), a fresh lab per visit; the head re-plans in each"
    printf '%-22s %-3s %-14s %10s %15s %3s %14s %15s %8s  %s\n' plan k windows "median tok/s" "min-max" n \
        "pred ms/tok" "pred min-max" "pred err" note
    for r in "${irows[@]}"; do
        IFS='|' read -r label k ws med lo hi cnt pm pl ph note <<<"$r"
        printf '%-22s %-3s %-14s %10s %15s %3s %14s %15s %8s  %s\n' "$label" "$k" "$ws" "$med" "$lo-$hi" "$cnt" \
            "$pm" "$pl-$ph" "$(pred_err "${pm%\*}" "$med")" "$note"
    done
    SCREENED=$(for r in "${rows[@]}"; do
        IFS='|' read -r label k ws tps pred note _ <<<"$r"
        case "$note" in screened*) echo "$tps|$label" ;; esac
    done | sort -t'|' -k1,1gr | head -1)
    verdict "${irows[0]//\*/}" "${irows[@]:1}"
    echo "# total $((SECONDS - t_start)) s"
} | tee "$out"
grep -q "^verdict: pass" "$out"
