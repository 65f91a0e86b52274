#!/usr/bin/env bash
# zeroconf.sh - the zero-config home cluster, measured in network namespaces
# on one bridge (root; iproute2, nsenter): a head with the model and two
# workers with no model file and no --head form a cluster by discovery,
# pairing once by the head's join token; the workers fetch their windows
# from the head over links shaped by tbf (phase A). Then worker 2 starts
# over with an empty cache, is killed (-9) mid-fetch and restarted; it must
# resume without fetching its completed chunks again (phase B).
# Prints per worker the bytes fetched against the plan's window bytes, the
# fetch throughput against the link rate, and compares the answer with
# `hearth run` on the head's file. Everything is torn down at the end (also
# on failure), and the script checks that no namespace, link or qdisc is left.
#
#   deploy/zeroconf.sh [-m MODEL] [--mbit N] [--windows 8,7,7] [-n TOKENS]
#
# Default model /tmp/tl-q4_0.gguf (`hearth mkmodel -o /tmp/tl-q4_0.gguf
# --shape tinyllama --type q4_0`), worker links 100 Mbit/s (the head's 1000),
# windows 8,7,7 (forced, so that a lost worker leaves the others' windows
# alone). Exit status 0 only when every check passed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEARTH:-$ROOT/build/hearth}
LAB_DIR=${HR_ZC_DIR:-/tmp/zc-lab}
PFX=zc-
MODEL=/tmp/tl-q4_0.gguf
MBIT=100
WINDOWS=8,7,7
NTOK=16
PROMPT="Once upon a time"
# shellcheck source=deploy/lib-lab.sh
. "$ROOT/deploy/lib-lab.sh"

while [ $# -gt 0 ]; do
    case "$1" in
    -m) MODEL=$2; shift 2 ;;
    --mbit) MBIT=$2; shift 2 ;;
    --windows) WINDOWS=$2; shift 2 ;;
    -n) NTOK=$2; shift 2 ;;
    *) echo "usage: $0 [-m MODEL] [--mbit N] [--windows A,B,C] [-n TOKENS]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "zeroconf.sh: needs root (network namespaces, tc)" >&2; exit 1; }
[ -r "$MODEL" ] || { echo "zeroconf.sh: no model $MODEL" >&2; exit 1; }
[ -x "$BIN" ] || { echo "zeroconf.sh: no $BIN (build first)" >&2; exit 1; }

fail=0
check() { # check DESCRIPTION COND...
    local what=$1
    shift
    if "$@"; then echo "  ok   $what"; else echo "  FAIL $what"; fail=1; fi
}

cleanup() {
    lab_teardown
    local left
    left=$(lab_leftovers "$PFX" "zc-none")
    if [ -n "$left" ]; then
        echo "zeroconf.sh: LEFT BEHIND:" >&2
        echo "$left" >&2
        fail=1
    else
        echo "teardown: no namespace, link or qdisc left"
    fi
}

lab_teardown # a previous run's leftovers
rm -rf "$LAB_DIR"
mkdir -p "$LAB_DIR"
trap 'rc=$?; [ "$rc" = 0 ] || { echo "zeroconf.sh: stopped early (status $rc)" >&2; fail=1; }; cleanup; exit $fail' EXIT

# ---- the lab: a bridge, three namespaces, shaped links ----
lab_bridge "${PFX}nsbr" "${PFX}br0"
names=(head w1 w2)
for i in 0 1 2; do
    lab_node "${PFX}ns$i" "${PFX}v$i" "${PFX}nsbr" "${PFX}b$i" "${PFX}br0" "10.78.1.$((i + 1))/24"
    rate=$MBIT
    [ "$i" = 0 ] && rate=$((MBIT * 10))
    lab_shape "${PFX}ns$i" "${PFX}v$i" "$rate"
    lab_shape "${PFX}nsbr" "${PFX}b$i" "$rate"
done

# ---- step 2 of three: the head, with the model ----
K=$LAB_DIR/keys
token=$("$BIN" key token --key-dir "$K/head" 2>/dev/null | grep -o 'HJ1[^ ]*' | head -1)
lab_spawn 0 "$LAB_DIR/head.log" "${PFX}ns0" "" -- "$BIN" agent -m "$MODEL" --name head \
    --listen 10.78.1.1:7700 --key-dir "$K/head" --no-profile -t 1 --k 1 --windows "$WINDOWS" \
    --expect 2
for _ in $(seq 100); do grep -q "beaconing" "$LAB_DIR/head.log" && break; sleep 0.1; done

# ---- step 3: the workers, no model, no --head ----
worker() { # worker I: starts worker I (appending to its log)
    local i=$1
    lab_spawn "$i" "$LAB_DIR/w$i.log.$(date +%s%N)" "${PFX}ns$i" "" -- "$BIN" agent \
        --name "w$i" --listen "10.78.1.$((i + 1)):7700" --key-dir "$K/w$i" --join "$token" \
        --cache-dir "$LAB_DIR/cache-w$i" --no-profile -t 1
}
echo "discover from w1's namespace (before pairing: the head is not trusted there yet):"
lab_in "${PFX}ns1" "$BIN" discover --timeout 2 --key-dir "$K/w1" | sed 's/^/  /'

cluster_ready() { # cluster_ready: waits up to 5 min for the head to serve
    for _ in $(seq 600); do
        if lab_in "${PFX}ns0" "$BIN" status --head 10.78.1.1:7700 --key-dir "$K/head" --json \
            2>/dev/null | jq -e '.ready == true' >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}
