#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer targets (clang, ASan + UBSan) and runs each
# for a bounded time on a scratch copy of its committed seed corpus, as many
# at once as there are cores (HR_FUZZ_JOBS).
#
#   deploy/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 30 s, all)
#
# Targets: fuzz_gguf (GGUF parser), fuzz_frame (wire-frame decoder),
# fuzz_json (PLAN / profile JSON parsers), fuzz_http (HTTP API request
# parser), fuzz_beacon (discovery beacons, FETCH / CHUNK payloads). Seeds:
# tests/corpus/<name without fuzz_>/. Findings (crash-*, leak-*, timeout-*)
# land in build-fuzz/findings/ and fail the script; the executions count of
# each run is printed. HR_FUZZ_BUILD=DIR uses a build folder already
# configured with -DHR_FUZZ=ON (deploy/test.sh's sanitizer build) instead of
# configuring build-fuzz/. Leaks of the Vulkan loader and drivers are
# suppressed (tests/lsan.supp); any other leak is a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_gguf fuzz_frame fuzz_json fuzz_http fuzz_beacon)
command -v clang >/dev/null || { echo "fuzz.sh: needs clang" >&2; exit 2; }
B=${HR_FUZZ_BUILD:-build-fuzz}
par=${HR_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ -z "${HR_FUZZ_BUILD:-}" ]; then
    CC=clang cmake -S . -B "$B" -DHR_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$B" -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" >/dev/null
mkdir -p "$B"/findings
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# one target: its verdict line in $B/<target>.verdict, its status as exit code
one() {
    local t=$1 seeds=tests/corpus/${1#fuzz_} work=$B/corpus/${1#fuzz_} log=$B/$1.log
    mkdir -p "$work"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null || true
    if ASAN_OPTIONS=detect_leaks=1 "$B/tests/$t" -max_total_time="$secs" -max_len=65536 \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$B"/findings/"$t"- "$work" >"$log" 2>&1; then
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
        echo "$t: ok, ${execs:-?} executions in $secs s (corpus $(ls "$work" | wc -l) files)"
        return 0
    fi
    echo "$t: FINDING, see $log and $B/findings/"
    tail -30 "$log"
    return 1
}
# $par targets at a time (each is one process on one core)
status=0
pids=() names=()
for t in "${targets[@]}"; do
    one "$t" >"$B/$t.verdict" 2>&1 &
    pids+=($!) names+=("$t")
    if [ ${#pids[@]} -ge "$par" ]; then
        wait "${pids[0]}" || status=1
        cat "$B/${names[0]}.verdict"
        pids=("${pids[@]:1}") names=("${names[@]:1}")
    fi
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "$B/${names[$i]}.verdict"
done
exit $status
