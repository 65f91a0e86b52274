#!/usr/bin/env bash
# lab-streams.sh - several requests at once on an emulated lab (deploy/lab.sh):
# aggregate generation tokens/s of 1 stream against C concurrent streams
# through the head's HTTP API, on the head's own plan and default options
# (only --api-listen is added).
#
#   deploy/lab-streams.sh [SPEC.json] [-m MODEL] [-c 1,4] [-n TOKENS] [-r REPS]
#
# SPEC defaults to deploy/labs/memory-short.json (a model about twice the
# devices' memory: every step streams weights from disk, once for all the
# sequences in it). The page cache is dropped before the lab comes up; one
# unmeasured 2-token request warms the ring, then deploy/stream-bench.py
# runs inside the head's network namespace (-c, -n, -r as there) and prints
# per-stream and aggregate figures and the ratio to one stream.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB="$ROOT/deploy/lab.sh"
export HR_LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
spec="$ROOT/deploy/labs/memory-short.json" model="" conc=1,4 ntok=16 reps=2
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    spec=$1
    shift
fi
while [ $# -gt 0 ]; do
    case "$1" in
    -m) model=$2; shift 2 ;;
    -c) conc=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    *) echo "lab-streams.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -f "$spec" ] || { echo "usage: $0 [SPEC.json] [-m MODEL] [-c 1,4] [-n TOKENS] [-r REPS]" >&2; exit 2; }
[ -n "$model" ] || model=$(jq -r '.model' "$spec")
trap 'bash "$LAB" down >/dev/null 2>&1 || true' EXIT
bash "$LAB" down >/dev/null 2>&1 || true
sync
echo 3 >/proc/sys/vm/drop_caches
# the head is device 0 of the ring: its address is the first of the bridge
h=$(jq -r '(.head // 0) as $h | if ($h | type) == "number" then $h
           else ([.devices[].name] | index($h)) // -1 end' "$spec")
api="10.77.1.$((h + 1)):8080"
bash "$LAB" up "$spec" -m "$model" -- --api-listen "$api" >/dev/null
ns=$(cat "$HR_LAB_DIR/head_ns")
st=$(bash "$LAB" status --json)
echo "lab $(jq -r .name "$spec") ($spec), model $model; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "plan: k $(echo "$st" | jq -r .k), windows $(echo "$st" | jq -r '[.devices[] | .w] | map(tostring) | join(",")'), KV slots $(echo "$st" | jq -r '.kv_slots // "?"')"
ip netns exec "$ns" python3 "$ROOT/deploy/stream-bench.py" "http://$api" -c 2 -n 2 -r 1 >/dev/null 2>&1 || true
ip netns exec "$ns" python3 "$ROOT/deploy/stream-bench.py" "http://$api" -c "$conc" -n "$ntok" -r "$reps"
