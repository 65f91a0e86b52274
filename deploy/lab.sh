#!/usr/bin/env bash
# lab.sh - an emulated home lab on one machine: one hearth agent per device of
# a JSON spec, each in its own network namespace on a bridge, with the
# device's CPU share, memory, disk read bandwidth and link rate enforced by
# cgroup v1 and tc. Needs root, iproute2 (ip netns, tc), nsenter and jq.
#
#   deploy/lab.sh up SPEC.json [-m MODEL] [--no-profile] [--shared-model] [--hog DEVICE]
#                              [--insecure] [-- extra head options, e.g. --k 2]
#   deploy/lab.sh down
#   deploy/lab.sh status [--json]      the head's view (and the limits in force)
#   deploy/lab.sh limits               the limits read back from the kernel
#   deploy/lab.sh prompt [opts] TEXT   a `hearth prompt` against the head
#   deploy/lab.sh selftest             a 2-device lab on the small shared model
#   deploy/lab.sh hog DEVICE [stop]    a CPU hog (HR_LAB_HOG_THREADS busy loops, default 1)
#                                      in DEVICE's cgroups (interference:
#                                      someone starts a game on it); up --hog DEVICE
#                                      starts it before the agent (and its profile)
#
# Spec (JSON):
#   {"name": "home",                  shown by status ("about": free text, ignored)
#    "model": "/tmp/tl-q4_0.gguf",    default model (-m overrides)
#    "head": 0,                       index or name of the head (default 0)
#    "devices": [
#      {"name": "desktop",            agent name ([A-Za-z0-9_-])
#       "cpu": 1.0,                   cores (cfs quota / period); absent or 0: no limit
#       "mem_mb": 300,                memory.limit_in_bytes in MiB (anonymous memory
#                                     and page cache, so it bounds the resident weights)
#       "disk_mbps": 400,             read MB/s from the model's disk (a paced disk, below)
#       "link_mbit": 1000,            link rate in Mbit/s, both directions (tbf)
#       "threads": 1}, ...]}          agent threads (-t), default 1
#
# The head starts first and the other devices join one by one in spec order,
# so the head's --windows lists the head first, then the others in spec order
# (a window of 0 leaves that device out of the ring). Device i lives in
# namespace hl-ns<i> with address 10.77.1.<i+1> on bridge hl-br0 (namespace
# hl-nsbr); its veth hl-v<i> shapes what it sends, the bridge port hl-b<i>
# what it receives. Its cgroups are hearth-lab/<i>-<name> under this shell's
# own group in the memory, cpu and blkio hierarchies. When a device has a
# memory or disk limit each device maps its own copy of the model (kept in
# $HR_LAB_CACHE, default /tmp/hearth-lab-cache) and `up` drops those copies
# from the page cache: pages cached by another process would be charged to it
# and escape the device's limits. A device with a disk rate maps the model
# from a disk of its own instead: an ext4 image of the model (made once per
# model in $HR_LAB_CACHE/disks) served by build/hearth-lab-disk, whose reads
# wait for the rate with no burst, through a loop device mounted at
# $HR_LAB_DIR/disk<i>/fs. Where that cannot run (no libfuse3 build, no
# /dev/fuse, no loop devices) or HR_LAB_BLKIO=1, a blkio throttle stands in,
# with a warning: it grants each 100 ms slice's bytes at once, so short reads
# after an idle spell pass at the host disk's speed. Profiles are cached per device spec (each
# emulated device measures itself once under its limits). Security is on: a
# key folder per device under $HR_LAB_DIR/keys (default /tmp/hearth-lab),
# every device trusting every other. `down` undoes everything `up` recorded,
# also after an `up` that failed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
CACHE=${HR_LAB_CACHE:-/tmp/hearth-lab-cache}
BIN=${HEARTH:-$ROOT/build/hearth}
DISKBIN=${HEARTH_LAB_DISK:-$(dirname "$BIN")/hearth-lab-disk}
PORT=7700
PFX=${HR_LAB_PREFIX:-hl-}   # names of namespaces and links
CGNAME=${HR_LAB_CGROUP:-hearth-lab}
# shellcheck source=deploy/lib-lab.sh
. "$ROOT/deploy/lib-lab.sh"

