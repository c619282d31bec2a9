#!/usr/bin/env python3
"""Per-rank launches of ANYCCL_TRACE files (one per rank, as the cpu backend
writes them; .json or .json.gz): each collective's duration in ms, and for
launch OP (default 5) the receive waits of its first steps, in ms from that
launch's start on the first file's rank.

  bench/trace_launches.py [--op N] tr_*.json.gz

Used for docs/simulation.md, "Accuracy across hosts" (why 4-host broadcast
is slower than modelled)."""
import gzip
import json
import sys


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)["traceEvents"]


def main():
    args = sys.argv[1:]
    want = 5
    if len(args) >= 2 and args[0] == "--op":
        want, args = int(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    t0 = None
    for path in sorted(args):
        ev = load(path)
        colls = [e for e in ev if e.get("ph") == "X" and e.get("tid") == 0]
        rank = colls[0]["pid"] if colls else "?"
        print("rank %s (%s): launch:ms %s" % (rank, path, " ".join(
            "%d:%.1f" % (e["args"].get("opCount", -1), e["dur"] / 1e3) for e in colls)))
        sel = [e for e in colls if e["args"].get("opCount") == want]
        if not sel:
            continue
        s, end = sel[0]["ts"], sel[0]["ts"] + sel[0]["dur"]
        if t0 is None:
            t0 = s
        waits = sorted((e for e in ev if e.get("ph") == "X" and e["name"] == "RecvWait" and s <= e["ts"] <= end),
                       key=lambda e: e["ts"])
        print("   launch %d starts at %.1f ms; first receive waits (start+length ms): %s" % (
            want, (s - t0) / 1e3, " ".join("%.1f+%.1f" % ((e["ts"] - t0) / 1e3, e["dur"] / 1e3) for e in waits[:6])))


if __name__ == "__main__":
    main()
