# shellcheck shell=bash
# lib-lab.sh - shell helpers shared by deploy/cluster.sh and deploy/lab.sh
# (sourced, not run): key pairing, network namespaces joined by veth links to
# a bridge, tbf link shaping, cgroup v1 groups (memory, cpu, blkio), starting
# an agent inside a namespace and its cgroups, and teardown.
#
# Every resource is written to $LAB_DIR/resources ("KIND ARGS", one a line)
# *before* it is made, so lab_teardown also undoes a start that failed half
# way. Agents' pids go to $LAB_DIR/pid.<i> (deploy/soak.sh reads them).
# Callers set LAB_DIR and BIN (the hearth binary) and use `set -euo pipefail`.

lab_rec() { echo "$*" >>"$LAB_DIR/resources"; }

# lab_netns_new NS: fails (recording nothing) when namespace NS exists
# already, e.g. another lab's, so teardown never removes what it did not make.
lab_netns_new() {
    if [ -e "/run/netns/$1" ]; then
        echo "network namespace $1 exists already (another lab or cluster up?)" >&2
        return 1
    fi
    lab_rec netns "$1"
    ip netns add "$1"
}

# ---- key pairing ----

# lab_pair KEYROOT HEADNAME NAME...: a key pair per device (folder
# KEYROOT/NAME, made on first use); every device trusts every other, the head
# under the name "head".
lab_pair() {
    local root=$1 head=$2
    shift 2
    local names=("$@") keys=() i j nm
    for i in "${!names[@]}"; do
        keys[i]=$("$BIN" key show --key-dir "$root/${names[i]}" 2>/dev/null)
    done
    for i in "${!names[@]}"; do
        for j in "${!names[@]}"; do
            [ "$i" = "$j" ] && continue
            nm=${names[j]}
            [ "$nm" = "$head" ] && nm="head"
            "$BIN" trust add "$nm" "${keys[j]}" --key-dir "$root/${names[i]}" >/dev/null 2>&1
        done
    done
}

# ---- network ----

# lab_bridge NS BR: a namespace holding bridge BR (both go with the namespace).
lab_bridge() {
    lab_netns_new "$1"
    ip -n "$1" link add "$2" type bridge
    ip -n "$1" link set "$2" up
}

# lab_node NS DEV BRNS BDEV BR ADDR/PREFIX: namespace NS with veth DEV
# (address ADDR) whose peer BDEV is a port of bridge BR in namespace BRNS.
# The veth is made directly inside the two namespaces (no name in the host's).
lab_node() {
    local ns=$1 dev=$2 brns=$3 bdev=$4 br=$5 addr=$6
    lab_netns_new "$ns"
    lab_rec link "$brns" "$bdev"
    ip link add name "$dev" netns "$ns" type veth peer name "$bdev" netns "$brns"
    ip -n "$brns" link set "$bdev" master "$br" up
    ip -n "$ns" addr add "$addr" dev "$dev"
    ip -n "$ns" link set "$dev" up
    ip -n "$ns" link set lo up
}

# lab_shape NS DEV MBIT: token bucket on DEV's egress at MBIT Mbit/s (burst
# 10 ms of traffic, at least 32 KiB) behind a queue of 50 ms of traffic, at
# least 256 KiB: a slow link's 50 ms is a few packets (2 Mbit/s: 12.5 KB),
# and dropping the rest of a burst (a prompt's rows) made TCP retransmit,
# 978 of 2520 packets on slow-middle's 2 Mbit/s link, where a home link's
# buffer holds them and only delays them.
lab_shape() {
    local ns=$1 dev=$2 mbit=$3 burst limit
    burst=$(awk -v m="$mbit" 'BEGIN { b = m * 1e6 / 8 / 100; if (b < 32768) b = 32768; printf "%d", b }')
    limit=$(awk -v m="$mbit" -v b="$burst" 'BEGIN { q = m * 1e6 / 8 * 0.05; if (q < 262144) q = 262144; printf "%d", q + b }')
    lab_rec qdisc "$ns" "$dev"
    tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${mbit}mbit" burst "$burst" limit "$limit"
}

# ---- cgroups (v1) ----

# lab_cg_root CONTROLLER: the folder of this shell's own group in the
# hierarchy holding CONTROLLER (mount point from /proc/self/mountinfo plus the
# path from /proc/self/cgroup), so lab groups nest under it.
lab_cg_root() {
    local ctl=$1 mnt rel
    mnt=$(awk -v c="$ctl" '{
            for (i = 7; $i != "-"; i++) ;
            if ($(i + 1) != "cgroup") next
            n = split($(i + 3), o, ",")
            for (j = 1; j <= n; j++) if (o[j] == c) { print $5; exit }
          }' /proc/self/mountinfo)
    [ -n "$mnt" ] || return 1
    rel=$(awk -F: -v c="$ctl" '{ n = split($2, o, ","); for (j = 1; j <= n; j++) if (o[j] == c) { print $3; exit } }' /proc/self/cgroup)
    echo "$mnt${rel%/}"
}