die() {
    echo "lab.sh: $*" >&2
    exit 1
}

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, cgroups, tc)"
    command -v jq >/dev/null || die "needs jq (deploy/install-deps.sh)"
    command -v nsenter >/dev/null || die "needs nsenter (util-linux)"
}

# dev FIELD I [DEFAULT]: a device field of the spec in $LAB_DIR/spec.json.
dev() {
    jq -r --argjson i "$2" --arg d "${3:-}" ".devices[\$i].$1 // \$d" "$LAB_DIR/spec.json"
}

n_devices() { jq -r '.devices | length' "$LAB_DIR/spec.json"; }

head_index() {
    jq -r '(.head // 0) as $h | if ($h | type) == "number" then $h
           else ([.devices[].name] | index($h)) // -1 end' "$LAB_DIR/spec.json"
}

# head_cmd CMD ARGS...: a hearth client command against the head.
head_cmd() {
    local sec=(--key-dir "$LAB_DIR/keys/$(cat "$LAB_DIR/head_name")")
    [ -f "$LAB_DIR/insecure" ] && sec=(--insecure)
    lab_in "$(cat "$LAB_DIR/head_ns")" "$BIN" "$@" "${sec[@]}" --head "$(cat "$LAB_DIR/head")"
}

joined() {
    head_cmd status --timeout 1 --json 2>/dev/null | jq -r '.devices | length' 2>/dev/null || echo 0
}

# model_for I MODEL: the file device I maps (its private copy when asked).
model_for() {
    local i=$1 model=$2
    if [ ! -f "$LAB_DIR/copies" ]; then
        echo "$model"
        return
    fi
    local c
    c=$CACHE/models/$(basename "$model" .gguf).d$i.gguf
    if [ ! -f "$c" ] || [ "$(stat -c %s "$c")" != "$(stat -c %s "$model")" ] || [ "$model" -nt "$c" ]; then
        mkdir -p "$CACHE/models"
        echo "lab.sh: copying $model for device $i" >&2
        cp "$model" "$c.tmp"
        mv "$c.tmp" "$c"
        sync "$c"
    fi
    echo "$c"
}

# drop_file FILE: evicts FILE's clean pages from the page cache.
drop_file() { dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || true; }

