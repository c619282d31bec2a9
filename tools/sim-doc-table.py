#!/usr/bin/env python3
"""The accuracy table of docs/simulation.md from tools/sim-compare.sh's tables.

  tools/sim-doc-table.py COMPARE_DIR/4g/table.txt COMPARE_DIR/2g/table.txt [...]

Prints one markdown row per collective, -G mode and library, with the >= 1 MB
and < 1 MB geomean errors and the worst size (anyccl rows name the size) for
each table given (columns in the order given; "-" where a table lacks the
sweep), then a line of totals for anyccl against the issue's targets."""
import sys


def load(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if line.startswith("#") or not f or f[0] == "collective" or len(f) < 7:
            continue
        at = f[6] if len(f) == 8 else ""
        rows[(f[0], f[2], f[1])] = (f[3], f[4], f[5], at)
    return rows


def size(b):
    b = int(b)
    for unit, name in ((1 << 20, "MB"), (1 << 10, "KB")):
        if b >= unit:
            return "%d %s" % (b // unit, name)
    return "%d B" % b


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tables = [load(p) for p in sys.argv[1:]]
    names = [p.split("/")[-2] for p in sys.argv[1:]]
    head = ["collective", "vs"]
    for n in names:
        head += ["%s >=1 MB" % n, "%s <1 MB" % n, "%s worst" % n]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ge, lt, worst = [], [], []
    for c in ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"]:
        for g in ["0", "1"]:
            for lib in ["anyccl", "nccl"]:
                if not any((c, g, lib) in t for t in tables):
                    continue
                cells = [c + (" -G 1" if g == "1" else ""), "NCCL" if lib == "nccl" else "anyccl"]
                for t in tables:
                    v = t.get((c, g, lib))
                    if v is None:
                        cells += ["-"] * 3
                        continue
                    cells += [v[0], v[1], "%s (%s)" % (v[2], size(v[3])) if lib == "anyccl" and v[3] else v[2]]
                    if lib == "anyccl":
                        ge.append(float(v[0][:-1]))
                        lt.append(float(v[1][:-1]))
                        worst.append(float(v[2][:-1]))
                print("| " + " | ".join(cells) + " |")
    print("\nanyccl, %d sweeps: >= 1 MB %.1f-%.1f%% (%d within 5%%); < 1 MB %.1f-%.1f%% (%d within 15%%); "
          "%d with a size past 25%%" % (len(ge), min(ge), max(ge), sum(x <= 5 for x in ge), min(lt), max(lt),
                                        sum(x <= 15 for x in lt), sum(x > 25 for x in worst)))


if __name__ == "__main__":
    main()
