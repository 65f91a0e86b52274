#!/usr/bin/env bash
# moe-lab.sh - a mixture-of-experts model on a memory-short lab, streamed by
# expert (the default) and streamed as dense layers are (whole windows,
# HEARTH_EXPERTS=whole on every agent and in the head's plan), one after
# the other in the same run: tokens/s of each, and per device the bytes read
# per token measured against the plan's prediction.
#
#   deploy/moe-lab.sh [SPEC] [N_GEN]
#
# SPEC defaults to deploy/labs/moe-short.json (its model is made with
# `hearth mkmodel --shape qwen3moe-small --type q4_k_m` when missing).
# Each mode: lab up, one warm-up request, then ROUNDS (default 2) greedy
# requests of N_GEN tokens (default 24; 6 for the whole-window mode, which
# is slow), `hearth status` after them, lab down (the agents' logs of each
# mode stay in /tmp/moe-lab-MODE-logs). Needs root (deploy/lab.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SPEC=${1:-$ROOT/deploy/labs/moe-short.json}
N_GEN=${2:-24}
ROUNDS=${ROUNDS:-2}
export HEARTH=${HEARTH:-$ROOT/build/hearth}
LAB="$ROOT/deploy/lab.sh"
MODEL=$(jq -r .model "$SPEC")
[ -f "$MODEL" ] || "$HEARTH" mkmodel -o "$MODEL" --shape qwen3moe-small --type q4_k_m
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT
echo "lab $(jq -r .name "$SPEC"), model $MODEL; $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"

# one mode: prints "tok/s" lines and the disk lines of the status
run_mode() {
  local name=$1 n=$2
  "$LAB" down >/dev/null 2>&1 || true
  "$LAB" up "$SPEC" >/tmp/moe-lab-up.log 2>&1 || { tail -3 /tmp/moe-lab-up.log; return 1; }
  "$LAB" prompt -n 2 --temp 0 "Warm up" >/dev/null 2>&1
  local rates=()
  for r in $(seq 1 "$ROUNDS"); do
    local out
    out=$("$LAB" prompt -n "$n" --temp 0 "The history of the city begins" 2>&1)
    rates+=("$(sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tokens\/s.*/\1/p' <<<"$out")")
  done
  echo "$name: generation ${rates[*]} tokens/s"
  "$LAB" status 2>/dev/null | grep -E "^plan:|^  \[|layers |disk per token|experts:" | sed 's/^/  /'
  # the agents' logs of this mode, before the next lab replaces them
  rm -rf "/tmp/moe-lab-$name-logs" && cp -r "${HR_LAB_DIR:-/tmp/hearth-lab}" "/tmp/moe-lab-$name-logs" 2>/dev/null || true
  printf '%s\n' "${rates[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }' \
    >"/tmp/moe-lab-$name.rate"
}

run_mode by-expert "$N_GEN"
HEARTH_EXPERTS=whole run_mode whole-windows "${N_GEN_WHOLE:-6}"
a=$(cat /tmp/moe-lab-by-expert.rate) b=$(cat /tmp/moe-lab-whole-windows.rate)
printf 'by expert %.2f tokens/s, whole windows %.2f tokens/s: %.1fx\n' "$a" "$b" \
  "$(echo "$a / $b" | bc -l)"