up() {
    local spec="" model="" profile=1 copies=auto insecure=0 extra=() hog=""
    [ $# -gt 0 ] && { spec=$1; shift; }
    while [ $# -gt 0 ]; do
        case "$1" in
        -m) model=$2; shift 2 ;;
        --no-profile) profile=0; shift ;;
        --hog) hog=$2; shift 2 ;;
        --shared-model) copies=0; shift ;;
        --insecure) insecure=1; shift ;;
        --) shift; extra=("$@"); break ;;
        *) die "unknown option $1" ;;
        esac
    done
    [ -f "$spec" ] || die "give a spec file (lab.sh up SPEC.json)"
    need_root
    [ -x "$BIN" ] || die "no hearth binary at $BIN (deploy/build.sh, or set HEARTH=)"
    jq -e '.devices | length > 0' "$spec" >/dev/null || die "$spec: no devices"
    down >/dev/null
    mkdir -p "$LAB_DIR"
    rm -f "$LAB_DIR"/*.log "$LAB_DIR/copies" "$LAB_DIR/insecure" "$LAB_DIR"/disk*/mbps
    cp "$spec" "$LAB_DIR/spec.json"
    [ -n "$model" ] || model=$(jq -r '.model // ""' "$spec")
    [ -f "$model" ] || die "no model file '$model' (give -m MODEL.gguf)"
    model=$(readlink -f "$model")
    local n h names=() i
    n=$(n_devices)
    h=$(head_index)
    [ "$h" -ge 0 ] && [ "$h" -lt "$n" ] || die "$spec: head is not one of the devices"
    for i in $(seq 0 $((n - 1))); do
        names[i]=$(dev name "$i" "dev$i")
        [[ ${names[i]} =~ ^[A-Za-z0-9_-]+$ ]] || die "device $i: bad name '${names[i]}'"
    done
    if [ "$copies" = auto ]; then
        copies=0
        jq -e '[.devices[] | (.mem_mb // 0) + (.disk_mbps // 0)] | add > 0' "$spec" >/dev/null && copies=1
    fi
    [ "$copies" = 1 ] && touch "$LAB_DIR/copies"
    # paced disks for the devices with a disk rate (lib-lab.sh)
    local paced_why="" img=""
    if jq -e '[.devices[] | .disk_mbps // 0] | add > 0' "$spec" >/dev/null; then
        if [ "${HR_LAB_BLKIO:-0}" = 1 ]; then paced_why="HR_LAB_BLKIO=1"; else paced_why=$(lab_disk_why); fi
        if [ -n "$paced_why" ]; then
            echo "lab.sh: WARNING: no paced disks ($paced_why): blkio throttles stand in, and they pass short reads after an idle spell at the host disk's speed" >&2
        else
            img=$(lab_disk_image "$model" "$CACHE/disks") || die "cannot make a disk image of $model in $CACHE/disks"
        fi
    fi
    if [ "$insecure" = 1 ]; then
        echo "lab.sh: WARNING: --insecure: plaintext links, no authentication" >&2
        touch "$LAB_DIR/insecure"
    else
        lab_pair "$LAB_DIR/keys" "${names[h]}" "${names[@]}"
    fi
    local blk="" cgm cgc cgb
    cgm=$(lab_cg_root memory) || die "no cgroup v1 memory hierarchy"
    cgc=$(lab_cg_root cpu) || die "no cgroup v1 cpu hierarchy"
    cgb=$(lab_cg_root blkio) || die "no cgroup v1 blkio hierarchy"
    echo "$(jq -r '.name // "lab"' "$spec")" >"$LAB_DIR/name"
    echo "$model" >"$LAB_DIR/model"
    : >"$LAB_DIR/devices"

    lab_bridge "${PFX}nsbr" "${PFX}br0"
    # the head first, then the others in spec order
    local order=("$h") ncores
    for i in $(seq 0 $((n - 1))); do [ "$i" = "$h" ] || order+=("$i"); done
    ncores=$(nproc)
    local pos=0 head_addr=""
    for i in "${order[@]}"; do
        local name=${names[i]} ns=${PFX}ns$i addr=10.77.1.$((i + 1))
        local cpu mem disk link thr cgs="" mf
        cpu=$(dev cpu "$i" 0)
        mem=$(dev mem_mb "$i" 0)
        disk=$(dev disk_mbps "$i" 0)
        link=$(dev link_mbit "$i" 0)
        thr=$(dev threads "$i" 1)
        lab_node "$ns" "${PFX}v$i" "${PFX}nsbr" "${PFX}b$i" "${PFX}br0" "$addr/24"
        if awk -v l="$link" 'BEGIN { exit !(l > 0) }'; then
            lab_shape "$ns" "${PFX}v$i" "$link"
            lab_shape "${PFX}nsbr" "${PFX}b$i" "$link"
        fi
        if [ "$mem" -gt 0 ] 2>/dev/null; then
            lab_cg_make "$cgm/$CGNAME"
            lab_cg_make "$cgm/$CGNAME/$i-$name"
            echo $((mem * 1024 * 1024)) >"$cgm/$CGNAME/$i-$name/memory.limit_in_bytes"
            cgs+=" $cgm/$CGNAME/$i-$name"
        fi
        if awk -v c="$cpu" -v n="$ncores" 'BEGIN { exit !(c > 0 && c < n) }'; then
            # the period: 5 ms below a core (a quarter core runs 1.25 ms in
            # every 5, bursts short against most of a ring's rounds), 20 ms
            # from one core up (one compute thread cannot burst past a core).
            # Not shorter: one busy thread measured on this kind of host ran
            # at 0.57 core under 1.0 core in 1 ms periods and at 0.42 under
            # 0.5 core in 2 ms (throttled on top of its quota), and within
            # 1-4% of its quota in these (LAB.md)
            local p q
            p=$(awk -v c="$cpu" 'BEGIN { print c < 1 ? 5000 : 20000 }')
            q=$(awk -v c="$cpu" -v p="$p" 'BEGIN { printf "%d", c * p + 0.5 }')
            lab_cg_make "$cgc/$CGNAME"
            lab_cg_make "$cgc/$CGNAME/$i-$name"
            echo "$p" >"$cgc/$CGNAME/$i-$name/cpu.cfs_period_us"
            echo "$q" >"$cgc/$CGNAME/$i-$name/cpu.cfs_quota_us"
            cgs+=" $cgc/$CGNAME/$i-$name"
        fi
        local paced=""
        if [ -n "$img" ] && awk -v d="$disk" 'BEGIN { exit !(d > 0) }'; then
            lab_disk_up "$img" "$disk" "$LAB_DIR/disk$i" || die "device $i: the paced disk did not come up (run lab.sh down)"
            echo "$disk" >"$LAB_DIR/disk$i/mbps"
            mf=$LAB_DIR/disk$i/fs/$(basename "$model")
            paced="disk-paced"
        else
            mf=$(model_for "$i" "$model")
        fi
        if [ -z "$paced" ] && awk -v d="$disk" 'BEGIN { exit !(d > 0) }'; then
            [ -n "$blk" ] || blk=$(lab_blkdev "$mf") || die "cannot find the block device holding $mf"
            lab_cg_make "$cgb/$CGNAME"
            lab_cg_make "$cgb/$CGNAME/$i-$name"
            echo "$blk $(awk -v d="$disk" 'BEGIN { printf "%d", d * 1e6 }')" \
                >"$cgb/$CGNAME/$i-$name/blkio.throttle.read_bps_device"
            cgs+=" $cgb/$CGNAME/$i-$name"
        fi
        [ "$copies" = 1 ] && drop_file "$mf"
        echo "$i $pos $name $ns $addr $thr $mf$cgs" >>"$LAB_DIR/devices"
        local args=(agent -m "$mf" --listen "$addr:$PORT" --name "$name" -t "$thr")
        [ "$profile" = 1 ] || args+=(--no-profile)
        if [ "$insecure" = 1 ]; then args+=(--insecure); else args+=(--key-dir "$LAB_DIR/keys/$name"); fi
        if [ "$pos" = 0 ]; then
            head_addr=$addr:$PORT
            echo "$head_addr" >"$LAB_DIR/head"
            echo "$ns" >"$LAB_DIR/head_ns"
            echo "$name" >"$LAB_DIR/head_name"
            args+=(--expect $((n - 1)) "${extra[@]}")
        else
            args+=(--head "$head_addr")
        fi
        # a profile cache per device spec: each emulated device measures itself
        local key
        local hogged=""
        if [ -n "$hog" ] && { [ "$hog" = "$name" ] || [ "$hog" = "$i" ]; }; then
            hog_start "$i" "$cgs"
            hogged="hog"
        fi
        key=$(jq -c --argjson i "$i" '.devices[$i]' "$LAB_DIR/spec.json" | cat - <(echo "cpu-period-v2 $(stat -c %s "$model")$hogged${hogged:+${HR_LAB_HOG_THREADS:-1}}$paced") | md5sum | cut -c1-12)
        mkdir -p "$CACHE/profiles/$key"
        XDG_CACHE_HOME=$CACHE/profiles/$key lab_spawn "$i" "$LAB_DIR/$name.log" "$ns" "$cgs" -- \
            "$BIN" "${args[@]}"
        # wait until this device is known to the head, so --windows order is spec order
        local want=$((pos + 1)) t0=$SECONDS
        while :; do
            lab_alive "$i" || { tail -5 "$LAB_DIR/$name.log" >&2; die "agent $name exited (log $LAB_DIR/$name.log; run lab.sh down)"; }
            [ "$(joined)" -ge "$want" ] 2>/dev/null && break
            [ $((SECONDS - t0)) -lt 300 ] || die "agent $name did not join in 300 s (log $LAB_DIR/$name.log; run lab.sh down)"
            sleep 0.2
        done
        echo "  $name up (${SECONDS}s): cpu ${cpu:-} mem ${mem} MiB disk ${disk} MB/s link ${link} Mbit/s, $thr threads" >&2
        pos=$((pos + 1))
    done
    local t0=$SECONDS
    while :; do
        local st
        st=$(head_cmd status --timeout 1 --json 2>/dev/null || true)
        if [ "$(echo "$st" | jq -r '.ready' 2>/dev/null)" = true ]; then
            echo "lab $(cat "$LAB_DIR/name"): $n devices ready; head ${names[h]} at $head_addr (logs in $LAB_DIR)"
            return 0
        fi
        local e
        e=$(echo "$st" | jq -r '.error // ""' 2>/dev/null || true)
        [ -z "$e" ] || die "head: $e (run lab.sh down)"
        for i in "${order[@]}"; do lab_alive "$i" || die "agent ${names[i]} exited (log $LAB_DIR/${names[i]}.log; run lab.sh down)"; done
        [ $((SECONDS - t0)) -lt 300 ] || die "lab not ready after 300 s; see $LAB_DIR/*.log (run lab.sh down)"
        sleep 0.2
    done
}

