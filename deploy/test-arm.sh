#!/usr/bin/env bash
# test-arm.sh - cross-builds hearth for aarch64 (deploy/aarch64.cmake, into
# build-arm64/) and tests it under qemu-aarch64-static:
#  1. the unit tests and the fixture test (test_model: every shared model's
#     logits against llama.cpp's, greedy ids, window hand-over) with -cpu max
#     (asimd, asimddp, i8mm, sve: the i8mm table is the best one);
#  2. run-time detection on emulated cores without the extensions:
#     cortex-a53 (neon only), cortex-a76 and neoverse-n1 (dotprod): the
#     best table each picks, and test_quant on each;
#  3. the narrower tables forced as the best one with HR_ISA (neon,
#     dotprod): test_gemm and test_ops (the paths that use the best table),
#     then test_isa: each shared fixture's logits from every
#     path against the scalar path's, bit for bit (the scalar and aarch64
#     kernels follow one float order, kernels/canon-impl.h, so they agree
#     exactly, inside the acceptance bound of 1e-4; without it a last-bit
#     difference in a dot product moved an activation across a q8 rounding
#     step and these random-weight fixtures amplified it to 2e-2), and
#     against llama.cpp's within test_model's bounds (1e-2 for quantized
#     fixtures, 1e-4 for float ones, every argmax), the canonical ones on
#     quantized fixtures within 1e-5 (the order is llama.cpp's x86 one); it
#     prints the worst difference of each; then two threads: `hearth run`
#     and `hearth logits` with -t 2 equal -t 1 bit for bit (scalar, i8mm);
#  4. deploy/mixed-ring.sh: one native x86 agent and one emulated aarch64
#     agent (two threads) in a ring (needs the x86 build in build/).
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
# qemu must load the multiarch glibc (libc6:arm64) with its own dynamic
# loader: a prefix such as -L /usr/aarch64-linux-gnu (the cross toolchain's
# glibc, another build) pairs that loader with the multiarch libc.so.6, and
# the first pthread_create then spins for ever (seen with Debian 12's
# qemu 7.2: any -t 2 run hung, a plain pthread program too).
unset QEMU_LD_PREFIX
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
    -R "^(common|quant|gguf|gguf_bad|stream|tokenizer|ops|gemm|model|moe|archs|ref64|scheduler|chat|ring)$")

T=build-arm64/tests
emu() { qemu-aarch64-static -cpu "$@"; }

echo "== run-time detection on emulated cores (test_quant checks every table the core runs)"
for spec in cortex-a53:neon cortex-a76:dotprod neoverse-n1:dotprod; do
    cpu=${spec%%:*} want=${spec#*:}
    # (the tables such a core cannot run are skipped there by design: they
    # ran under -cpu max, so these runs keep them out of the skip list)
    out=$(HR_SKIP_LOG= emu "$cpu" $T/test_quant | grep -E "best table|passed")
    echo "$cpu: $out" | tr '\n' ' '
    echo
    grep -q "best table $want\$" <<<"$out" || { echo "test-arm: $cpu should pick $want" >&2; exit 1; }
done

# Under -cpu max the ctest run above checked every table (test_quant and
# test_gemm loop over all of them) and the i8mm one as the best; forcing a
# narrower best table adds the parts that use the best one (hr_matmul).
echo "== narrower tables forced as the best (HR_ISA), fixture logits vs scalar and llama.cpp"
for isa in neon dotprod; do
    for t in test_gemm test_ops; do
        printf '%-8s %-10s ' "$isa" "$t"
        HR_ISA=$isa emu max $T/$t | tail -n 1
    done
done
HR_BIN=$ROOT/build-arm64/tests/hearth-emu HR_SHARED=$SHARED emu max $T/test_isa

# Two threads: the worker pool and barriers under real concurrency (qemu
# runs each guest thread on a host thread); greedy text and logits must
# equal one thread's, bit for bit, with the scalar and the best table.
echo "== threads: -t 2 equals -t 1 (run and logits, scalar and best tables)"
m=$SHARED/models/small-llama-q4_k_m.gguf
ids=1,450,4996,17354,1701,29889,13,1576
for isa in scalar i8mm; do
    for t in 1 2; do
        HR_ISA=$isa timeout 300 qemu-aarch64-static -cpu max build-arm64/hearth run -m "$m" \
            -p "The quick brown fox" -n 12 --temp 0 -t $t >build-arm64/run.$isa.$t 2>/dev/null ||
            { echo "test-arm: hearth run -t $t ($isa) failed or timed out" >&2; exit 1; }
        HR_ISA=$isa timeout 300 qemu-aarch64-static -cpu max build-arm64/hearth logits -m "$m" \
            --ids $ids -t $t -o build-arm64/logits.$isa.$t >/dev/null 2>&1 ||
            { echo "test-arm: hearth logits -t $t ($isa) failed or timed out" >&2; exit 1; }
    done
    cmp -s build-arm64/run.$isa.1 build-arm64/run.$isa.2 ||
        { echo "test-arm: $isa: run -t 2 differs from -t 1" >&2; exit 1; }
    cmp -s build-arm64/logits.$isa.1 build-arm64/logits.$isa.2 ||
        { echo "test-arm: $isa: logits -t 2 differ from -t 1" >&2; exit 1; }
    [ -s build-arm64/logits.$isa.1 ] || { echo "test-arm: $isa: no logits" >&2; exit 1; }
    echo "$isa: -t 2 = -t 1: $(head -c 60 build-arm64/run.$isa.2 | tr '\n' ' ')... and $(stat -c %s build-arm64/logits.$isa.1) bytes of logits"
done

echo "== mixed ring: native x86 head + emulated aarch64 worker"
if [ -x build/hearth ]; then
    bash deploy/mixed-ring.sh
else
    echo "test-arm: no x86 build in build/ (deploy/build.sh): mixed ring skipped" >&2
    exit 1
fi
echo "aarch64 tests passed in $(($(date +%s) - t0)) s"
