#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: the full suite on a
# release build and the emulated-lab selftest (deploy/lab.sh; root only),
# then the aarch64 cross build and its tests under qemu (deploy/test-arm.sh;
# HR_NO_ARM64=1 leaves it out), then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer, then the format check, then every fuzz target
# for a bounded time (HR_FUZZ_SECONDS, default 20).
# Usage: deploy/test.sh        (expects the shared fixtures in ../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

echo "== release build + all tests"
bash deploy/build.sh
(cd build && ctest --output-on-failure -j1)

echo "== emulated home lab selftest (needs root and ip netns; prints SKIPPED otherwise)"
bash deploy/lab.sh selftest

if [ "${HR_NO_ARM64:-0}" != 1 ]; then
    echo "== aarch64: cross build, tests under qemu-aarch64-static, mixed x86 + aarch64 ring"
    bash deploy/test-arm.sh
fi

echo "== sanitizer build (ASan + UBSan) + unit tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHR_WERROR=ON -DHR_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit -j1)

echo "== format check"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
clang-format --dry-run --Werror $files
echo "== fuzz targets (clang libFuzzer, ASan + UBSan), ${HR_FUZZ_SECONDS:-20} s each"
bash deploy/fuzz.sh "${HR_FUZZ_SECONDS:-20}"
echo "all tests passed"