down() {
    lab_teardown
    rm -f "$LAB_DIR/head" "$LAB_DIR/head_ns" "$LAB_DIR/head_name" "$LAB_DIR/devices"
    echo "lab down"
}

# limits: per device, what the kernel has in force.
limits() {
    [ -f "$LAB_DIR/devices" ] || die "no lab is up"
    printf '%-3s %-12s %-14s %-10s %-10s %-18s %s\n' pos device address mem_MiB cpu disk_read link
    local i pos name ns addr thr mf cgs
    while read -r i pos name ns addr thr mf cgs; do
        local mem=- cpu=- disk=- link=- g
        for g in $cgs; do
            case "$g" in
            */memory/*) mem=$(($(cat "$g/memory.limit_in_bytes") / 1048576)) ;;
            */cpu/* | */cpu,cpuacct/* | */cpuacct,cpu/*)
                cpu=$(awk -v q="$(cat "$g/cpu.cfs_quota_us")" -v p="$(cat "$g/cpu.cfs_period_us")" \
                    'BEGIN { printf "%.2f", q / p }') ;;
            */blkio/*) disk=$(awk '{ printf "%s %.0fMB/s", $1, $2 / 1e6 }' "$g/blkio.throttle.read_bps_device") ;;
            esac
        done
        [ -f "$LAB_DIR/disk$i/mbps" ] && disk="paced $(cat "$LAB_DIR/disk$i/mbps")MB/s"
        link=$(tc -n "$ns" qdisc show dev "${PFX}v$i" | awk '$2 == "tbf" { for (j = 1; j <= NF; j++) if ($j == "rate") print $(j + 1) }')
        local in
        in=$(tc -n "${PFX}nsbr" qdisc show dev "${PFX}b$i" | awk '$2 == "tbf" { for (j = 1; j <= NF; j++) if ($j == "rate") print $(j + 1) }')
        [ -n "$link" ] || link=-
        [ -n "$in" ] && link="$link out/$in in"
        printf '%-3s %-12s %-14s %-10s %-10s %-18s %s (%s threads)\n' "$pos" "$name" "$addr" "$mem" "$cpu" "$disk" "$link" "$thr"
    done <"$LAB_DIR/devices"
}

status() {
    [ -f "$LAB_DIR/head" ] || die "no lab is up"
    if [ "${1:-}" = --json ]; then
        head_cmd status --json
        return
    fi
    echo "lab $(cat "$LAB_DIR/name") (model $(cat "$LAB_DIR/model"))"
    limits
    head_cmd status "$@"
}

# selftest: a 2-device lab on the small shared model with memory, CPU, disk
# and link limits; one prompt; the limits read back; teardown leaves nothing.
selftest() {
    local why=""
    if [ "$(id -u)" != 0 ]; then
        why="needs root and ip netns"
    elif ! command -v jq >/dev/null || ! command -v nsenter >/dev/null || ! command -v tc >/dev/null; then
        why="needs jq, nsenter and tc"
    elif ! unshare --net true 2>/dev/null; then
        why="needs root and ip netns (cannot make a network namespace)"
    elif ! lab_cg_root memory >/dev/null || ! lab_cg_root cpu >/dev/null || ! lab_cg_root blkio >/dev/null; then
        why="needs cgroup v1 memory, cpu and blkio hierarchies"
    fi
    if [ -n "$why" ]; then
        # under CI the lab must run: a machine that cannot is a failure
        [ "${CI:-}" != true ] || die "selftest cannot run under CI=true: $why"
        echo "SKIPPED: $why"
        return 0
    fi
    # its own names, so it can run next to a lab that is up
    PFX=ht- CGNAME=hearth-labtest
    local model=${1:-$ROOT/../shared/models/small-llama-q4_0.gguf} t0=$SECONDS tmp
    if [ ! -f "$model" ]; then
        [ "${CI:-}" != true ] || die "selftest cannot run under CI=true: no model $model"
        echo "SKIPPED: no model $model"
        return 0
    fi
    [ -x "$BIN" ] || die "no hearth binary at $BIN"
    [ -z "$(lab_leftovers "$PFX" "$CGNAME")" ] || die "selftest: a selftest lab is already up (HR_LAB_PREFIX=$PFX lab.sh down)"
    tmp=$(mktemp -d)
    cat >"$tmp/spec.json" <<'EOF'
{"name": "selftest", "devices": [
  {"name": "big", "cpu": 1.0, "mem_mb": 200, "disk_mbps": 200, "link_mbit": 100, "threads": 1},
  {"name": "small", "cpu": 0.5, "mem_mb": 96, "link_mbit": 20, "threads": 1}]}
EOF
    local fail=0
    check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
    LAB_DIR=$tmp/lab CACHE=$tmp/cache
    if up "$tmp/spec.json" -m "$model" --no-profile >"$tmp/up.out" 2>&1; then
        echo "ok   up ($((SECONDS - t0)) s)"
    else
        echo "FAIL up"; cat "$tmp/up.out"; fail=1
    fi
    if [ "$fail" = 0 ]; then
        local out lim cgs # (read by the check expressions)
        # shellcheck disable=SC2034
        out=$(prompt -n 4 --temp 0 "Hello" 2>&1) || true
        check "prompt answered" '[[ $out =~ generation:\ [1-9][0-9]*\ tokens ]]'
        lim=$(limits)
        echo "$lim" | sed 's/^/     /'
        cgs=$(awk '$2 == 0 { for (i = 8; i <= NF; i++) print $i }' "$LAB_DIR/devices")
        check "memory.limit_in_bytes 200 MiB" '[ "$(cat $(echo "$cgs" | grep /memory/)/memory.limit_in_bytes)" = 209715200 ]'
        check "cfs quota 1.0 core" '[ "$(cat $(echo "$cgs" | grep /cpu/)/cpu.cfs_quota_us)" = 20000 ] && [ "$(cat $(echo "$cgs" | grep /cpu/)/cpu.cfs_period_us)" = 20000 ]'
        if [ -f "$LAB_DIR/disk0/mbps" ]; then
            local mf0 rate
            mf0=$(awk '$2 == 0 { print $7 }' "$LAB_DIR/devices")
            check "device 0 maps its model from its paced disk" '[ "$mf0" = "$LAB_DIR/disk0/fs/$(basename "$model")" ] && mountpoint -q "$LAB_DIR/disk0/fs"'
            # 12 MiB, direct, after an idle spell: a blkio throttle would
            # pass it at the host disk's speed, the paced disk at 200 MB/s
            sleep 0.3
            rate=$(dd if="$mf0" of=/dev/null bs=4M count=3 iflag=direct 2>&1 | awk '/copied/ { printf "%.0f", $1 / $(NF - 3) / 1e6 }')
            echo "     paced disk: 12 MiB read at ${rate:-?} MB/s after 0.3 s idle"
            check "paced disk: 12 MiB after an idle spell at 150-250 MB/s" '[ -n "$rate" ] && [ "$rate" -ge 150 ] && [ "$rate" -le 250 ]'
        else
            check "blkio read 200 MB/s" 'grep -q " 200000000$" $(echo "$cgs" | grep /blkio/)/blkio.throttle.read_bps_device'
        fi
        check "tbf 100Mbit on device 0 (out)" 'tc -n ${PFX}ns0 qdisc show dev ${PFX}v0 | grep -q "tbf.*rate 100Mbit"'
        check "tbf 20Mbit on device 1 (in)" 'tc -n ${PFX}nsbr qdisc show dev ${PFX}b1 | grep -q "tbf.*rate 20Mbit"'
        local p1
        # shellcheck disable=SC2034
        p1=$(cat "$LAB_DIR/pid.1")
        check "agent 1 in its memory cgroup" 'grep -q "memory:.*/$CGNAME/1-small" /proc/$p1/cgroup'
        check "agent 1 in its cpu cgroup (0.5 core)" 'g=$(grep -o "[^ ]*/cpu/[^ ]*1-small" "$LAB_DIR/devices"); grep -qx "$p1" $g/cgroup.procs && [ "$(cat $g/cpu.cfs_quota_us)/$(cat $g/cpu.cfs_period_us)" = 2500/5000 ]'
    fi
    down >/dev/null
    local left
    left=$(lab_leftovers "$PFX" "$CGNAME" "$LAB_DIR")
    check "nothing left after down" '[ -z "$left" ]'
    [ -z "$left" ] || echo "$left"
    rm -rf "$tmp"
    echo "selftest: $([ $fail = 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
    return $fail
}

