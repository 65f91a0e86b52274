#!/usr/bin/env bash
# Configures and builds hearth into build/ (Release, warnings as errors).
# Usage: deploy/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHR_WERROR=ON "$@" >/dev/null
cmake --build build -j"$jobs"
