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
Every answer is compared with the one a lone head (one process, same
arithmetic) gives for the same prompt and seed. The run fails (exit 1) when
an answer differs, a request ends without the exact answer or a clear error
(an OpenAI-style error body or SSE error event, a 429/503, or a refused
connection while the head restarts), a request takes longer than its bound
(REQ_BOUND_S), an agent dies other than by our hand, or an agent's RSS moves
more than 10% from its value after warm-up for the same share of the work
(anonymous RSS: the mapped model's pages are page cache, not the agent's
memory; a worker carrying a lost peer's layers holds their KV too, so each
(process, layers) pair has its own baseline; sampled every 5 s once a plan
has served for 5 s, outside the floods, whose 400 open connections are
served by live threads; every sample goes to $HR_CLUSTER_DIR/rss.txt). Prints a summary either way.
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
        self.head_down = False  # the head is being restarted on purpose
        self.flooding = False  # a flood's connections (and their threads) are open
        self.errors = {}  # error message -> count
        self.rss_kb = {}  # (pid, layers) -> (agent index, baseline kB, last kB)

    def count(self, what, why=None):
        with self.mu:
            self.counts[what] = self.counts.get(what, 0) + 1
            if why:
                self.failures.append(f"{what}: {why}")
                log("FAIL", what, why)

    def alive(self):
        return time.time() < self.end


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
        dt = time.time() - t0
        with r.mu:
            r.max_s = max(r.max_s, dt)
        if dt > REQ_BOUND_S:
            r.count("slow", f"request took {dt:.1f} s (bound {REQ_BOUND_S} s)")
        if kind == "ok":
            if v == refs[(i, s)]:
                r.count("exact")
            else:
                r.count("wrong", f"prompt {i} seed {s} stream {stream}: {v[:80]!r}")
        elif kind == "error":
            r.count("error")
            with r.mu:
                r.errors[v[:90]] = r.errors.get(v[:90], 0) + 1
            if v.startswith(("503", "429")):
                time.sleep(0.2)  # as a client that respects Retry-After would, briefly
        elif kind == "refused" and r.head_down:
            r.count("refused")  # the head is restarting: a clear "connection refused"
            time.sleep(0.5)
        else:
            r.count("unclear", v)


def killer_loop(r, procs):
    # always agent2: agent1 lives through the whole run, so its memory is
    # watched across every kill, re-plan and recovery of the others
    while r.alive():
        time.sleep(45)
        if not r.alive():
            break
        log("kill agent2")
        procs[2] = restart(r, 2, signal.SIGKILL)


def head_restart(r, procs):
    time.sleep(r.a.duration / 2)
    if r.alive():
        log("head restart (SIGTERM)")
        r.head_down = True
        procs[0] = restart(r, 0, signal.SIGTERM)
        for _ in range(300):
            if http(r.a.port, "/health", timeout=2)[0] in (200, 503):
                break
            time.sleep(0.2)
        r.head_down = False


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
        if st not in (200, 503) and not r.head_down:
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
        if body is None:
            st, out = oversized(r.a.port)
        else:
            st, out = http(r.a.port, "/v1/completions", raw=body, timeout=30)
        if st == 0 and r.head_down:
            r.count("refused")
        elif st == want or st == 503:
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
        return j["plan_id"], {d["name"]: d.get("w", 0) * k for d in j["devices"]
                              if not d.get("lost")}
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
    """The lone head's answers: one process, same arithmetic."""
    port = a.port + 50
    d = f"{os.environ['HR_CLUSTER_DIR']}.ref"
    os.makedirs(d, exist_ok=True)
    p = subprocess.Popen([a.bin, "agent", "-m", a.model, "--listen", f"127.0.0.1:{port - 10}",
                          "--name", "ref", "--no-profile", "--wire", "f32", "--key-dir",
                          f"{d}/key", "--api-listen", f"127.0.0.1:{port}", "--api-key", KEY],
                         stderr=open(f"{d}/ref.log", "w"), stdout=subprocess.DEVNULL)
    refs = {}
    try:
        for _ in range(150):
            if http(port, "/health", timeout=2)[0] == 200:
                break
            time.sleep(0.2)
        for i in range(len(PROMPTS)):
            for s in range(1, 4):
                kind, v = completion(port, i, s, a.ntok, False)
                if kind != "ok":
                    raise SystemExit(f"chaos: reference run failed: {v}")
                refs[(i, s)] = v
    finally:
        p.terminate()
        p.wait()
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
    log("references from a lone head ...")
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
            log("so far:", json.dumps(r.counts))
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
    ok = not any(r.counts.get(k) for k in ("wrong", "unclear", "slow", "crash", "rss",
                                           "malformed_bad", "flood_health"))
    print(f"chaos: {a.duration:.0f} s, {json.dumps(r.counts, sort_keys=True)}; longest request "
          f"{r.max_s:.1f} s (bound {REQ_BOUND_S:.0f} s); RSS deviation after warm-up per "
          f"process: {devs or 'n/a'}; {'PASS' if ok else 'FAIL'}")
    for m, n in sorted(r.errors.items(), key=lambda x: -x[1])[:8]:
        print(f"   error x{n}: {m}")
    for f in r.failures[:20]:
        print("  ", f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
