#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test, stage by stage:
#   release build      deploy/build.sh (gcc, warnings as errors)
#   release tests      every ctest test (unit, integration, cluster labels);
#                      two at a time: tests that start agents hold one lock
#                      (one at a time among them) and the ones with time
#                      bounds run alone (tests/CMakeLists.txt)
#   lab selftest       the emulated home lab (deploy/lab.sh; needs root,
#                      network namespaces and cgroup v1: prints SKIPPED
#                      otherwise, and fails under CI=true)
#   sweep selftest     deploy/plan-sweep.sh's statistics, verdict and a
#                      whole sweep against a stand-in lab (no root)
#   aarch64            cross build and tests under qemu (deploy/test-arm.sh;
#                      HR_NO_ARM64=1 leaves it out, and says so)
#   sanitizer build    one clang build with AddressSanitizer +
#                      UndefinedBehaviorSanitizer + libFuzzer coverage
#                      (build-san/): the tests and the fuzz targets
#   sanitizer tests    the unit tests and three multi-agent tests (service,
#                      api_health: agents are the sanitized hearth binary;
#                      adapt: agents in threads, re-plans on GLPK),
#                      leaks on (tests/lsan.supp suppresses only the Vulkan
#                      loader's and drivers')
#   format check       clang-format on every tracked .c / .h; no two files of
#                      agent/ or api/ call each other in a cycle
#                      (deploy/calls.py over the release objects)
#   fuzz               every fuzz target for HR_FUZZ_SECONDS (default 20),
#                      as many at once as there are cores
# Each stage prints its wall time; at the end a table of the stage times,
# every part a test skipped with its reason (a skipped test is never a pass
# in disguise), and one closing line: "all tests passed" only when every
# stage passed, else "FAILED: <stage>".
# Usage: deploy/test.sh        (expects the shared fixtures in ../shared)
#        HR_TEST_ONLY="release build,release tests" deploy/test.sh
#                              runs only the stages named (a developer's
#                              shortcut: the closing line then names the
#                              stages left out instead of "all tests passed")
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
jobs=$(nproc 2>/dev/null || echo 2)
T0=$SECONDS
SKIPS=$(mktemp /tmp/hearth-skips.XXXXXX)
export HR_SKIP_LOG=$SKIPS
times=()
left_out=()
current="set-up"

finish() {
    local rc=$?
    trap - EXIT
    echo
    echo "== summary"
    for s in "${times[@]}"; do
        printf '  %-18s %5d s\n' "${s%|*}" "${s#*|}"
    done
    printf '  %-18s %5d s\n' total $((SECONDS - T0))
    local n
    n=$(sort -u "$SKIPS" | grep -c . || true)
    echo "skipped parts: $n"
    sort -u "$SKIPS" | sed 's/^/  skipped: /'
    rm -f "$SKIPS"
    if [ "$rc" -ne 0 ]; then
        echo "FAILED: $current"
        exit "$rc"
    fi
    if [ ${#left_out[@]} -gt 0 ]; then
        echo "the stages run passed; left out by HR_TEST_ONLY: $(IFS=,; echo "${left_out[*]}")"
        return 0
    fi
    echo "all tests passed"
}
trap finish EXIT

# stage NAME COMMAND...: runs it; a failure ends the script (finish names it)
stage() {
    if [ -n "${HR_TEST_ONLY:-}" ] && [[ ",$HR_TEST_ONLY," != *",$1,"* ]]; then
        left_out+=("$1")
        return 0
    fi
    current=$1
    shift
    local t=$SECONDS
    echo "== $current"
    "$@"
    times+=("$current|$((SECONDS - t))")
    echo "-- $current: $((SECONDS - t)) s"
}

# ctest_run DIR LABEL [ctest args...]: ctest's verdict, and a line in the
# skip list for every test that exited 77 as a whole
ctest_run() {
    local dir=$1 what=$2 log
    shift 2
    log=$(mktemp /tmp/hearth-ctest.XXXXXX)
    local rc=0
    (cd "$dir" && ctest --output-on-failure -j"$jobs" "$@") 2>&1 | tee "$log" || rc=$?
    sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*\*\*\*Skipped.*/\1/p' "$log" |
        while read -r t; do echo "$what: test $t skipped as a whole (exit 77)" >>"$SKIPS"; done
    rm -f "$log"
    return "$rc"
}

release_tests() { ctest_run build "release ctest"; }

aarch64() {
    if [ "${HR_NO_ARM64:-0}" = 1 ]; then
        echo "aarch64: HR_NO_ARM64=1: cross build and qemu tests left out" | tee -a "$SKIPS"
        return 0
    fi
    bash deploy/test-arm.sh
}

san_build() {
    # -O1: asserts on, fast enough for the agents' timing; libFuzzer's
    # coverage (fuzzer-no-link) in every object so the fuzz targets share it
    CC=clang cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
        -DHR_SANITIZE=ON -DHR_FUZZ=ON >/dev/null
    cmake --build build-san -j"$jobs"
}

san_tests() {
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
        LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=1" \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest_run build-san "sanitizer ctest" -L unit
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
        LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=1" \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest_run build-san "sanitizer ctest" -R '^(service|api_health|adapt)$'
}

format_check() {
    local files
    files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
    # shellcheck disable=SC2086
    clang-format --dry-run --Werror $files
    python3 deploy/calls.py build agent api | tail -1
    python3 deploy/calls.py build agent api >/dev/null
}

fuzz() { HR_FUZZ_BUILD=build-san bash deploy/fuzz.sh "${HR_FUZZ_SECONDS:-20}"; }

stage "dependencies" bash deploy/install-deps.sh
stage "release build" bash deploy/build.sh
stage "release tests" release_tests
stage "lab selftest" bash deploy/lab.sh selftest
stage "sweep selftest" bash deploy/plan-sweep.sh selftest
stage "aarch64" aarch64
stage "sanitizer build" san_build
stage "sanitizer tests" san_tests
stage "format check" format_check
stage "fuzz" fuzz
