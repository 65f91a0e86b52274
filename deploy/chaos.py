#!/usr/bin/env python3
"""chaos.py - a bounded chaos run of a local hearth cluster (loopback only).

    python3 deploy/chaos.py [-m MODEL] [-d SECONDS] [-c CLIENTS] [-n TOKENS] [-p PORT]

Starts a 3-agent cluster on 127.0.0.1 (deploy/cluster.sh, F32 hidden states,
k = 1) with the HTTP API on the head, and for the given duration (default
900 s) runs at the same time:
  - CLIENTS loops (default 3) of streamed and non-streamed completions
    (random prompt and seed from a fixed set);
  - a worker (agent2) killed (SIGKILL) and restarted every 45 s, while
    agent1 lives through the run;
  - one head restart (SIGTERM, then the same command line) half-way;
  - an idle-connection flood (400 connections from 127.0.0.2, held 20 s)
    every 60 s;
  - a malformed request (bad JSON, wrong types, oversized body, bad
    parameters) every 3 s, each expected to get its 4xx answer.
Every answer is compared with `hearth run` (one process, no agent; same
arithmetic) for the same prompt, seed and token count.

Windows: a kill or the head restart opens a window when the script sends
the signal; it closes when the service is whole again (/v1/cluster ready,
all three agents in the plan, not lost, and for a worker kill a plan newer
than the one at the kill; at most READY_WAIT_S), plus GRACE_S (5 s: the
polling step and an answer already under way when readiness is seen). A
request is inside a window when its time [sent, answered] overlaps one.
Malformed requests are not sent while the head restarts (they wait for
its window to close), so every one of them must get its 4xx.

The run fails (exit 1, a "chaos: FAILED: why" line per reason) when
  - a request gets an error (an OpenAI-style error body, an SSE error
    event, a 429/503) or a refused connection outside the windows;
  - fewer than 90% of the client requests (MIN_EXACT) end with the exact
    answer (equal to `hearth run`'s), windows included;
  - a malformed request gets anything but its 4xx;
  - an answer differs from the reference, a request ends without the
    answer or a clear error (cut short, no error body), a request takes
    longer than its bound (REQ_BOUND_S), /health fails under a flood, a
    window does not close within READY_WAIT_S, an agent dies other than by
    our hand, or an agent's RSS moves more than 10% from its value after
    warm-up for the same share of the work (anonymous RSS: the mapped
    model's pages are page cache, not the agent's memory; a worker carrying
    a lost peer's layers holds their KV too, so each (process, layers) pair
    has its own baseline; sampled every 5 s once a plan has served for 5 s,
    outside the floods, whose 400 open connections are served by live
    threads; every sample goes to $HR_CLUSTER_DIR/rss.txt).
It prints a summary either way: the windows, every kind of result inside
and outside them, the exact share and the malformed requests' statuses.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "chaos-key"
REQ_BOUND_S = 90.0  # data timeout (60 s) + recovery; documented in README
WARMUP_S = 120.0
GRACE_S = 5.0  # a window stays open this long after the service is whole again
READY_WAIT_S = 120.0  # a window not closed by then is a failure (and closes)
MIN_EXACT = 0.90  # share of client requests that must get the exact answer
PROMPTS = ["Once upon a time", "The quick brown fox", "In a hole in the ground there lived",
           "Why is the sky blue?", "Write a haiku about the sea"]


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def http(port, path, body=None, timeout=REQ_BOUND_S, raw=None):
    """(status, bytes) of one request; status 0 for a connection failure."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 method="POST" if data is not None else "GET")
    req.add_header("Authorization", f"Bearer {KEY}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout, OSError) as e:
        return 0, str(e).encode()
    except http.client.HTTPException as e:  # a reply cut short: no error, no [DONE]
        return -1, f"{type(e).__name__}: {e}".encode()


def completion(port, i, seed, ntok, stream):
    """('ok', text) | ('error', why) | ('bad', why)."""
    body = {"prompt": PROMPTS[i], "max_tokens": ntok, "seed": seed, "temperature": 0.8,
            "stream": stream}
    st, out = http(port, "/v1/completions", body)
    if st == 0:
        return "refused", out.decode(errors="replace")
    if st < 0:
        return "bad", "answer cut short: " + out.decode(errors="replace")
    if st != 200:
        try:
            msg = json.loads(out)["error"]["message"]
            return "error", f"{st} {msg}"
        except (ValueError, KeyError, TypeError):
            return "bad", f"{st} without an error body: {out[:200]!r}"
    if not stream:
        try:
            return "ok", json.loads(out)["choices"][0]["text"]
        except (ValueError, KeyError, IndexError, TypeError):
            return "bad", f"unparsable answer {out[:200]!r}"
    text, done, err = [], False, None
    for line in out.decode(errors="replace").split("\n"):
        if not line.startswith("data: "):
            continue
        d = line[6:]
        if d == "[DONE]":
            done = True
            continue
        try:
            o = json.loads(d)
        except ValueError:
            return "bad", f"unparsable event {d[:200]!r}"
        if "error" in o:
            err = o["error"].get("message", "?")
            continue
        text.append(o["choices"][0].get("text", ""))
    if not done:
        return "bad", "stream ended without [DONE]"
    if err:
        return "error", f"stream error event: {err}"
    return "ok", "".join(text)


class Run:
    def __init__(self, a):
        self.a = a
        self.end = 0.0
        self.start = time.time()
        self.mu = threading.Lock()
        self.counts = {}
        self.failures = []
        self.max_s = 0.0
        self.ours = set()  # pids we killed on purpose
        self.rss = {}  # (pid, layers) -> (baseline kB or None, max deviation %)
        self.flooding = False  # a flood's connections (and their threads) are open
        self.errors = {}  # error message -> count
        self.rss_kb = {}  # (pid, layers) -> (agent index, baseline kB, last kB)
        self.windows = []  # [what, opened, whole again or None]: the windows we caused
        self.results = []  # (sent, answered, kind, detail) of every client request
        self.malformed = []  # (sent, answered, wanted status, status, detail)
        self.head_lock = threading.Lock()  # held by a malformed request / the head restart

    def count(self, what, why=None):
        with self.mu:
            self.counts[what] = self.counts.get(what, 0) + 1
            if why:
                self.failures.append(f"{what}: {why}")
                log("FAIL", what, why)

    def alive(self):
        return time.time() < self.end

    def open_window(self, what):
        w = [what, time.time(), None]
        with self.mu:
            self.windows.append(w)
        return w

    def inside(self, t0, t1):
        """Whether [t0, t1] overlaps a window (an open one lasts to the end)."""
        with self.mu:
            return any(t0 <= (w[2] + GRACE_S if w[2] is not None else float("inf"))
                       and t1 >= w[1] for w in self.windows)


def whole(port, after_plan=None):
    """(whole, plan id): the cluster is ready with agent0..2 all in the plan
    (not lost, ready, layers to compute); with after_plan, under another plan
    than that one (a killed worker's return means a new plan)."""
    st, out = http(port, "/v1/cluster", timeout=5)
    if st != 200:
        return False, None
    try:
        j = json.loads(out)
        devs = {d["name"]: d for d in j["devices"]}
        ok = j.get("ready") and all(
            f"agent{i}" in devs and not devs[f"agent{i}"].get("lost")
            and devs[f"agent{i}"].get("ready") and devs[f"agent{i}"].get("w", 0) > 0
            for i in range(3))
        return bool(ok) and (after_plan is None or j["plan_id"] != after_plan), j["plan_id"]
    except (ValueError, KeyError, TypeError):
        return False, None


def close_window(r, w, after_plan=None):
    """Waits (at most READY_WAIT_S) until the service is whole again, then
    closes the window w; a window that does not close is a failure."""
    while time.time() - w[1] < READY_WAIT_S:
        if whole(r.a.port, after_plan)[0]:
            break
        time.sleep(0.2)
    else:
        r.count("not_whole", f"{w[0]}: the cluster not whole again after {READY_WAIT_S:.0f} s")
    with r.mu:
        w[2] = time.time()
    log(f"{w[0]}: whole again after {w[2] - w[1]:.1f} s (window open {GRACE_S:.0f} s more)")


def cluster(cmd, *args, check=True):
    env = dict(os.environ)
    # no pipes: the agents it starts would keep them open
    with open(f"{os.environ['HR_CLUSTER_DIR']}.cluster.log", "a") as out:
        return subprocess.run(["bash", f"{ROOT}/deploy/cluster.sh", cmd, *args], env=env,
                              check=check, stdout=out, stderr=out)


def pid_of(i):
    with open(f"{os.environ['HR_CLUSTER_DIR']}/pid.{i}") as f:
        return int(f.read())


def restart(r, i, sig):
    pid = pid_of(i)
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [x.decode() for x in f.read().split(b"\0") if x]
    r.ours.add(pid)
    os.kill(pid, sig)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    time.sleep(2)
    logf = open(f"{os.environ['HR_CLUSTER_DIR']}/agent{i}.log", "a")
    p = subprocess.Popen(argv, stderr=logf, stdout=subprocess.DEVNULL)
    with open(f"{os.environ['HR_CLUSTER_DIR']}/pid.{i}", "w") as f:
        f.write(str(p.pid))
    return p


def client_loop(r, refs, seed0):
    rnd = random.Random(seed0)
    while r.alive():
        i, s = rnd.randrange(len(PROMPTS)), rnd.randrange(1, 4)
        stream = rnd.random() < 0.5
        t0 = time.time()
        kind, v = completion(r.a.port, i, s, r.a.ntok, stream)
        t1 = time.time()
        with r.mu:
            r.max_s = max(r.max_s, t1 - t0)
        if t1 - t0 > REQ_BOUND_S:
            r.count("slow", f"request took {t1 - t0:.1f} s (bound {REQ_BOUND_S} s)")
        # whether an error or a refusal is ours is decided at the end, when
        # every window has closed (a window may close after the answer)
        if kind == "ok":
            if v == refs[(i, s)]:
                kind = "exact"
            else:
                kind, v = "wrong", f"prompt {i} seed {s} stream {stream}: {v[:80]!r}"
        elif kind == "error":
            with r.mu:
                r.errors[v[:90]] = r.errors.get(v[:90], 0) + 1
        elif kind == "bad":
            kind = "unclear"
        if kind in ("wrong", "unclear"):  # failures inside a window too
            r.count(kind, v)
        with r.mu:
            r.results.append((t0, t1, kind, v))
        if kind == "error" and v.startswith(("503", "429")):
            time.sleep(0.2)  # as a client that respects Retry-After would, briefly
        elif kind == "refused":
            time.sleep(0.5)


def killer_loop(r, procs):
    # always agent2: agent1 lives through the whole run, so its memory is
    # watched across every kill, re-plan and recovery of the others
    while r.alive():
        time.sleep(45)
        if not r.alive():
            break
        plan = whole(r.a.port)[1]
        while plan is None and r.alive():  # the head restarts: kill once it answers
            time.sleep(0.5)
            plan = whole(r.a.port)[1]
        log("kill agent2")
        w = r.open_window("kill agent2")
        procs[2] = restart(r, 2, signal.SIGKILL)
        close_window(r, w, plan)


def head_restart(r, procs):
    time.sleep(r.a.duration / 2)
    if not r.alive():
        return
    with r.head_lock:  # no malformed request in flight, none sent until whole again
        log("head restart (SIGTERM)")
        w = r.open_window("head restart")
        procs[0] = restart(r, 0, signal.SIGTERM)
        close_window(r, w)


def flood_loop(r):
    while r.alive():
        time.sleep(60)
        # from another loopback address than the clients: one flooding
        # address must not shut out the others (the per-address limit)
        socks = []
        r.flooding = True
        for _ in range(400):
            try:
                socks.append(socket.create_connection(("127.0.0.1", r.a.port), timeout=2,
                                                      source_address=("127.0.0.2", 0)))
            except OSError:
                break
        t0 = time.time()
        st, _ = http(r.a.port, "/health", timeout=10)
        log(f"flood: {len(socks)} idle connections; /health {st} in {time.time() - t0:.2f} s")
        if st not in (200, 503) and not r.inside(t0, time.time()):
            r.count("flood_health", f"/health answered {st} under the flood")
        time.sleep(20)
        for s in socks:
            s.close()
        time.sleep(3)
        r.flooding = False


MALFORMED = [
    (b"{not json", 400), (json.dumps({"prompt": 5}).encode(), 400),
    (json.dumps({"prompt": "x", "max_tokens": -3}).encode(), 400),
    (json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400),
    (None, 413),  # a 2 MiB body: sent raw, see oversized()
]


def oversized(port):
    """Status of a 2 MiB completion body; the server may answer 413 and
    close before the body is sent, so send what it takes and then read."""
    body = b"{\"prompt\":\"" + b"a" * (2 << 20) + b"\"}"
    hdr = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(hdr)
            try:
                c.sendall(body)
            except OSError:
                pass  # closed early: the answer is already there
            line = c.makefile("rb").readline().split()
            return (int(line[1]), b"") if len(line) > 1 else (0, b"no status line")
    except OSError as e:
        return 0, str(e).encode()


def malformed_loop(r):
    rnd = random.Random(7)
    while r.alive():
        time.sleep(3)
        body, want = rnd.choice(MALFORMED)
        with r.head_lock:
            if not r.alive():
                break
            t0 = time.time()
            if body is None:
                st, out = oversized(r.a.port)
            else:
                st, out = http(r.a.port, "/v1/completions", raw=body, timeout=30)
        with r.mu:
            r.malformed.append((t0, time.time(), want, st, out[:120]))
        if st == want:
            r.count("malformed_ok")
        else:
            r.count("malformed_bad", f"expected {want}, got {st}: {out[:120]!r}")


def ring_shape(port):
    """(plan id, {agent name: layers it computes}) of the serving plan, or None."""
    st, out = http(port, "/v1/cluster", timeout=5)
    if st != 200:
        return None
    try:
        j = json.loads(out)
        if not j.get("ready"):
            return None
        k = j.get("k", 1)
        # layers: the windows of every round (w * k without per-round windows)
        return j["plan_id"], {d["name"]: sum(d["windows"]) if "windows" in d
                              else d.get("w", 0) * k
                              for d in j["devices"] if not d.get("lost")}
    except (ValueError, KeyError, TypeError):
        return None


def rss_loop(r):
    """Anonymous RSS of each agent, compared for the same share of the work:
    a worker that computes twice the layers while a peer is lost holds more
    KV and touches more of its work buffers (a re-prefill), which is not
    growth. Each (process, layers) pair gets its baseline at its first sample
    after the process's warm-up; samples are taken 5 s or more after a plan
    became ready, outside the floods."""
    plan, plan_t = None, 0.0
    started = {}  # pid -> first seen
    while r.alive():
        now = time.time()
        if r.flooding:  # 400 live connections use memory; not what is watched
            time.sleep(1)
            continue
        shape = ring_shape(r.a.port)
        if shape is None:
            time.sleep(1)
            continue
        if shape[0] != plan:
            plan, plan_t = shape[0], now
        if now - plan_t < 5:
            time.sleep(1)
            continue
        for i in range(3):
            try:
                pid = pid_of(i)
            except (OSError, ValueError):
                continue
            kb = rss_kb(pid)
            layers = shape[1].get(f"agent{i}")
            if kb == 0 or layers is None:
                continue
            t0 = started.setdefault(pid, now)
            key = (pid, layers)
            base, dev = r.rss.get(key, (None, 0.0))
            if base is None and now - t0 >= WARMUP_S:
                base = kb
            if base:
                dev = max(dev, abs(kb - base) * 100.0 / base)
            r.rss[key] = (base, dev)
            r.rss_kb[key] = (i, base, kb)
            with open(f"{os.environ['HR_CLUSTER_DIR']}/rss.txt", "a") as f:
                f.write(f"{now - r.start:.0f} agent{i} {pid} layers {layers} plan {plan} {kb}\n")
        time.sleep(5)


def references(a):
    """`hearth run`'s answers: one process, no agent, the API's default
    sampling (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)."""
    refs = {}
    for i in range(len(PROMPTS)):
        for s in range(1, 4):
            p = subprocess.run([a.bin, "run", "-m", a.model, "-p", PROMPTS[i], "-n", str(a.ntok),
                                "-s", str(s), "--temp", "0.8"], capture_output=True)
            if p.returncode != 0 or not p.stdout.endswith(b"\n"):
                raise SystemExit(f"chaos: FAILED: reference `hearth run` failed (prompt {i} "
                                 f"seed {s}): {p.stderr.decode(errors='replace')[-300:]}")
            refs[(i, s)] = p.stdout[:-1].decode(errors="replace")  # run ends with a newline
    return refs


def main():
    ap = argparse.ArgumentParser(description="bounded chaos run of a local cluster")
    ap.add_argument("-m", dest="model", default=f"{ROOT}/../shared/models/small-llama-q4_0.gguf")
    ap.add_argument("-d", dest="duration", type=float, default=900)
    ap.add_argument("-c", dest="clients", type=int, default=3)
    ap.add_argument("-n", dest="ntok", type=int, default=32)
    ap.add_argument("-p", dest="base", type=int, default=7860)
    a = ap.parse_args()
    a.bin = os.environ.get("HEARTH", f"{ROOT}/build/hearth")
    a.port = a.base + 40
    os.environ["HEARTH"] = a.bin
    os.environ.setdefault("HR_CLUSTER_DIR", "/tmp/hearth-chaos")
    log("references from `hearth run` ...")
    refs = references(a)
    log(f"{len(refs)} references; starting the cluster")
    cluster("start", "-m", a.model, "-n", "3", "-p", str(a.base), "--", "--wire", "f32",
            "--k", "1", "--api-listen", f"127.0.0.1:{a.port}", "--api-key", KEY)
    r = Run(a)
    r.end = time.time() + a.duration
    procs = {}
    threads = [threading.Thread(target=client_loop, args=(r, refs, c)) for c in range(a.clients)]
    threads += [threading.Thread(target=f, args=args) for f, args in
                ((killer_loop, (r, procs)), (head_restart, (r, procs)), (flood_loop, (r,)),
                 (malformed_loop, (r,)), (rss_loop, (r,)))]
    for t in threads:
        t.daemon = True
        t.start()
    while r.alive():
        time.sleep(30)
        with r.mu:
            kinds = {}
            for x in r.results:
                kinds[x[2]] = kinds.get(x[2], 0) + 1
            log("so far:", json.dumps(kinds), json.dumps(r.counts))
        for i in range(3):
            pid = pid_of(i)
            try:
                os.kill(pid, 0)
            except OSError:
                if pid not in r.ours:
                    r.count("crash", f"agent{i} (pid {pid}) died")
    for t in threads:
        t.join(timeout=REQ_BOUND_S + 30)
    cluster("stop", check=False)
    rss_bad = [f"pid {p} with {n} layers: {dev:.1f}%" for (p, n), (base, dev) in r.rss.items()
               if base and dev > 10]
    for x in rss_bad:
        r.count("rss", x)
    devs = ", ".join(f"agent{r.rss_kb[key][0]} pid {key[0]} with {key[1]} layers "
                     f"{r.rss_kb[key][1]}->{r.rss_kb[key][2]} kB (max {dev:.1f}%)"
                     for key, (base, dev) in sorted(r.rss.items()) if base)

    def at(t):
        return f"+{t - r.start:.1f} s"

    # every client request: inside or outside the windows (all closed now)
    kinds, outside = {}, []
    for t0, t1, kind, v in r.results:
        ins = r.inside(t0, t1)
        kinds.setdefault(kind, [0, 0])[0 if ins else 1] += 1
        if kind in ("error", "refused") and not ins:
            outside.append(f"{kind} at {at(t0)}..{at(t1)}: {v[:120]}")
    total = len(r.results)
    exact = sum(kinds.get("exact", [0, 0]))
    share = exact / total if total else 0.0
    bad_m = [f"expected {want}, got {st} at {at(t0)}: {out!r}"
             for t0, t1, want, st, out in r.malformed if st != want]
    statuses = {}
    for m in r.malformed:
        statuses[m[3]] = statuses.get(m[3], 0) + 1

    print(f"chaos: {a.duration:.0f} s; windows (closed {GRACE_S:.0f} s after the cluster is whole "
          "again): " + ("; ".join(f"{w[0]} at {at(w[1])}, whole after "
                                 + (f"{w[2] - w[1]:.1f} s" if w[2] else "never")
                                 for w in r.windows) or "none"))
    print("chaos: client requests inside/outside the windows: "
          + ", ".join(f"{k} {n[0]}/{n[1]}" for k, n in sorted(kinds.items())))
    print(f"chaos: exact {exact} of {total} ({100 * share:.1f}%, {100 * MIN_EXACT:.0f}% needed); "
          f"longest request {r.max_s:.1f} s (bound {REQ_BOUND_S:.0f} s)")
    print(f"chaos: malformed requests {len(r.malformed)}: "
          + (", ".join(f"{st} x{n}" for st, n in sorted(statuses.items())) or "none")
          + (f"; {len(bad_m)} without their 4xx" if bad_m else "; each got its 4xx"))
    print(f"chaos: other counts {json.dumps(r.counts, sort_keys=True)}; RSS deviation after "
          f"warm-up per process: {devs or 'n/a'}")
    for m, n in sorted(r.errors.items(), key=lambda x: -x[1])[:8]:
        print(f"   error x{n}: {m}")
    for f in r.failures[:20]:
        print("  ", f)

    why = []
    if outside:
        why.append(f"{len(outside)} errors/refusals outside the windows we caused, first: "
                   f"{outside[0]}")
    if total == 0:
        why.append("no client request was answered")
    elif share < MIN_EXACT:
        why.append(f"only {exact} of {total} requests exact ({100 * share:.1f}% < "
                   f"{100 * MIN_EXACT:.0f}%)")
    if bad_m:
        why.append(f"{len(bad_m)} of {len(r.malformed)} malformed requests without their 4xx, "
                   f"first: {bad_m[0]}")
    names = {"wrong": "answers differ from `hearth run`",
             "unclear": "requests ended without the answer or a clear error",
             "slow": f"requests took longer than {REQ_BOUND_S:.0f} s",
             "crash": "agents died other than by our hand",
             "rss": "agents' RSS moved more than 10%",
             "flood_health": "/health failed under a flood",
             "not_whole": f"windows not closed within {READY_WAIT_S:.0f} s"}
    for k, what in names.items():
        if r.counts.get(k):
            first = next((f for f in r.failures if f.startswith(k + ":")), "")
            why.append(f"{r.counts[k]} {what}"
                       + (f", first: {first[len(k) + 2:]}" if first else ""))
    for w in why:
        print("chaos: FAILED:", w)
    if not why:
        print("chaos: PASS")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
