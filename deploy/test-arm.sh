#!/usr/bin/env bash
# test-arm.sh - cross-builds hearth for aarch64 (deploy/aarch64.cmake, into
# build-arm64/) and tests it under qemu-aarch64-static:
#  1. the unit tests and the fixture test (test_model: every shared model's
#     logits against llama.cpp's, greedy ids, window hand-over) with -cpu max
#     (asimd, asimddp, i8mm, sve: the i8mm table is the best one);
#  2. run-time detection on emulated cores without the extensions:
#     cortex-a53 (neon only) and cortex-a76 (dotprod), kernel tests on each;
#  3. every kernel path forced with HR_ISA (neon, dotprod, i8mm): the kernel
#     tests (every kernel against scalar bit for bit: dot products, tiles,
#     quantizers), then test_isa: each shared fixture's logits from every
#     path against the scalar path's, bit for bit (the scalar and aarch64
#     kernels follow one float order, kernels/canon-impl.h, so they agree
#     exactly, inside the acceptance bound of 1e-4; without it a last-bit
#     difference in a dot product moved an activation across a q8 rounding
#     step and these random-weight fixtures amplified it to 2e-2), and
#     against llama.cpp's within test_model's bounds (5e-2 for quantized
#     fixtures, 2e-3 for float ones, argmax agreeing at >= 80% of positions
#     and at all of them), the canonical ones on quantized fixtures within
#     1e-5 with every argmax equal (the order is llama.cpp's x86 one); it
#     prints the worst difference of each;
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
    -R "^(common|quant|gguf|gguf_bad|stream|tokenizer|ops|gemm|model|ref64|scheduler|chat|ring)$")

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
HR_BIN=$ROOT/build-arm64/tests/hearth-emu HR_SHARED=$SHARED emu max $T/test_isa

echo "== mixed ring: native x86 head + emulated aarch64 worker"
if [ -x build/hearth ]; then
    bash deploy/mixed-ring.sh
else
    echo "test-arm: no x86 build in build/ (deploy/build.sh): mixed ring skipped" >&2
    exit 1
fi
echo "aarch64 tests passed in $(($(date +%s) - t0)) s"
