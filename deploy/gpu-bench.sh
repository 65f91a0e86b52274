#!/usr/bin/env bash
# gpu-bench.sh - the Vulkan fast path on a real GPU in one short run (about
# 5-8 minutes on a 16-core machine): issue 37's figures.
#
#   deploy/gpu-bench.sh [--no-build] [--dir DIR] [-t THREADS] [--gpu N|auto|any]
#                       [--shapes "tinyllama llama7b"] [--layers7b N]
#
# 1. builds (cmake Release, all cores) unless --no-build;
# 2. prints `hearth info`'s Vulkan lines (what the device offers, its path);
# 3. writes Q4_K_M models with `hearth mkmodel` (random weights): the
#    TinyLlama-1.1B shape, and the Llama-7B shape with --layers7b layers
#    (default 8: the same layer shapes and per-layer bandwidth as the full 32
#    in a quarter of the time and disk; --layers7b 32 for the whole model);
# 4. per model, all layers on the GPU:
#    - `hearth bench -P 512 -N 64 -r 2` (fast path, the default): prompt-512
#      and decode tok/s, the GPU's read bandwidth (a read kernel) and decode's
#      weight bytes per second as a share of it;
#    - `hearth bench --exact -P 512 -N 16 -r 1`: the exact path's prompt-512
#      speed, for fast / exact;
#    - `hearth profile --quick` + `hearth plan`: the planner's predicted
#      ms/token next to the measured one;
# 5. prints one summary table. Targets (issue 37): decode >= 50% of the
#    GPU's bandwidth, prompt fast/exact >= 5x, planner within +-20%.
# Logs and models in DIR (default /tmp/hearth-gpu-bench).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEARTH:-$ROOT/build/hearth}
VOCAB=${HR_VOCAB:-$ROOT/../shared/models/tiny-llama-f32.gguf}
build=1 dir=/tmp/hearth-gpu-bench threads=$(nproc) gpu=${HR_GPU:-auto}
shapes="tinyllama llama7b" layers7b=8
while [ $# -gt 0 ]; do
    case "$1" in
    --no-build) build=0; shift ;;
    --dir) dir=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --layers7b) layers7b=$2; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bench.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$dir"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

if [ "$build" = 1 ]; then
    stamp "building (Release, $(nproc) jobs)"
    cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >"$dir/cmake.log" 2>&1
    cmake --build "$ROOT/build" -j"$(nproc)" --target hearth >>"$dir/cmake.log" 2>&1 ||
        { tail -30 "$dir/cmake.log"; exit 1; }
fi
[ -x "$BIN" ] || { echo "gpu-bench.sh: no $BIN" >&2; exit 2; }
"$BIN" info 2>/dev/null | sed -n '/^gpu:/,/^[a-z]/p' | sed '$d'

vocab=()
[ -f "$VOCAB" ] && vocab=(--vocab "$VOCAB")
# field after "key" in a bench log: the first number following it
num() { grep -m1 "$1" "$2" | sed -E "s/.*$1[^0-9]*([0-9.]+).*/\1/"; }

summary=()
for shape in $shapes; do
    m=$dir/$shape-q4_k_m.gguf
    extra=()
    [ "$shape" = llama7b ] && extra=(--layers "$layers7b")
    if [ ! -f "$m" ]; then
        stamp "mkmodel $shape q4_k_m ${extra[*]}"
        "$BIN" mkmodel -o "$m" --shape "$shape" --type q4_k_m "${extra[@]}" "${vocab[@]}" \
            >"$dir/mkmodel-$shape.log" 2>&1 || { tail -5 "$dir/mkmodel-$shape.log"; exit 1; }
    fi
    stamp "$shape: fast path bench (P 512, N 64, 2 reps)"
    "$BIN" bench -m "$m" -t "$threads" -P 512 -N 64 -r 2 --gpu "$gpu" --gpu-layers 9999 \
        >"$dir/fast-$shape.log" 2>&1 || { tail -20 "$dir/fast-$shape.log"; exit 1; }
    grep -E "^gpu|^prompt|^generation|^weights" "$dir/fast-$shape.log" | sed 's/^/    /'
    stamp "$shape: exact path bench (P 512, N 16, 1 rep)"
    "$BIN" bench --exact -m "$m" -t "$threads" -P 512 -N 16 -r 1 --gpu "$gpu" \
        --gpu-layers 9999 >"$dir/exact-$shape.log" 2>&1 || echo "    exact path failed (no shaderFloat64?)"
    grep -E "^prompt|^generation" "$dir/exact-$shape.log" | sed 's/^/    exact /' || true
    stamp "$shape: profile (quick) and plan"
    pred=?
    if "$BIN" profile -m "$m" --quick --gpu "$gpu" -o "$dir/prof-$shape.json" \
        >"$dir/profile-$shape.log" 2>&1 &&
        "$BIN" plan -m "$m" "$dir/prof-$shape.json" -c 1024 >"$dir/plan-$shape.log" 2>&1; then
        pred=$(grep -m1 -oE '[0-9.]+ ms/token' "$dir/plan-$shape.log" | cut -d' ' -f1)
        grep -m1 "gpu" "$dir/plan-$shape.log" >/dev/null || true
    fi
    f=$dir/fast-$shape.log
    pp=$(num "prompt processing:" "$f")
    tg=$(num "generation:" "$f")
    gbw=$(num "gpu memory read bandwidth:" "$f")
    pct=$(grep -m1 "^gpu decode" "$f" | sed -E 's/.*= ([0-9.]+)% of the GPU.*/\1/')
    ppx=$(num "prompt processing:" "$dir/exact-$shape.log" || true)
    summary+=("$(awk -v s="$shape" -v pp="$pp" -v tg="$tg" -v bw="$gbw" -v pct="$pct" \
        -v ppx="${ppx:-0}" -v pred="$pred" 'BEGIN {
        meas = tg > 0 ? 1000 / tg : 0
        ratio = ppx > 0 ? pp / ppx : 0
        dev = (pred != "?" && meas > 0) ? 100 * (pred - meas) / meas : 0
        printf "%-10s decode %8.2f tok/s = %5.1f%% of %7.1f GB/s %-4s | prompt-512 %8.1f tok/s, exact %8.1f: %5.1fx %-4s | planner %s ms/token vs %.2f measured (%+.0f%%) %s",
            s, tg, pct, bw, (pct >= 50 ? "ok" : "LOW"), pp, ppx, ratio, (ratio >= 5 ? "ok" : "LOW"),
            pred, meas, dev, (pred != "?" && dev <= 20 && dev >= -20 ? "ok" : "OFF") }')")
done
echo
stamp "summary (targets: decode >= 50% of the GPU's read bandwidth, prompt >= 5x exact, planner +-20%)"
for l in "${summary[@]}"; do echo "$l"; done
