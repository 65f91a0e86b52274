#!/usr/bin/env bash
# test-arm.sh - cross-builds hearth for aarch64 (deploy/aarch64.cmake, into
# build-arm64/) and tests it under qemu-aarch64-static:
#  1. the unit tests and the fixture test (test_model: every shared model's
#     logits against llama.cpp's, greedy ids, window hand-over) with -cpu max
#     (asimd, asimddp, i8mm, sve: the i8mm table is the best one);
#  2. run-time detection on emulated cores without the extensions:
#     cortex-a53 (neon only) and cortex-a76 (dotprod), kernel tests on each;
#  3. every kernel path forced with HR_ISA (neon, dotprod, i8mm): the kernel
#     tests (every kernel against scalar: dot products within 2e-5 of the
#     sum of |products|, tiles within 1e-4 of the largest result, quantizers
#     bit-exact), then each shared fixture's logits against the scalar
#     path's and llama.cpp's. Float fixtures: <= 1e-4 from scalar. Quantized
#     ones: the bound of test_model (5e-2, argmax agreeing at >= 80% of
#     positions) from both, since a last-bit difference in a dot product can
#     move an activation across a q8 rounding step and these random-weight
#     fixtures amplify it (x86's AVX2/AVX-512 paths differ from scalar by
#     1.5e-2 on small-llama-q4_0 too);
#  4. deploy/mixed-ring.sh: one native x86 agent and one emulated aarch64
#     agent in a ring (needs the x86 build in build/).
# Left out under emulation (qemu runs this code 10-50x slower), each run
# natively by deploy/test.sh and none with architecture-specific code: the
# cluster-labelled tests (several agents with timing-based health checks;
# step 4 forms a ring under qemu instead), test_profiler and test_sampler
# (each has a time bound emulation cannot meet: a quick device profile
# under 10 s, 50 ms per sampled token; all their other checks pass under
# qemu), test_numa and test_cli (they pass under qemu, in about 3 and 2.5
# minutes on a 2-core host: too long for every CI run).
# Usage: deploy/test-arm.sh        (expects the shared fixtures in ../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${HR_SHARED:-$ROOT/../shared}
jobs=$(nproc 2>/dev/null || echo 2)
command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64-static >/dev/null || {
    echo "test-arm: needs crossbuild-essential-arm64 and qemu-user-static (deploy/install-deps.sh)" >&2
    exit 1
}
t0=$(date +%s)

echo "== aarch64 cross build (build-arm64, warnings as errors)"
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=deploy/aarch64.cmake -DCMAKE_BUILD_TYPE=Release \
    -DHR_WERROR=ON >/dev/null
cmake --build build-arm64 -j"$jobs"
# ELF e_machine 0xb7: AArch64
[ "$(od -An -tx1 -j18 -N2 build-arm64/hearth | tr -d ' ')" = b700 ] ||
    { echo "test-arm: build-arm64/hearth is not an aarch64 binary" >&2; exit 1; }

echo "== unit + fixture tests under qemu -cpu max"
(cd build-arm64 && ctest --output-on-failure -j"$jobs" \
    -R "^(common|quant|gguf|gguf_bad|stream|tokenizer|ops|gemm|model|scheduler|chat|ring)$")

T=build-arm64/tests
emu() { qemu-aarch64-static -cpu "$@"; }

echo "== run-time detection on emulated cores"
for spec in cortex-a53:neon cortex-a76:dotprod neoverse-n1:dotprod max:i8mm; do
    cpu=${spec%%:*} want=${spec#*:}
    out=$(emu "$cpu" $T/test_quant | tail -n 2)
    echo "$cpu: $out" | tr '\n' ' '
    echo
    grep -q "best table $want\$" <<<"$out" || { echo "test-arm: $cpu should pick $want" >&2; exit 1; }
    emu "$cpu" $T/test_gemm | tail -n 1
done

echo "== every path forced (HR_ISA): kernel tests, fixture logits vs scalar and llama.cpp"
for isa in neon dotprod i8mm; do
    for t in test_quant test_gemm test_ops; do
        printf '%-8s %-10s ' "$isa" "$t"
        HR_ISA=$isa emu max $T/$t | tail -n 1
    done
done
tmp=$(mktemp -d /tmp/hearth-arm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
for gguf in "$SHARED"/models/*.gguf; do
    name=$(basename "$gguf" .gguf)
    ref=$SHARED/reference/$name.logits
    [ -f "$ref" ] || continue
    ids=$(sed -n 's/.*"prompt_ids": *\[\([0-9, ]*\)\].*/\1/p' "$SHARED/reference/$name.json" | tr -d ' ')
    bound=5e-2 sbound=5e-2
    case "$name" in *f32 | *f16) bound=2e-3 sbound=1e-4 ;; esac
    HR_ISA=scalar emu max build-arm64/hearth logits -m "$gguf" --ids "$ids" -t 1 \
        -o "$tmp/$name.scalar" --compare "$ref" >"$tmp/out" 2>&1
    llama=$(sed -n 's/.*max rel error \([0-9.e+-]*\).*/\1/p' "$tmp/out")
    line="$(printf '%-20s' "$name") scalar vs llama.cpp $llama;"
    for isa in neon dotprod i8mm; do
        HR_ISA=$isa emu max build-arm64/hearth logits -m "$gguf" --ids "$ids" -t 1 \
            -o "$tmp/$name.$isa" --compare "$tmp/$name.scalar" >"$tmp/out" 2>&1
        e=$(sed -n 's/.*max rel error \([0-9.e+-]*\).*/\1/p' "$tmp/out")
        ag=$(sed -n 's/.*argmax agree \([0-9]*\/[0-9]*\).*/\1/p' "$tmp/out")
        HR_ISA=$isa emu max build-arm64/hearth logits -m "$gguf" --ids "$ids" -t 1 \
            --compare "$ref" >"$tmp/out" 2>&1
        el=$(sed -n 's/.*max rel error \([0-9.e+-]*\).*/\1/p' "$tmp/out")
        agl=$(sed -n 's/.*argmax agree \([0-9]*\/[0-9]*\).*/\1/p' "$tmp/out")
        line="$line $isa: $e ($ag) vs scalar, $el ($agl) vs llama.cpp;"
        if [ -z "$e" ] || [ -z "$el" ] || ! awk -v e="$e" -v el="$el" -v b="$bound" \
            -v sb="$sbound" -v ag="$ag" -v agl="$agl" 'BEGIN {
                split(ag, a, "/"); split(agl, l, "/")
                exit !(e <= sb && el <= b && a[1] * 5 >= a[2] * 4 && l[1] * 5 >= l[2] * 4) }'; then
            echo "test-arm: $name $isa out of bounds ($sbound vs scalar, $bound vs llama.cpp)" >&2
            fail=1
        fi
    done
    echo "$line"
done
[ "$fail" = 0 ] || exit 1

echo "== mixed ring: native x86 head + emulated aarch64 worker"
if [ -x build/hearth ]; then
    bash deploy/mixed-ring.sh
else
    echo "test-arm: no x86 build in build/ (deploy/build.sh): mixed ring skipped" >&2
    exit 1
fi
echo "aarch64 tests passed in $(($(date +%s) - t0)) s"