wlog() { cat "$LAB_DIR"/w"$1".log.* 2>/dev/null; } # every run of worker I

# ---- phase A: both workers fetch their windows from nothing ----
t_start=$(date +%s.%N)
worker 1
worker 2
cluster_ready && ready=1 || ready=0
t_ready=$(date +%s.%N)
check "cluster formed by discovery (no --head, no model on the workers) and ready" [ "$ready" = 1 ]
echo "ready after $(awk -v a="$t_start" -v b="$t_ready" 'BEGIN { printf "%.1f", b - a }') s"
for i in 1 2; do
    line=$(wlog "$i" | grep 'fetched .* bytes (windows' | tail -1 || true)
    win=$(echo "$line" | sed -n 's/.*(windows \([0-9]*\) bytes).*/\1/p')
    tot=$(echo "$line" | sed -n 's/.*Since start: \([0-9]*\) bytes fetched.*/\1/p')
    hdr=$(wlog "$i" | sed -n 's/.*at start: [0-9]* bytes wanted, \([0-9]*\) of them fetched.*/\1/p' | head -1)
    mbs=$(echo "$line" | sed -n 's/.*s: \([0-9.]*\) MB\/s$/\1/p')
    got=$(( ${tot:-0} - ${hdr:-0} ))
    echo "w$i: plan's windows $win bytes; fetched $got bytes for them (+ $hdr bytes of header" \
        "at start); $mbs MB/s over its fetch"
    check "w$i fetched exactly its windows ($got = $win bytes)" [ "$got" = "${win:-x}" ]
    pct=$(awk -v m="${mbs:-0}" -v r="$MBIT" 'BEGIN { printf "%.0f", 100 * m * 8 / r }')
    echo "w$i fetch throughput: ${mbs:-?} MB/s = ${pct}% of its ${MBIT} Mbit/s link (tbf)"
    check "w$i fetch throughput >= 80% of the link rate" [ "$pct" -ge 80 ]
done

# ---- phase B: w2 starts over with an empty cache, is killed mid-fetch, resumes ----
kill -9 "$(cat "$LAB_DIR/pid.2")"
wait "$(cat "$LAB_DIR/pid.2")" 2>/dev/null || true
rm -rf "$LAB_DIR/cache-w2" "$LAB_DIR"/w2.log.*
worker 2
killed=0
for _ in $(seq 600); do
    pct=$(wlog 2 | grep -o 'fetching model bytes: [0-9.]* / [0-9.]*' | tail -1 |
        awk '{ if ($6 > 0) printf "%d", 100 * $4 / $6; else print 0 }' || true)
    if [ "${pct:-0}" -ge 30 ]; then
        kill -9 "$(cat "$LAB_DIR/pid.2")"
        wait "$(cat "$LAB_DIR/pid.2")" 2>/dev/null || true
        killed=1
        echo "killed w2 (kill -9) mid-fetch at ${pct}% of its windows"
        sleep 1
        worker 2
        break
    fi
    sleep 0.1
done
check "w2 killed mid-fetch" [ "$killed" = 1 ]
cluster_ready && ready=1 || ready=0
check "cluster ready again after the restart" [ "$ready" = 1 ]
last=$(wlog 2 | grep 'bytes missing from the head' | tail -1 || true)
win=$(echo "$last" | sed -n 's/.*windows of \([0-9]*\) bytes.*/\1/p')
here=$(echo "$last" | sed -n 's/.*bytes, \([0-9]*\) of them here.*/\1/p')
miss=$(echo "$last" | sed -n 's/.*fetching \([0-9]*\) bytes missing.*/\1/p')
held=$(wlog 2 | sed -n 's/.*MiB held in \([0-9]*\) verified chunks (\([0-9]*\) listed, \([0-9]*\) corrupt).*/\1 verified of \2 listed, \3 corrupt/p' | tail -1)
echo "w2 after the restart: sidecar $held; of its $win window bytes ${here:-?} were here," \
    "${miss:-?} fetched"
check "w2 resumed: kept its completed chunks (${here:-0} > 0) and fetched only the rest" \
    test "${here:-0}" -gt 0 -a "$((${here:-0} + ${miss:-0}))" = "${win:-x}"
fin=$(wlog 2 | { grep 'fetched .* bytes (windows' || true; } | tail -1 | sed -n 's/.*plan [0-9]*: fetched \([0-9]*\) bytes.*/\1/p')
check "w2's restart fetched exactly the missing part (${fin:-?} = ${miss:-?} bytes)" \
    [ "${fin:-x}" = "${miss:-y}" ]
fin1=$(wlog 1 | grep -c 'fetching [0-9]* bytes missing' || true)
echo "w1: $fin1 plan(s) found bytes missing (a re-plan during a fetch asks only for the rest)"

# ---- the answer ----
ref=$("$BIN" run -m "$MODEL" -n "$NTOK" --temp 0 -p "$PROMPT" 2>/dev/null)
ans=$(lab_in "${PFX}ns0" "$BIN" prompt --head 10.78.1.1:7700 --key-dir "$K/head" -n "$NTOK" \
    --temp 0 "$PROMPT" 2>/dev/null)
echo "hearth run: $ref"
echo "cluster:    $ans"
check "the cluster's answer equals hearth run's" [ "$ref" = "$ans" ]
grep -h "beacon\|discover" "$LAB_DIR"/*.log* | head -5 | sed 's/^/  log: /'
