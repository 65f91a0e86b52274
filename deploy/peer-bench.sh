#!/usr/bin/env bash
# peer-bench.sh - hearth against llama.cpp's llama-bench on the same GGUF file
# and machine, interleaved (hearth, llama.cpp, hearth, ...), so the machine's
# load hits both alike; prints every measurement, the medians and the
# hearth / llama.cpp ratio per round and of the medians.
#
#   LLAMA_BENCH=/path/to/llama-bench deploy/peer-bench.sh MODEL [HEARTH]
#
# Per round: `hearth bench -t T -P P -N N -r 1` and `llama-bench -t T -p P
# -n N -r 1`, prompt and generation tokens/s. ROUNDS (default 5), T
# (default: all cores), P (128) and N (64) tune it. llama.cpp is built
# outside this repository (cmake -DBUILD_SHARED_LIBS=OFF, target
# llama-bench).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:?usage: LLAMA_BENCH=... $0 MODEL [HEARTH]}
H=${2:-$ROOT/build/hearth}
LB=${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}
ROUNDS=${ROUNDS:-5}
T=${T:-$(nproc)}
P=${P:-128}
N=${N:-64}
echo "model $MODEL; $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p'); threads $T;" \
    "prompt $P, generation $N; $ROUNDS rounds"
hp=() hg=() lp=() lg=()
for r in $(seq 1 "$ROUNDS"); do
  out=$("$H" bench -m "$MODEL" -t "$T" -P "$P" -N "$N" -r 1 2>/dev/null)
  a=$(sed -n 's/^prompt processing: *\([0-9.]*\).*/\1/p' <<<"$out")
  b=$(sed -n 's/^generation: *\([0-9.]*\).*/\1/p' <<<"$out")
  out=$("$LB" -m "$MODEL" -t "$T" -p "$P" -n "$N" -r 1 -o csv 2>/dev/null)
  read -r c d < <(python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
ts = {(r["n_prompt"], r["n_gen"]): r["avg_ts"] for r in rows}
print(ts.get((sys.argv[1], "0"), "0"), ts.get(("0", sys.argv[2]), "0"))' "$P" "$N" <<<"$out")
  hp+=("$a") hg+=("$b") lp+=("$c") lg+=("$d")
  printf 'round %d: prompt hearth %8.2f llama.cpp %8.2f (%.2fx) | generation hearth %7.2f llama.cpp %7.2f (%.2fx)\n' \
    "$r" "$a" "$c" "$(echo "$a / $c" | bc -l)" "$b" "$d" "$(echo "$b / $d" | bc -l)"
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
a=$(med "${hp[@]}") b=$(med "${hg[@]}") c=$(med "${lp[@]}") d=$(med "${lg[@]}")
printf 'median: prompt hearth %.2f llama.cpp %.2f (%.2fx) | generation hearth %.2f llama.cpp %.2f (%.2fx)\n' \
  "$a" "$c" "$(echo "$a / $c" | bc -l)" "$b" "$d" "$(echo "$b / $d" | bc -l)"
