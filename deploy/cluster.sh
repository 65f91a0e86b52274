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
# agent in its own cgroup v1 memory group hearth/agent<i> with that limit.
# Security is on: each agent gets its own key folder $DIR/keys/agent<i>
# (CURVE key pair made on first use) and every agent trusts every other
# (the head is trusted under the name "head"); clients run by this script
# use the head's folder. --insecure turns encryption off (benchmarks).
# State (pids, cgroups, namespaces) goes to $HR_CLUSTER_DIR (default
# /tmp/hearth-cluster); `stop` undoes everything it recorded.
set -euo pipefail

DIR=${HR_CLUSTER_DIR:-/tmp/hearth-cluster}
BIN=${HEARTH:-$(cd "$(dirname "$0")/.." && pwd)/build/hearth}
CG=/sys/fs/cgroup/memory/hearth

stop() {
    [ -d "$DIR" ] || return 0
    for f in "$DIR"/pid.*; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
    done
    for f in "$DIR"/pid.*; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$f"
    done
    if [ -f "$DIR/cgroups" ]; then
        while read -r g; do
            [ -d "$g" ] && rmdir "$g" 2>/dev/null || true
        done <"$DIR/cgroups"
        rmdir "$CG" 2>/dev/null || true
        rm -f "$DIR/cgroups"
    fi
    if [ -f "$DIR/netns" ]; then
        while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done <"$DIR/netns"
        rm -f "$DIR/netns"
    fi
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
    if [ "$insecure" = 1 ]; then
        echo "cluster.sh: WARNING: --insecure: plaintext links, no authentication" >&2
        echo 1 >"$DIR/insecure"
    else
        rm -f "$DIR/insecure"
        pair "$n"
    fi
    if [ "$netns" = 1 ]; then
        ip netns add hr-nsbr
        echo hr-nsbr >>"$DIR/netns"
        ip -n hr-nsbr link add hr-br0 type bridge
        ip -n hr-nsbr link set hr-br0 up
    fi
    local head_addr=""
    for i in $(seq 0 $((n - 1))); do
        local host=127.0.0.1 port=$((base + 10 * i)) wrap=()
        if [ "$netns" = 1 ]; then
            host=10.77.0.$((i + 1)); port=$base
            ip netns add "hr-ns$i"
            echo "hr-ns$i" >>"$DIR/netns"
            ip link add "hr-v$i" type veth peer name "hr-b$i"
            ip link set "hr-v$i" netns "hr-ns$i"
            ip link set "hr-b$i" netns hr-nsbr
            ip -n hr-nsbr link set "hr-b$i" master hr-br0 up
            ip -n "hr-ns$i" addr add "$host/24" dev "hr-v$i"
            ip -n "hr-ns$i" link set "hr-v$i" up
            ip -n "hr-ns$i" link set lo up
            wrap=(ip netns exec "hr-ns$i")
        fi
        local args=(agent -m "$model" --listen "$host:$port" --name "agent$i" -t "$threads"
                    --key-dir "$DIR/keys/agent$i")
        # a measured (cached) device profile feeds the planner; off by default
        # so test clusters start fast
        [ "$profile" = 1 ] || args+=(--no-profile)
        [ "$insecure" = 1 ] && args+=(--insecure)
        if [ "$i" = 0 ]; then
            head_addr=$host:$port
            args+=(--expect $((n - 1)) "${extra[@]}")
        else
            args+=(--head "$head_addr")
        fi
        # start inside the cgroup: the child moves itself in before exec
        if [ "$mem_mb" -gt 0 ]; then
            mkdir -p "$CG/agent$i"
            echo "$CG/agent$i" >>"$DIR/cgroups"
            echo $((mem_mb * 1024 * 1024)) >"$CG/agent$i/memory.limit_in_bytes"
            "${wrap[@]}" sh -c "echo \$\$ > $CG/agent$i/cgroup.procs; exec \"\$0\" \"\$@\"" \
                "$BIN" "${args[@]}" 2>"$DIR/agent$i.log" &
        else
            "${wrap[@]}" "$BIN" "${args[@]}" 2>"$DIR/agent$i.log" &
        fi
        echo $! >"$DIR/pid.$i"
    done
    echo "$head_addr" >"$DIR/head"
    [ "$netns" = 1 ] && echo "hr-ns0" >"$DIR/head_ns" || rm -f "$DIR/head_ns"
    # wait until the head reports ready
    for _ in $(seq 300); do
        if head_cmd status --timeout 1 --json 2>/dev/null | grep -q '"ready":true'; then
            echo "cluster of $n agents ready; head $head_addr (logs in $DIR)"
            return 0
        fi
        sleep 0.2
    done
    echo "cluster.sh: cluster not ready after 60 s; see $DIR/agent*.log" >&2
    return 1
}

# Local pairing: a key pair per agent, everyone trusts everyone.
pair() {
    local n=$1 keys=()
    for i in $(seq 0 $((n - 1))); do
        keys[i]=$("$BIN" key show --key-dir "$DIR/keys/agent$i" 2>/dev/null)
    done
    for i in $(seq 0 $((n - 1))); do
        for j in $(seq 0 $((n - 1))); do
            [ "$i" = "$j" ] && continue
            local nm="agent$j"
            [ "$j" = 0 ] && nm=head
            "$BIN" trust add "$nm" "${keys[j]}" --key-dir "$DIR/keys/agent$i" 2>/dev/null
        done
    done
}

# Runs a hearth client command against the head (inside its namespace if any).
head_cmd() {
    local wrap=() sec=(--key-dir "$DIR/keys/agent0")
    [ -f "$DIR/head_ns" ] && wrap=(ip netns exec "$(cat "$DIR/head_ns")")
    [ -f "$DIR/insecure" ] && sec=(--insecure)
    "${wrap[@]}" "$BIN" "$@" "${sec[@]}" --head "$(cat "$DIR/head")"
}

case "${1:-}" in
start) shift; start "$@" ;;
stop) stop ;;
prompt | status) cmd=$1; shift; head_cmd "$cmd" "$@" ;;
*) echo "usage: $0 start -m MODEL [-n N] [-p PORT] [--netns] [--mem-mb MB] [--profile] [--insecure] [-- head opts]" >&2
   echo "       $0 prompt [opts] TEXT | status [--json] | stop" >&2; exit 2 ;;
esac
