#!/usr/bin/env bash
# lab-timeline.sh - what each device of a running lab (deploy/lab.sh) does
# over one request, from the kernel's scheduler events (perf sched; root):
#
#   deploy/lab-timeline.sh [-n TOKENS] [--gap MS] [PROMPT]
#
# Records `perf sched` while the head answers one prompt of TOKENS tokens
# (default 32), takes each agent's busiest thread over it (its compute
# thread: the data thread of a worker, the generating thread of the head)
# and merges that thread's runs into bursts (runs less than --gap ms apart,
# default 10: a CPU quota's throttled spells fall inside a burst, the wait
# for the ring's next token does not). Prints, per device, its bursts' wall
# time and CPU time (median, mean, 90th percentile; the prompt's burst is
# among them), and between devices the gap from one's burst to the next
# one's (hops, wake-ups). A device's rounds as the cost model sees them are
# its bursts less the head's own work on the head.
#
# Needs perf (Debian: linux-perf) and python3. The lab's names come from
# HR_LAB_DIR (default /tmp/hearth-lab), as lab.sh's.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB="$ROOT/deploy/lab.sh"
LAB_DIR=${HR_LAB_DIR:-/tmp/hearth-lab}
N=32 GAP=10 PROMPT="The history of the city begins"
while [ $# -gt 0 ]; do
    case "$1" in
    -n) N=$2; shift 2 ;;
    --gap) GAP=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "lab-timeline.sh: unknown option $1" >&2; exit 2 ;;
    *) PROMPT=$1; shift ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "lab-timeline.sh: needs root (perf sched)" >&2; exit 1; }
command -v perf >/dev/null || { echo "lab-timeline.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "lab-timeline.sh: needs python3" >&2; exit 1; }
[ -f "$LAB_DIR/devices" ] || { echo "lab-timeline.sh: no lab is up in $LAB_DIR" >&2; exit 1; }
OUT=$(mktemp -d /tmp/lab-timeline.XXXXXX)

# every agent thread's CPU time (ns, schedstat): "device tid ns"
threads() {
    local name cgs g p t
    while read -r _ _ name _ _ _ _ cgs; do
        g=$(echo "$cgs" | tr ' ' '\n' | grep /cpu/ | head -1) || true
        [ -n "$g" ] || { echo "lab-timeline.sh: device $name has no cpu cgroup" >&2; continue; }
        for p in $(cat "$g/cgroup.procs"); do
            for t in /proc/"$p"/task/*; do
                [ -r "$t/schedstat" ] && echo "$name ${t##*/} $(cut -d' ' -f1 "$t/schedstat")"
            done
        done
    done <"$LAB_DIR/devices"
}

threads >"$OUT/before"
perf sched record -o "$OUT/perf.data" -- "$LAB" prompt -n "$N" "$PROMPT" >"$OUT/prompt.txt" 2>&1
threads >"$OUT/after"
grep -o "generation:.*" "$OUT/prompt.txt" | sed 's/^/request: /' || true
perf sched timehist -i "$OUT/perf.data" >"$OUT/timehist.txt" 2>/dev/null
order=$(awk '{print $3}' "$LAB_DIR/devices" | paste -sd, -)
python3 - "$OUT" "$GAP" "$order" <<'EOF'
import collections, re, sys
out, gap, order = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(',')

def cpu(path):
    return {(d, t): int(ns) for d, t, ns in (l.split() for l in open(path))}

b, a = cpu(out + '/before'), cpu(out + '/after')
busiest = {}
for (d, t), ns in a.items():
    used = ns - b.get((d, t), 0)
    if used > busiest.get(d, (None, -1))[1]:
        busiest[d] = (t, used)
tid = {t: d for d, (t, _) in busiest.items()}
runs = collections.defaultdict(list)
for ln in open(out + '/timehist.txt'):
    p = ln.split()
    if len(p) < 6 or 'awakened' in ln:
        continue
    m = re.match(r'.*\[(\d+)/\d+\]$', p[2])
    if not m or m.group(1) not in tid:
        continue
    try:
        end, run = float(p[0]) * 1e3, float(p[5])
    except ValueError:
        continue
    runs[tid[m.group(1)]].append((end - run, end, run))
bursts = []
for d, rs in runs.items():
    rs.sort()
    cur = None
    for st, en, run in rs:
        if cur and st - cur[2] < gap:
            cur[2] = en
            cur[3] += run
        else:
            cur = [d, st, en, run]
            bursts.append(cur)
bursts = [x for x in bursts if x[3] >= 0.5]  # heartbeats and wake-ups are not rounds
bursts.sort(key=lambda x: x[1])

def stats(v):
    v = sorted(v)
    if not v:
        return 'none'
    return 'median %.2f, mean %.2f, p90 %.2f' % (v[len(v) // 2], sum(v) / len(v), v[int(0.9 * (len(v) - 1))])

print('device     bursts  wall ms (%s)  |  CPU ms' % 'median, mean, p90')
for d in order:
    mine = [x for x in bursts if x[0] == d]
    if not mine:
        print('%-10s none' % d)
        continue
    print('%-10s %5d   %s  |  %s' % (d, len(mine), stats([x[2] - x[1] for x in mine]),
                                   stats([x[3] for x in mine])))
gaps = collections.defaultdict(list)
for p, q in zip(bursts, bursts[1:]):
    if p[0] != q[0] and q[1] >= p[2]:
        gaps[(p[0], q[0])].append(q[1] - p[2])
print('gaps from one device\'s burst to the next device\'s (ms; overlapping bursts left out):')
for (p, q), v in sorted(gaps.items(), key=lambda kv: -len(kv[1])):
    print('  %-10s -> %-10s n %4d  %s' % (p, q, len(v), stats(v)))
EOF
echo "files in $OUT"
