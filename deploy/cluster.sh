#!/usr/bin/env bash
# cluster.sh - start / stop a local hearth cluster of N agents on one machine.
#
#   deploy/cluster.sh start -m MODEL [-n 3] [-p 7700] [--netns] [--mem-mb MB]
#                           [-t THREADS] [--insecure] [-- extra head options, e.g. --k 2]
#   deploy/cluster.sh stop
#
# Agents listen on loopback ports BASE, BASE+10, ... (data on +1); agent 0 is
# the head. --netns puts each agent in its own network namespace (hr-ns<i>)
# joined to a bridge hr-br0 in namespace hr-nsbr by veth links with
# addresses 10.77.0.<i+1>/24 (all inside this machine). --mem-mb puts each
# agent in its own cgroup v1 memory group hearth/agent<i> (under this shell's
# own memory group) with that limit. deploy/lab.sh builds labs of unequal
# devices on the same helpers (deploy/lib-lab.sh).
# Security is on: each agent gets its own key folder $DIR/keys/agent<i>
# (CURVE key pair made on first use) and every agent trusts every other
# (the head is trusted under the name "head"); clients run by this script
# use the head's folder. --insecure turns encryption off (benchmarks).
# State (pids, cgroups, namespaces) goes to $HR_CLUSTER_DIR (default
# /tmp/hearth-cluster); `stop` undoes everything it recorded, also after a
# start that failed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${HR_CLUSTER_DIR:-/tmp/hearth-cluster}
BIN=${HEARTH:-$ROOT/build/hearth}
LAB_DIR=$DIR
# shellcheck source=deploy/lib-lab.sh
. "$ROOT/deploy/lib-lab.sh"

stop() {
    [ -d "$DIR" ] || return 0
    lab_teardown
    rm -f "$DIR/head" "$DIR/head_ns"
    echo "cluster stopped"
}

start() {
    local model="" n=3 base=7700 netns=0 mem_mb=0 threads=1 extra=() insecure=0 profile=0
    while [ $# -gt 0 ]; do
        case "$1" in
        -m) model=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        -p) base=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --netns) netns=1; shift ;;
        --mem-mb) mem_mb=$2; shift 2 ;;
        --insecure) insecure=1; shift ;;
        --profile) profile=1; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
        esac
    done
    [ -n "$model" ] || { echo "cluster.sh: give -m MODEL.gguf" >&2; exit 2; }
    [ -x "$BIN" ] || { echo "cluster.sh: no hearth binary at $BIN (set HEARTH=)" >&2; exit 2; }
    stop >/dev/null
    mkdir -p "$DIR"
    rm -f "$DIR/head_ns"
    local names=() cg=""
    for i in $(seq 0 $((n - 1))); do names[i]=agent$i; done
    if [ "$insecure" = 1 ]; then
        echo "cluster.sh: WARNING: --insecure: plaintext links, no authentication" >&2
        echo 1 >"$DIR/insecure"
    else
        rm -f "$DIR/insecure"
        lab_pair "$DIR/keys" agent0 "${names[@]}"
    fi
    if [ "$mem_mb" -gt 0 ]; then
        cg=$(lab_cg_root memory) || { echo "cluster.sh: no cgroup v1 memory hierarchy" >&2; exit 1; }
        cg=$cg/hearth
    fi
    [ "$netns" = 1 ] && lab_bridge hr-nsbr hr-br0
    local head_addr=""
    for i in $(seq 0 $((n - 1))); do
        local host=127.0.0.1 port=$((base + 10 * i)) ns="" cgs=""
        if [ "$netns" = 1 ]; then
            host=10.77.0.$((i + 1)); port=$base; ns=hr-ns$i
            lab_node "$ns" "hr-v$i" hr-nsbr "hr-b$i" hr-br0 "$host/24"
        fi
        local args=(agent -m "$model" --listen "$host:$port" --name "agent$i" -t "$threads")
        # a measured (cached) device profile feeds the planner; off by default
        # so test clusters start fast
        [ "$profile" = 1 ] || args+=(--no-profile)
        if [ "$insecure" = 1 ]; then args+=(--insecure); else args+=(--key-dir "$DIR/keys/agent$i"); fi
        if [ "$i" = 0 ]; then
            head_addr=$host:$port
            echo "$head_addr" >"$DIR/head"
            [ -z "$ns" ] || echo "$ns" >"$DIR/head_ns"
            args+=(--expect $((n - 1)) "${extra[@]}")
        else
            args+=(--head "$head_addr")
        fi
        if [ -n "$cg" ]; then
            lab_cg_make "$cg"
            lab_cg_make "$cg/agent$i"
            echo $((mem_mb * 1024 * 1024)) >"$cg/agent$i/memory.limit_in_bytes"
            cgs=$cg/agent$i
        fi
        # the agent moves itself into its cgroup before exec (lib-lab.sh)
        lab_spawn "$i" "$DIR/agent$i.log" "$ns" "$cgs" -- "$BIN" "${args[@]}"
    done
    # wait until the head reports ready
    for _ in $(seq 300); do
        if head_cmd status --timeout 1 --json 2>/dev/null | grep -q '"ready":true'; then
            echo "cluster of $n agents ready; head $head_addr (logs in $DIR)"
            return 0
        fi
        for i in $(seq 0 $((n - 1))); do
            lab_alive "$i" || { echo "cluster.sh: agent$i exited; see $DIR/agent$i.log" >&2; return 1; }
        done
        sleep 0.2
    done
    echo "cluster.sh: cluster not ready after 60 s; see $DIR/agent*.log" >&2
    return 1
}

# Runs a hearth client command against the head (inside its namespace if any).
head_cmd() {
    local ns="" sec=(--key-dir "$DIR/keys/agent0")
    [ -f "$DIR/head_ns" ] && ns=$(cat "$DIR/head_ns")
    [ -f "$DIR/insecure" ] && sec=(--insecure)
    lab_in "$ns" "$BIN" "$@" "${sec[@]}" --head "$(cat "$DIR/head")"
}

case "${1:-}" in
start) shift; start "$@" ;;
stop) stop ;;
prompt | status) cmd=$1; shift; head_cmd "$cmd" "$@" ;;
*) echo "usage: $0 start -m MODEL [-n N] [-p PORT] [--netns] [--mem-mb MB] [--profile] [--insecure] [-- head opts]" >&2
   echo "       $0 prompt [opts] TEXT | status [--json] | stop" >&2; exit 2 ;;
esac
