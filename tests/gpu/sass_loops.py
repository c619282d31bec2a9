#!/usr/bin/env python3
"""tests/gpu/sass_loops.py -- how many load latencies one pass of each loop
of a kernel waits for, read from its SASS (no GPU needed).

    sass_loops.py [--cheap64] <listing.sass> [more listings]

A listing is one function as `cuobjdump -sass` prints it (sass_compare.sh
writes A.sass and B.sass). For every innermost loop (a backward branch
whose range holds no other) that contains loads, the instructions of one
pass are issued in program order; an instruction waits for the loads whose
registers it reads. A load that is not marked .CONSTANT counts one latency
(on the device-API kernels: a load from a peer over NVLink, about a
microsecond); a .CONSTANT load (ld.global.nc, such as a window's pointer
table) counts 0.05, and so does every 64-bit load with --cheap64 (pointer
tables read with plain loads; wrong for kernels that load 8-byte data). Printed per loop: its address range, its loads, and the
critical path of one pass in those units. When a loop runs in one warp (a
small message), its time is about that path times the pass count, so two
builds of one kernel compare by it.
"""
import re
import sys

INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")
REG = re.compile(r"\bR(\d+)(?:\.64)?\b")


def regs_of(operand, width=1):
    out = set()
    for m in REG.finditer(operand):
        r = int(m.group(1))
        w = 2 if m.group(0).endswith(".64") else width
        out.update(range(r, r + w))
    return out


def op_width(op):
    return 4 if ".128" in op else 2 if (".64" in op or "WIDE" in op) else 1


def parse(path):
    out = []
    for line in open(path):
        m = INS.search(line)
        if m:
            ops = [s.strip() for s in m.group(4).split(",")] if m.group(4).strip() else []
            out.append((int(m.group(1), 16), m.group(2) or "", m.group(3), ops))
    return out


def loops(ins):
    found = []
    for addr, pred, op, ops in ins:
        if op == "BRA" and ops and ops[-1].startswith("0x"):
            target = int(ops[-1].split()[0], 16)
            if target < addr:
                found.append((target, addr))
    inner = [(t, a) for t, a in found if not any(t <= t2 and a2 <= a and (t2, a2) != (t, a) for t2, a2 in found)]
    return sorted(set(inner))


CHEAP64 = False


def cheap(op):
    return "CONSTANT" in op or (CHEAP64 and ".64" in op and ".128" not in op)


def critical(body):
    ready, now, nloads = {}, 0.0, 0
    for _, _, op, ops in body:
        base = op.split(".")[0]
        is_load = base in ("LD", "LDG")
        is_store = base in ("ST", "STG", "RED", "ATOM", "ATOMG")
        dst, srcs = set(), set()
        if is_store:
            for o in ops:
                srcs |= regs_of(o, op_width(op) if not o.startswith("desc") else 1)
        else:
            if ops and re.match(r"R\d+$", ops[0]):
                r = int(ops[0][1:])
                dst = set(range(r, r + op_width(op)))
            for o in ops[1:]:
                srcs |= regs_of(o)
        now = max([now] + [ready.get(r, 0.0) for r in srcs])
        if is_load:
            lat = 0.05 if cheap(op) else 1.0
            nloads += lat == 1.0
            for r in dst:
                ready[r] = now + lat
        else:
            for r in dst:
                ready[r] = now
    return nloads, max([now] + list(ready.values()))


def main():
    global CHEAP64
    args = sys.argv[1:]
    if args and args[0] == "--cheap64":
        CHEAP64, args = True, args[1:]
    if not args:
        print(__doc__.strip().split("\n\n")[1])
        return 2
    for path in args:
        ins = parse(path)
        print(f"{path}: {len(ins)} instructions")
        for t, a in loops(ins):
            body = [x for x in ins if t <= x[0] <= a]
            n, c = critical(body)
            if n:
                print(f"  loop {t:05x}-{a:05x}: {len(body):4d} instructions, {n:2d} loads, critical path {c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