# lab_cg_make DIR: makes a cgroup folder (recorded once; removed by teardown).
lab_cg_make() {
    grep -qxF "cg $1" "$LAB_DIR/resources" 2>/dev/null || lab_rec cg "$1"
    mkdir -p "$1"
}

# lab_blkdev FILE: MAJOR:MINOR of the whole disk holding FILE (blkio throttle
# rules take disks, not partitions). Follows st_dev, or the mount's source
# device when st_dev is anonymous (major 0: overlayfs, btrfs, ...).
lab_blkdev() {
    local f=$1 mm src sys
    mm=$(stat -c '%Hd:%Ld' "$f")
    if [ "${mm%%:*}" = 0 ]; then
        src=$(findmnt -n -o SOURCE --target "$f" 2>/dev/null | head -1)
        src=${src%%[*}
        [ -b "$src" ] || return 1
        mm=$(lsblk -dno MAJ:MIN "$src" | tr -d ' ')
    fi
    sys=/sys/dev/block/$mm
    [ -e "$sys" ] || return 1
    if [ -e "$sys/partition" ]; then
        mm=$(cat "$(readlink -f "$sys")/../dev")
    fi
    echo "$mm"
}

# ---- paced disks ----

# lab_disk_image MODEL DIR: prints the path of an ext4 image (in DIR) that
# holds a copy of MODEL under its own name, made on first use and again when
# MODEL changes (size or time; the stamp beside it). No journal: mounted
# read-only, it has nothing to replay.
lab_disk_image() {
    local model=$1 dir=$2 img stamp want
    img=$dir/$(basename "$model" .gguf).img
    stamp=$img.stamp
    want="$(stat -c '%s %Y' "$model") $(basename "$model")"
    if [ -f "$img" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        echo "$img"
        return 0
    fi
    mkdir -p "$dir"
    local src=$dir/src.$$ kib
    rm -rf "$src" "$img" "$stamp"
    mkdir "$src"
    ln "$model" "$src/" 2>/dev/null || cp "$model" "$src/"
    # the file, 2% of it for the file system's own blocks, and 64 MiB
    kib=$(stat -c %s "$model" | awk '{ printf "%d", $1 / 1024 * 1.02 + 65536 }')
    echo "lab.sh: making a disk image of $(basename "$model") (once per model)" >&2
    if ! mkfs.ext4 -q -F -b 4096 -m 0 -O ^has_journal -L hearth-lab -d "$src" "$img.tmp" "${kib}K" >&2; then
        rm -rf "$src" "$img.tmp"
        return 1
    fi
    rm -rf "$src"
    mv "$img.tmp" "$img"
    echo "$want" >"$stamp"
    echo "$img"
}

# lab_disk_why: why this machine cannot give paced disks (empty: it can).
# They need the hearth-lab-disk helper ($DISKBIN, built with libfuse3),
# /dev/fuse, loop devices, losetup and mkfs.ext4.
lab_disk_why() {
    if [ ! -x "${DISKBIN:-}" ]; then
        echo "no ${DISKBIN:-hearth-lab-disk} (build with libfuse3-dev: deploy/install-deps.sh)"
    elif [ ! -c /dev/fuse ]; then
        echo "no /dev/fuse"
    elif ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
        echo "needs losetup and mkfs.ext4"
    elif [ ! -e /dev/loop-control ]; then
        echo "no loop devices (/dev/loop-control)"
    fi
}

# lab_disk_up IMAGE MBPS DIR: a disk of MBPS MB/s holding IMAGE's files at
# DIR/fs: the helper serves IMAGE at DIR/dev with its reads paced, a loop
# device (direct I/O) reads that, and DIR/fs mounts the loop device read-only.
# The device's page cache is its own (DIR/fs), and every read that misses it
# waits for the rate. Each part is recorded for teardown.
lab_disk_up() {
    local img=$1 mbps=$2 dir=$3 pid loop served
    served=$dir/dev/$(basename "$img") # the image as the helper serves it
    mkdir -p "$dir/dev" "$dir/fs"
    "$DISKBIN" "$img" "$dir/dev" "$mbps" -f >"$dir/disk.log" 2>&1 </dev/null &
    pid=$!
    lab_rec fuse "$dir/dev" "$pid"
    for _ in $(seq 50); do
        [ -f "$served" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$dir/disk.log" >&2; return 1; }
        sleep 0.1
    done
    [ -f "$served" ] || { echo "paced disk at $dir/dev did not come up" >&2; return 1; }
    loop=$(losetup -f --show -r --direct-io=on "$served") || return 1
    lab_rec loop "$loop"
    # the read-ahead of the disk holding the image (a loop device starts at 128 KiB)
    local mm ra
    if mm=$(lab_blkdev "$img") && ra=$(cat "/sys/dev/block/$mm/queue/read_ahead_kb" 2>/dev/null); then
        echo "$ra" >"/sys/block/$(basename "$loop")/queue/read_ahead_kb" || true
    fi
    lab_rec mount "$dir/fs"
    mount -t ext4 -o ro,noatime "$loop" "$dir/fs"
}

# ---- agents ----

# lab_spawn I LOG NS CGDIRS -- CMD...: starts CMD in the background inside
# network namespace NS ("" for none) and the cgroup folders listed
# (space-separated, "" for none); its pid goes to $LAB_DIR/pid.I. nsenter
# switches only the network namespace: `ip netns exec` would remount /sys and
# hide /sys/fs/cgroup from the child (the agent reads its memory limit there).
lab_spawn() {
    local i=$1 log=$2 ns=$3 cgs=$4
    shift 5
    local wrap=()
    [ -n "$ns" ] && wrap=(nsenter "--net=/run/netns/$ns" --)
    HR_LAB_CGS=$cgs "${wrap[@]}" sh -c \
        'for g in $HR_LAB_CGS; do echo $$ >"$g/cgroup.procs" || exit 111; done; unset HR_LAB_CGS; exec "$@"' \
        sh "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$LAB_DIR/pid.$i"
    lab_rec pid "$i"
}

# lab_in NS CMD...: runs CMD inside network namespace NS ("" for none).
lab_in() {
    local ns=$1
    shift
    if [ -n "$ns" ]; then nsenter "--net=/run/netns/$ns" -- "$@"; else "$@"; fi
}

# lab_alive I: whether agent I still runs.
lab_alive() {
    [ -f "$LAB_DIR/pid.$1" ] && kill -0 "$(cat "$LAB_DIR/pid.$1")" 2>/dev/null
}

# ---- teardown ----

# lab_teardown: stops the agents (TERM, then KILL after 5 s) and removes
# every qdisc, link, namespace and cgroup recorded, newest first. Safe to run
# twice and after a failed start.
lab_teardown() {
    [ -d "$LAB_DIR" ] || return 0
    local f pid kind a b
    for f in "$LAB_DIR"/pid.*; do
        [ -e "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
    done
    for f in "$LAB_DIR"/pid.*; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        rm -f "$f"
    done
    [ -f "$LAB_DIR/resources" ] || return 0
    tac "$LAB_DIR/resources" | while read -r kind a b; do
        case "$kind" in
        qdisc) tc -n "$a" qdisc del dev "$b" root 2>/dev/null || true ;;
        mount)
            for _ in $(seq 30); do
                mountpoint -q "$a" || break
                umount "$a" 2>/dev/null && break
                sleep 0.1
            done
            mountpoint -q "$a" && umount -l "$a"
            ;;
        loop) losetup -d "$a" 2>/dev/null || true ;;
        fuse)
            umount "$a" 2>/dev/null || umount -l "$a" 2>/dev/null || true
            kill "$b" 2>/dev/null || true
            ;;
        link) ip -n "$a" link del "$b" 2>/dev/null || true ;;
        netns) ip netns del "$a" 2>/dev/null || true ;;
        cg)
            for _ in $(seq 30); do
                [ -d "$a" ] || break
                rmdir "$a" 2>/dev/null && break
                sleep 0.1
            done
            [ -d "$a" ] && echo "teardown: cannot remove cgroup $a" >&2
            ;;
        esac
    done
    rm -f "$LAB_DIR/resources"
}

# lab_leftovers PREFIX CGNAME: prints what is left of a lab whose namespaces
# start with PREFIX and whose cgroup folders are named CGNAME (empty output:
# nothing left).
lab_leftovers() {
    local p=$1 cg=$2
    ip netns list 2>/dev/null | awk -v p="$p" 'index($1, p) == 1 { print "netns " $1 }'
    ip -o link show 2>/dev/null | awk -F': ' -v p="$p" 'index($2, p) == 1 { print "link " $2 }'
    tc qdisc show 2>/dev/null | awk -v p="$p" '$2 == "tbf" && index($5, p) == 1 { print "qdisc " $0 }'
    find /sys/fs/cgroup -maxdepth 4 -type d -name "$cg" 2>/dev/null | sed 's/^/cgroup /'
    # paced disks under the lab's folder (a third argument: that folder)
    if [ -n "${3:-}" ]; then
        findmnt -rn -o TARGET 2>/dev/null | awk -v d="$3/" 'index($1, d) == 1 { print "mount " $1 }'
        losetup -n -l -O NAME,BACK-FILE 2>/dev/null | awk -v d="$3/" 'index($2, d) == 1 { print "loop " $1 " " $2 }'
    fi
}
