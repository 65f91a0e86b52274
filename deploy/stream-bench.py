#!/usr/bin/env python3
"""stream-bench.py - concurrent streamed completions against a hearth head's
HTTP API; prints aggregate and per-stream generation speed.

    python3 deploy/stream-bench.py URL [-c 1,4] [-n TOKENS] [-r REPS] [-k KEY]
                                   [--prompt-tokens N]

For each concurrency C, C streams start together (greedy, max_tokens
TOKENS, each with its own prompt) and the run measures, per stream, the
time to its first token and its tokens after the first per second, and in
all, the completion tokens of every stream over the wall time from the
first request to the last [DONE] (aggregate tokens/s). With -r, the
concurrencies are run in turn REPS times and the median aggregate is
printed with the min..max. The
last line gives the ratio of each C's aggregate to that of the first C.
With --pids, each run also says how much CPU time the agents spent per
generated token (what a busy machine does not change much).
"""
import argparse
import os
import http.client
import json
import statistics
import threading
import time
import urllib.parse

WORDS = ("river stone lantern orchard harbor meadow copper winter garden "
         "thunder violet compass ember willow granite falcon").split()


def prompt_for(i, n_words):
    # a number first: no two prompts share a prefix the prompt cache could reuse
    return f"{i}: " + " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n_words))


def one_stream(url, key, prompt, n_tok, out):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": n_tok, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    hdr = {"Content-Type": "application/json"}
    if key:
        hdr["Authorization"] = "Bearer " + key
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, hdr)
    r = c.getresponse()
    first = None
    usage = None
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            j = json.loads(ev[6:])
            if j.get("choices") and first is None:
                first = time.monotonic()
            if j.get("usage"):
                usage = j["usage"]
    t1 = time.monotonic()
    c.close()
    n = usage["completion_tokens"] if usage else 0
    pt = usage["prompt_tokens"] if usage else 0
    ct = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) if usage else 0
    out.update(t0=t0, first=first or t1, t1=t1, n=n, status=r.status, prompt=pt, cached=ct)


SERIAL = [0]
PIDS = []


def cpu_s():
    """CPU seconds (user + system) the agents in PIDS used so far."""
    tot = 0
    for p in PIDS:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            tot += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return tot / os.sysconf("SC_CLK_TCK")


def run(url, key, conc, n_tok, p_words):
    res = [dict() for _ in range(conc)]
    base = SERIAL[0]
    SERIAL[0] += conc
    th = [threading.Thread(target=one_stream,
                           args=(url, key, prompt_for(base + i, p_words), n_tok, res[i]))
          for i in range(conc)]
    c0 = cpu_s()
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = max(r["t1"] for r in res) - t0
    res[0]["cpu"] = cpu_s() - c0
    total = sum(r["n"] for r in res)
    bad = [r["status"] for r in res if r["status"] != 200 or r["n"] == 0]
    ttft = [r["first"] - r["t0"] for r in res]
    per = [(r["n"] - 1) / (r["t1"] - r["first"]) if r["n"] > 1 and r["t1"] > r["first"] else 0
           for r in res]
    return total / wall, ttft, per, total, wall, bad, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-c", default="1,4")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=1)
    ap.add_argument("-k", default=None)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("--pids", default="", help="agents' pids (a,b,c): CPU time per token")
    a = ap.parse_args()
    PIDS.extend(int(x) for x in a.pids.split(",") if x)
    concs = [int(x) for x in a.c.split(",")]
    run(a.url, a.k, 1, 4, a.prompt_words)  # warm-up
    agg = {c: [] for c in concs}
    ttfts = {}
    for rep in range(a.r):  # repetitions interleaved: slow drifts of the machine hit all alike
        for c in concs:
            tps, ttft, per, total, wall, bad, res = run(a.url, a.k, c, a.n, a.prompt_words)
            agg[c].append(tps)
            ttfts.setdefault(c, []).append(max(ttft))
            print(f"{c} stream(s), rep {rep + 1}: {total} tokens in {wall:.2f} s = {tps:.2f} "
                  f"tokens/s aggregate; per stream {statistics.mean(per):.2f} tokens/s "
                  f"after the first token (sum {sum(per):.2f}); "
                  f"first token {min(ttft):.2f}..{max(ttft):.2f} s; prompt "
                  f"{res[0]['prompt']} tokens ({res[0]['cached']} cached)"
                  + (f"; agents' CPU {1000 * res[0]['cpu'] / max(total, 1):.0f} ms per token"
                     if PIDS else "")
                  + (f"; FAILED: {bad}" if bad else ""), flush=True)
    base = statistics.median(agg[concs[0]])
    print("aggregate tokens/s (median, min..max):")
    for c in concs:
        m = statistics.median(agg[c])
        print(f"  {c} stream(s): {m:.2f} ({min(agg[c]):.2f}..{max(agg[c]):.2f}), "
              f"x{m / base:.2f} of {concs[0]} stream(s); time to the last first token "
              f"{statistics.median(ttfts[c]):.3f} s (median)")


if __name__ == "__main__":
    main()
