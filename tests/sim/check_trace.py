#!/usr/bin/env python3
"""Checks an ANYCCL_TRACE file (docs/simulation.md, "The trace").

  check_trace.py FILE schema RANKS OPS      the format every backend writes: RANKS
                                            ranks (of all communicators), OPS
                                            collectives per rank, ring sends and
                                            receives that pair up within each
                                            communicator (pid // 1000000)
  check_trace.py FILE ring8                 + the sim's times for test_sim's trace
                                            case (8 ranks, one lane, 8 x 64 KB)
Exit status 0 when every check holds; each failure is printed."""
import json
import re
import sys
from collections import defaultdict

fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def load(path):
    with open(path) as f:
        return json.load(f)  # must parse as JSON


def schema(doc, ranks, ops):
    ev = doc.get("traceEvents")
    check(isinstance(ev, list) and ev, "no traceEvents")
    names = {}
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    rankPids = sorted(p for p, n in names.items() if n.startswith("rank "))
    check(len(rankPids) == ranks, "%d rank processes, want %d" % (len(rankPids), ranks))
    colls = defaultdict(list)
    sends = defaultdict(list)  # (pid, op, tid) -> [(step, peer)]
    recvs = defaultdict(list)
    pairs = set()
    for e in ev:
        if e.get("ph") != "X":
            continue
        for k in ("name", "pid", "tid", "ts", "dur", "args"):
            check(k in e, "event without %s: %s" % (k, e))
        check(e["dur"] >= 0, "negative duration: %s" % e)
        n, pid, tid, op = e["name"], e["pid"], e["tid"], e["args"].get("opCount")
        m = re.match(r"^(Send|Recv)-(-?\d+)-(\d+)$", n)
        if tid == 0:
            colls[pid].append(e)
        elif m:
            side, peer, step = m.group(1), int(m.group(2)), int(m.group(3))
            check((tid % 2 == 1) == (side == "Send"), "%s on track %d" % (n, tid))
            check("bytes" in e["args"] and "net" in e["args"], "%s without bytes/net" % n)
            (sends if side == "Send" else recvs)[(pid, op, tid)].append((step, peer))
            if side == "Send" and peer != pid % 1000000:  # pid: communicator * 1000000 + rank
                pairs.add((pid // 1000000, pid % 1000000, peer, op, step, tid))
        else:
            check(n in ("Lane", "BufferWait", "RecvWait"), "unknown event %s" % n)
    for p in rankPids:
        check(len(colls[p]) == ops, "rank pid %d: %d collectives, want %d" % (p, len(colls[p]), ops))
    # a lane's steps are numbered from 0 (per phase: a launch of several may repeat them)
    for key, lst in list(sends.items()) + list(recvs.items()):
        steps = sorted(set(s for s, _ in lst))
        check(steps == list(range(len(steps))), "track %s: steps %s are not 0, 1, 2..." % (key, steps[:8]))
    # what rank a sends to rank b at (op, step, lane) rank b receives from a
    got = set()
    for (pid, op, tid), lst in recvs.items():
        for step, peer in lst:
            got.add((pid // 1000000, peer, pid % 1000000, op, step, tid - 1))
    missing = [p for p in pairs if p not in got]
    check(not missing, "%d sends without their receive, e.g. %s" % (len(missing), missing[:3]))
    counters = [e for e in ev if e.get("ph") == "C"]
    return ev, colls, sends, recvs, counters


def ring8(doc):
    n, block, rate = 8, 65536, 44e3  # bytes per us of one lane (block_GBps 44)
    ev, colls, sends, recvs, counters = schema(doc, n, 1)
    step = 2 + 0.5 + block / rate
    want = 5 + 14 * step + 2
    for p, lst in colls.items():
        if lst:
            check(lst[0]["name"] == "AllReduce", "rank %d: %s" % (p, lst[0]["name"]))
            check(abs(lst[0]["dur"] - want) < 2e-3, "rank %d: AllReduce %.3f us, want %.3f" % (p, lst[0]["dur"], want))
            check(lst[0]["args"].get("bytes") == n * block, "rank %d: bytes %s" % (p, lst[0]["args"]))
    nxt = {}
    for (pid, op, tid), lst in sends.items():
        check(tid == 1, "rank %d sends on track %d (one lane)" % (pid, tid))
        check(sorted(s for s, _ in lst) == list(range(14)), "rank %d: send steps %s" % (pid, sorted(lst)))
        peers = {q for _, q in lst}
        check(len(peers) == 1, "rank %d sends to %s (a ring: one peer)" % (pid, peers))
        nxt[pid] = peers.pop() if peers else -1
    for (pid, op, tid), lst in recvs.items():
        check(sorted(s for s, _ in lst) == list(range(14)), "rank %d: receive steps" % pid)
    # the ring: one cycle through all 8 ranks
    seen, r = set(), 0
    for _ in range(n):
        seen.add(r)
        r = nxt.get(r, -1)
    check(len(seen) == n and r == 0, "send peers do not form one ring: %s" % nxt)
    for e in ev:
        if e.get("ph") == "X" and e["name"].startswith(("Send-", "Recv-")):
            check(abs(e["dur"] - step) < 2e-3, "%s on rank %d: %.3f us, want %.3f" % (e["name"], e["pid"], e["dur"], step))
    util = 100 * block / (360e3 * step)  # NVLink 360 GB/s
    out = [c for c in counters if c["name"] == "host0/gpu0/nvlink-out"]
    check(len(out) == 15, "%d counter values of host0/gpu0/nvlink-out, want 14 rounds + idle" % len(out))
    check(out and abs(out[0]["args"]["util"] - util) < 0.06, "nvlink-out %s%%, want %.1f" % (out[:1], util))
    check(out and out[-1]["args"]["util"] == 0, "the link does not fall idle at the end")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    doc = load(sys.argv[1])
    if sys.argv[2] == "ring8":
        ring8(doc)
    else:
        schema(doc, int(sys.argv[3]), int(sys.argv[4]))
    for f in fails[:20]:
        print("FAIL:", f)
    print("%s: %s" % (sys.argv[1], "ok" if not fails else "%d failures" % len(fails)))
    sys.exit(1 if fails else 0)
