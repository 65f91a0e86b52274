#!/usr/bin/env bash
# decode-bench.sh - single-node decode speed of every weight type against
# the machine's measured read bandwidth, types interleaved round by round so
# that a busy moment of a shared host falls on all of them alike.
#
#   deploy/decode-bench.sh [-r ROUNDS] [-t THREADS] [-N TOKENS] [--dir DIR]
#                          [--types "q4_0 q4_k_m q5_k_m q6_k q8_0"]
#
# Each round runs `hearth bench -m DIR/tl-TYPE.gguf -t THREADS -P 16 -N TOKENS
# -r 3` once per type, starting at a different type every round. Missing
# models are written first with `hearth mkmodel --shape tinyllama --type TYPE`
# (random weights, TinyLlama-1.1B shape, the shared fixtures' vocabulary).
#
# Prints every round (generation tok/s and the bench's bandwidth ratio: the
# effective read rate of the weights over the bandwidth probe of that run),
# then per type the medians and two verdicts:
#   bandwidth  median bandwidth ratio >= 75%
#   order      no type's median tok/s below that of a type with more bytes
#              of weights per token (the bench's "weights per token"); the
#              rounds in which each pair held are counted too
# Exits 1 when a verdict fails. Output also in DIR/decode-bench.txt.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEARTH:-$ROOT/build/hearth}
VOCAB=${HR_VOCAB:-$ROOT/../shared/models/tiny-llama-f32.gguf}
rounds=4 threads=2 ntok=64 dir=/tmp/hearth-decode
types="q4_0 q4_k_m q5_k_m q6_k q8_0"
while [ $# -gt 0 ]; do
    case "$1" in
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -N) ntok=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "decode-bench.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "decode-bench.sh: no $BIN (cmake --build build)" >&2; exit 2; }
mkdir -p "$dir"
read -r -a ty <<<"$types"
nt=${#ty[@]}
for t in "${ty[@]}"; do
    m=$dir/tl-$t.gguf
    if [ ! -f "$m" ]; then
        [ -f "$VOCAB" ] || { echo "decode-bench.sh: no $VOCAB for the tokenizer" >&2; exit 2; }
        echo "writing $m" >&2
        "$BIN" mkmodel --shape tinyllama --type "$t" --vocab "$VOCAB" -o "$m" >/dev/null
    fi
done

out=$dir/decode-bench.txt
: >"$out"
say() { echo "$*" | tee -a "$out"; }
raw=$dir/decode-bench.raw
: >"$raw"

say "$(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cpus), $threads threads, $ntok tokens, $rounds rounds"
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    for i in $(seq 0 $((nt - 1))); do
        t=${ty[$(((i + r - 1) % nt))]}
        o=$("$BIN" bench -m "$dir/tl-$t.gguf" -t "$threads" -P 16 -N "$ntok" -r 3 2>&1) || {
            echo "$o" >&2
            echo "decode-bench.sh: hearth bench failed on $t" >&2
            exit 1
        }
        g=$(echo "$o" | awk '/^generation:/ { print $2 }')
        br=$(echo "$o" | sed -n 's/.*bandwidth ratio: \([0-9.]*\)%.*/\1/p')
        mib=$(echo "$o" | awk '/^weights per token:/ { print $4 }')
        echo "$r $t $g $br $mib" >>"$raw"
        line="$line $t $g tok/s ($br%)"
    done
    say "$line"
done

# medians and verdicts
awk -v types="$types" '
function median(s,   a, n, i, j, x) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { x = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ g[$2] = g[$2] " " $3; b[$2] = b[$2] " " $4; mib[$2] = $5; tok[$1, $2] = $3; R = $1 > R ? $1 : R }
END {
    n = split(types, t, " "); fail = 0
    printf "\n%-8s %10s %12s %10s %s\n", "type", "MiB/token", "tok/s (med)", "bw ratio", "verdict"
    for (i = 1; i <= n; i++) {
        mg[t[i]] = median(g[t[i]]); mb = median(b[t[i]])
        v = mb >= 75 ? "ok" : "BELOW 75%"
        if (mb < 75) fail = 1
        printf "%-8s %10.1f %12.2f %9.1f%% %s\n", t[i], mib[t[i]], mg[t[i]], mb, v
    }
    printf "\norder (fewer bytes per token must not be slower):\n"
    for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) {
        a = t[i]; c = t[j]
        if (mib[a] >= mib[c]) continue
        held = 0
        for (r = 1; r <= R; r++) if (tok[r, a] >= tok[r, c]) held++
        ok = mg[a] >= mg[c]
        if (!ok) fail = 1
        printf "  %-7s %7.2f >= %-7s %7.2f  %s  (held in %d of %d rounds)\n", a, mg[a], c, mg[c], ok ? "ok" : "FAILS", held, R
    }
    printf "\n%s\n", fail ? "decode-bench: FAIL" : "decode-bench: PASS"
    exit fail
}' "$raw" | tee -a "$out"
exit "${PIPESTATUS[0]}"
