#!/usr/bin/env bash
# mixed-ring.sh - a ring of one native x86 agent (the head, first half of the
# layers) and one aarch64 agent under qemu-aarch64-static (the rest) on
# loopback; checks that its greedy text equals a single-process `hearth run`
# of the same model, natively and under emulation. The wire format is fixed
# little-endian f32, so nothing but each device's kernels can differ:
#  - with HR_ISA=scalar on every process the ring must equal both single
#    runs exactly (the scalar C code gives the same bits on both
#    architectures; checked too) - this is the pass/fail part;
#  - with each device's best kernels (AVX2/AVX-512 head, NEON/i8mm worker)
#    the ring is compared with both single runs and the result reported:
#    the aarch64 kernels follow the scalar float order exactly
#    (kernels/canon-impl.h), the x86 SIMD ones differ from it by float
#    summation order, and on the random-weight fixtures, whose logits have
#    near ties, greedy text may part after some tokens.
#
#   deploy/mixed-ring.sh [MODEL ...]   (default: the shared small-llama
#                                       q4_0 and q4_k_m fixtures)
# Environment: HEARTH (x86 binary, default build/hearth), HEARTH_ARM64
# (aarch64 binary, default build-arm64/hearth), HR_QEMU_CPU (default max),
# HR_MIXED_PORT (default: a free one), HR_MIXED_N (tokens, default 12).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
X86=${HEARTH:-$ROOT/build/hearth}
ARM=${HEARTH_ARM64:-$ROOT/build-arm64/hearth}
CPU=${HR_QEMU_CPU:-max}
PORT=${HR_MIXED_PORT:-}
N=${HR_MIXED_N:-12}
PROMPT="Once upon a time, there was a little robot who lived in a box."
[ -x "$X86" ] || { echo "mixed-ring: no x86 hearth at $X86" >&2; exit 2; }
[ -x "$ARM" ] || { echo "mixed-ring: no aarch64 hearth at $ARM" >&2; exit 2; }
command -v qemu-aarch64-static >/dev/null || { echo "mixed-ring: no qemu-aarch64-static" >&2; exit 2; }
models=("$@")
[ ${#models[@]} -gt 0 ] || models=("$ROOT/../shared/models/small-llama-q4_0.gguf"
                                    "$ROOT/../shared/models/small-llama-q4_k_m.gguf")
DIR=$(mktemp -d /tmp/hearth-mixed-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap 'cleanup; rm -rf "$DIR"' EXIT
arm() { qemu-aarch64-static -cpu "$CPU" "$ARM" "$@"; }

# a base port with base, base+1 (data), base+10, base+11 free on loopback
free_port() {
    local used p
    used=$(ss -Htln 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 30000))
        if ! printf '%s\n' "$used" | grep -qxE "$p|$((p + 1))|$((p + 10))|$((p + 11))"; then
            echo "$p"
            return
        fi
    done
    echo 7860
}

# ring MODEL MODE(scalar|best) -> $DIR/NAME.MODE.ring; returns non-zero on failure
ring() {
    local model=$1 mode=$2 name half layers isa=() port
    name=$(basename "$model" .gguf)
    layers=$("$X86" info -m "$model" | sed -n 's/.*layers \([0-9]*\),.*/\1/p')
    [ -n "$layers" ] && [ "$layers" -ge 2 ] || { echo "mixed-ring: cannot read layers of $model" >&2; return 1; }
    half=$((layers / 2))
    [ "$mode" = scalar ] && isa=(env HR_ISA=scalar)
    port=${PORT:-$(free_port)}
    "${isa[@]}" "$X86" agent -m "$model" --listen "127.0.0.1:$port" --name x86 --expect 1 \
        --no-profile --insecure -t 1 --k 1 --windows "$half,$((layers - half))" \
        >"$DIR/head.log" 2>&1 &
    pids+=($!)
    "${isa[@]}" qemu-aarch64-static -cpu "$CPU" "$ARM" agent -m "$model" \
        --listen "127.0.0.1:$((port + 10))" --head "127.0.0.1:$port" --name arm64 --no-profile \
        --insecure -t 2 >"$DIR/worker.log" 2>&1 &
    pids+=($!)
    local ready=0
    for _ in $(seq 600); do
        if "$X86" status --head "127.0.0.1:$port" --insecure --timeout 1 --json 2>/dev/null |
            grep -q '"ready":true'; then
            ready=1
            break
        fi
        sleep 0.2
    done
    if [ "$ready" != 1 ]; then
        echo "mixed-ring: $name ($mode): ring not ready; logs:" >&2
        tail -n 5 "$DIR/head.log" "$DIR/worker.log" >&2
        cleanup
        return 1
    fi
    "$X86" status --head "127.0.0.1:$port" --insecure --timeout 5 >"$DIR/status" 2>&1 || true
    local rc=0
    "$X86" prompt --head "127.0.0.1:$port" --insecure --timeout 300 -n "$N" --temp 0 \
        "$PROMPT" >"$DIR/$name.$mode.ring" 2>"$DIR/prompt.err" || {
        echo "mixed-ring: $name ($mode): prompt failed: $(tail -n 2 "$DIR/prompt.err")" >&2
        rc=1
    }
    cleanup
    grep -q "arm64" "$DIR/status" || { echo "mixed-ring: $name: arm64 agent not in the ring" >&2; rc=1; }
    echo "mixed-ring: $name ($mode kernels): x86 head layers 0-$((half - 1)), aarch64 worker $half-$((layers - 1))"
    return $rc
}

# single-process greedy runs: NAME.MODE.x86 / NAME.MODE.arm
single() {
    local model=$1 mode=$2 name isa=()
    name=$(basename "$model" .gguf)
    [ "$mode" = scalar ] && isa=(env HR_ISA=scalar)
    "${isa[@]}" "$X86" run -m "$model" -p "$PROMPT" -n "$N" --temp 0 -t 1 \
        >"$DIR/$name.$mode.x86" 2>/dev/null
    "${isa[@]}" qemu-aarch64-static -cpu "$CPU" "$ARM" run -m "$model" -p "$PROMPT" -n "$N" \
        --temp 0 -t 1 >"$DIR/$name.$mode.arm" 2>/dev/null
}

fail=0
for model in "${models[@]}"; do
    name=$(basename "$model" .gguf)
    for mode in scalar best; do
        single "$model" "$mode"
        ring "$model" "$mode" || { fail=1; continue; }
        for ref in x86 arm; do
            if cmp -s "$DIR/$name.$mode.ring" "$DIR/$name.$mode.$ref"; then
                echo "  ring = single $ref run: $(tr '\n' ' ' <"$DIR/$name.$mode.ring" | head -c 70)"
            else
                echo "  ring differs from the single $ref run:"
                echo "    ring: $(tr '\n' ' ' <"$DIR/$name.$mode.ring")"
                echo "    $ref:  $(tr '\n' ' ' <"$DIR/$name.$mode.$ref")"
                [ "$mode" = scalar ] && fail=1
            fi
        done
    done
done
if [ "$fail" = 0 ]; then
    echo "mixed-ring: scalar rings equal the single runs on both architectures"
else
    echo "mixed-ring: FAILED" >&2
fi
exit "$fail"
