#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer targets (clang, ASan + UBSan) and runs each
# for a bounded time on a scratch copy of its committed seed corpus.
#
#   deploy/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 30 s, all)
#
# Targets: fuzz_gguf (GGUF parser), fuzz_frame (wire-frame decoder),
# fuzz_json (PLAN / profile JSON parsers), fuzz_http (HTTP API request
# parser), fuzz_beacon (discovery beacons, FETCH / CHUNK payloads). Seeds: tests/corpus/<name without fuzz_>/. Findings (crash-*,
# leak-*, timeout-*) land in build-fuzz/findings/ and fail the script; the
# executions count of each run is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_gguf fuzz_frame fuzz_json fuzz_http fuzz_beacon)
command -v clang >/dev/null || { echo "fuzz.sh: needs clang" >&2; exit 2; }
CC=clang cmake -S . -B build-fuzz -DHR_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-fuzz -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" >/dev/null
mkdir -p build-fuzz/findings
status=0
for t in "${targets[@]}"; do
    seeds=tests/corpus/${t#fuzz_}
    work=build-fuzz/corpus/${t#fuzz_}
    mkdir -p "$work"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null || true
    log=build-fuzz/$t.log
    if ASAN_OPTIONS=detect_leaks=1 "build-fuzz/tests/$t" -max_total_time="$secs" -max_len=65536 \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix=build-fuzz/findings/"$t"- "$work" >"$log" 2>&1; then
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
        echo "$t: ok, ${execs:-?} executions in $secs s (corpus $(ls "$work" | wc -l) files)"
    else
        echo "$t: FINDING, see $log and build-fuzz/findings/" >&2
        tail -30 "$log" >&2
        status=1
    fi
done
exit $status