prompt() {
    [ -f "$LAB_DIR/head" ] || die "no lab is up"
    head_cmd prompt "$@"
}

# hog_start I CGDIRS: HR_LAB_HOG_THREADS busy loops (default 1) in device I's
# cgroups (pid.hog<I>, so teardown stops it too). One loop shares the
# device's quota with the agent only while both run (the agent, back from
# waiting on the ring, runs first): it slowed a half-core device 1.4x to
# 2.6x from run to run. Two loops slow it more evenly, but on a 2-core host
# they also slowed the other emulated devices 3-5x (they share the cores),
# which no game on one machine of a household does.
hog_start() {
    local i=$1 cgs=$2 nt=${HR_LAB_HOG_THREADS:-1}
    [ -e "$LAB_DIR/pid.hog$i" ] && kill -0 "$(cat "$LAB_DIR/pid.hog$i")" 2>/dev/null && return 0
    [[ $cgs == */cpu* ]] || die "device $i has no cpu cgroup (give it a \"cpu\" share in the spec)"
    [[ $nt =~ ^[1-9][0-9]?$ ]] || die "HR_LAB_HOG_THREADS must be 1-99 (got '$nt')"
    HR_LAB_CGS=$cgs HR_LAB_NT=$nt sh -c 'for g in $HR_LAB_CGS; do echo $$ >"$g/cgroup.procs" || exit 111; done
        unset HR_LAB_CGS; p=""; n=0
        while [ $n -lt $HR_LAB_NT ]; do (while :; do :; done) & p="$p $!"; n=$((n + 1)); done
        trap "kill $p 2>/dev/null; exit 0" TERM INT HUP; wait' >/dev/null 2>&1 </dev/null &
    echo $! >"$LAB_DIR/pid.hog$i"
    echo "lab.sh: CPU hog (pid $!, $nt busy loops) in the cgroups of device $i" >&2
}

# hog DEVICE [stop]: starts (or stops) a CPU hog in a running lab's device.
hog() {
    [ -f "$LAB_DIR/devices" ] || die "no lab is up"
    local want=${1:-} what=${2:-start} i pos name ns addr thr mf cgs found=""
    [ -n "$want" ] || die "hog: name a device"
    while read -r i pos name ns addr thr mf cgs; do
        [ "$want" = "$name" ] || [ "$want" = "$i" ] || continue
        found=1
        if [ "$what" = stop ]; then
            if [ -f "$LAB_DIR/pid.hog$i" ]; then
                kill "$(cat "$LAB_DIR/pid.hog$i")" 2>/dev/null || true
                rm -f "$LAB_DIR/pid.hog$i"
                echo "lab.sh: CPU hog of device $i stopped" >&2
            fi
        else
            hog_start "$i" "$cgs"
        fi
    done <"$LAB_DIR/devices"
    [ -n "$found" ] || die "hog: no device '$want'"
}

case "${1:-}" in
up) shift; up "$@" ;;
down) down ;;
status) shift; status "$@" ;;
limits) limits ;;
prompt) shift; prompt "$@" ;;
selftest) shift; selftest "$@" ;;
hog) shift; hog "$@" ;;
*) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
