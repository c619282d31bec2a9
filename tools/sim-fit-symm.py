#!/usr/bin/env python3
"""Fit the sim calibration's one-host kernel keys (symm_*) to nccl-tests runs
of anyccl's cuda backend on one host, and print each size's error before
(the FIFO plans: ANYCCL_CUDA_SYMM=0 in the sim) and after.

  tools/sim-fit-symm.py -c topologies/sim_h100.calib [-o new.calib] RUN...

RUN: FILE[:ENV], an nccl-tests output (column 1 size, column 6 out-of-place
time in us; `graph: N` > 0 in its header: ANYCCL_SIM_GRAPH=1) and the
anyccl settings it ran with (comma-separated VAR=VALUE, may be empty; the
VAR=VALUE lines of a sim.env beside FILE come first, as in tools/sim-lib.sh),
e.g.
  simdata/c3/ll/all_reduce-G10-ll512.log:ANYCCL_CUDA_SYMM_LL=524288
  docs/data/sim-h100/4g/alltoall.anyccl.G1.txt
The sim runs the sweep with the run's iterations (times its graph launches:
a -G N run's loop is N launches of a graph of them) and warm-up.
Method: coordinate descent on the logs of the symm_* keys (the others stay
as in -c), minimising the mean squared log(predicted/measured) over the
sizes that take the one-host kernels (those whose prediction changes with
ANYCCL_CUDA_SYMM=0) of every run, each run weighing alike; steps x1.5,
x1.2, x1.07, x1.02. Needs build/perf/ (or PERF_DIR)."""
import argparse, concurrent.futures, math, os, re, subprocess, sys, tempfile

KEYS = ["symm_launch_us", "symm_graph_launch_us", "symm_ll_block_GBps", "symm_block_GBps", "symm_barrier_us",
        "symm_copy_GBps"]
LO = {"symm_launch_us": 0.2, "symm_graph_launch_us": 0.2, "symm_ll_block_GBps": 0.5, "symm_block_GBps": 0.5,
      "symm_barrier_us": 0.05, "symm_copy_GBps": 50}
HI = {"symm_launch_us": 50, "symm_graph_launch_us": 50, "symm_ll_block_GBps": 500, "symm_block_GBps": 500,
      "symm_barrier_us": 50, "symm_copy_GBps": 20000}
POOL = concurrent.futures.ThreadPoolExecutor(8)  # each run mostly waits (0.3 s), little CPU
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path):
    """-> rows {size: us}, graph launches, GPUs, (iterations, warm-up): a -G N
    run times N launches of a graph of the iterations, so N x iterations."""
    rows, graph, ngpus, iters = {}, 0, 1, (5, 1)
    for line in open(path):
        m = re.search(r"nGpus (\d+).*graph: (\d+)", line)
        if m:
            ngpus, graph = int(m.group(1)), int(m.group(2))
            w = re.search(r"warmup iters: (\d+) iters: (\d+)", line)
            if w:
                iters = (int(w.group(2)) * max(graph, 1), int(w.group(1)))
        f = line.split()
        if line.startswith("#") or len(f) < 8 or not f[0].isdigit():
            continue
        rows[int(f[0])] = float(f[5])
    return rows, graph, ngpus, iters


def coll_of(path):
    base = os.path.basename(path)
    for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"):
        if base.startswith(c):
            return c
    sys.exit("sim-fit-symm: %s: no collective in the name" % path)


def predict(run, calib, extra):
    path, env_s, rows, graph, ngpus, iters = run
    env = dict(os.environ, ANYCCL_BACKEND="sim", ANYCCL_SIM_CALIB=calib, ANYCCL_SIM_GRAPH="1" if graph else "0")
    simenv = os.path.join(os.path.dirname(path), "sim.env")
    pre = [l.strip() for l in open(simenv) if re.match(r"^[A-Z_0-9]+=\S*$", l.strip())] if os.path.exists(simenv) else []
    for kv in pre + list(filter(None, env_s.split(","))):
        k, v = kv.split("=", 1)
        env[k] = v
    env.update(extra)
    sizes = sorted(rows)
    tool = os.path.join(os.environ.get("PERF_DIR", os.path.join(ROOT, "build", "perf")), coll_of(path) + "_perf")
    out = subprocess.run([tool, "-g", str(ngpus), "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", "2", "-n", str(iters[0]),
                          "-w", str(iters[1])], env=env, capture_output=True, text=True).stdout
    pred = {}
    for line in out.splitlines():
        f = line.split()
        if not line.startswith("#") and len(f) >= 8 and f[0].isdigit():
            pred[int(f[0])] = float(f[5])
    return pred


def write_calib(base, vals, path, note=""):
    lines = [l for l in open(base) if l.split()[:1] and l.split()[0] not in vals]
    with open(path, "w") as o:
        o.writelines(lines)
        if note:
            o.write(note)
        for k in KEYS:
            o.write("%-20s %.4g\n" % (k, vals[k]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-c", required=True)
    ap.add_argument("-o")
    ap.add_argument("--no-fit", action="store_true", help="only the errors with -c as it is")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = []
    for r in a.runs:
        path, _, env = r.partition(":")
        rows, graph, ngpus, iters = parse(path)
        if rows:
            runs.append((path, env, rows, graph, ngpus, iters))
    vals = {}
    for line in open(a.c):
        f = line.split()
        if f and f[0] in KEYS:
            vals[f[0]] = float(f[1])
    tmp = tempfile.mkdtemp()
    defaults = {"symm_launch_us": 6.4, "symm_graph_launch_us": 2.7, "symm_ll_block_GBps": 384, "symm_block_GBps": 4.4,
                "symm_barrier_us": 3.1, "symm_copy_GBps": 1530}  # the built-in values (fabric.c)
    for k in KEYS:
        vals.setdefault(k, defaults[k])

    # the sizes that take the one-host kernels: those whose prediction changes without them
    cal = os.path.join(tmp, "start.calib")
    write_calib(a.c, vals, cal)
    plans = list(POOL.map(lambda r: predict(r, cal, {"ANYCCL_CUDA_SYMM": "0"}), runs))
    kern = list(POOL.map(lambda r: predict(r, cal, {}), runs))
    symmSizes = [{s for s in run[2] if s in b and s in k and abs(b[s] - k[s]) > 1e-9}
                 for run, b, k in zip(runs, plans, kern)]

    def objective(v):
        cal = os.path.join(tmp, "try.calib")
        write_calib(a.c, v, cal)
        s, m = 0.0, 0
        for run, sizes, p in zip(runs, symmSizes, POOL.map(lambda r: predict(r, cal, {}), runs)):
            e = [math.log(p[size] / run[2][size]) ** 2 for size in sizes if p.get(size, 0) > 0]
            if e:
                s += sum(e) / len(e)
                m += 1
        return s / max(m, 1)

    best = objective(vals)
    print("start: rms log error %.3f" % math.sqrt(best), file=sys.stderr)
    if not a.no_fit:
        for step in (1.5, 1.2, 1.07, 1.02):
            improved = True
            while improved:
                improved = False
                for k in KEYS:
                    for up in (True, False):
                        old = vals[k]
                        new = min(HI[k], max(LO[k], old * step if up else old / step))
                        if new == old:
                            continue
                        vals[k] = new
                        o = objective(vals)
                        if o < best * 0.9999:
                            best, improved = o, True
                            print("x%g %s %.4g -> %.4g: rms %.4f" % (step, k, old, new, math.sqrt(o)),
                                  file=sys.stderr)
                            break
                        vals[k] = old
        print("fitted: rms log error %.3f" % math.sqrt(best), file=sys.stderr)
    cal = os.path.join(tmp, "fit.calib")
    write_calib(a.c, vals, cal)
    if a.o:
        write_calib(a.c, vals, a.o, "# symm_* fitted by tools/sim-fit-symm.py (rms log error %.3f) to:\n%s" %
                    (math.sqrt(best), "".join("#   %s %s\n" % (r[0], r[1]) for r in runs)))
    # per size: measured, before (the plans), after (the one-host kernels)
    # per size: measured, before (the plans), after (the one-host kernels);
    # sizes whose path did not change (before == after) are listed, not counted
    print("%-44s %8s %8s %8s %7s %8s %7s" % ("run", "size", "meas_us", "plans", "err", "symm", "err"))
    gm = lambda e: 100 * math.exp(sum(math.log(max(x, 1e-3)) for x in e) / len(e)) if e else 0
    eb, ea, summary = [], [], []
    befores = list(POOL.map(lambda r: predict(r, cal, {"ANYCCL_CUDA_SYMM": "0"}), runs))
    afters = list(POOL.map(lambda r: predict(r, cal, {}), runs))
    for run, before, after in zip(runs, befores, afters):
        name = os.path.join(os.path.basename(os.path.dirname(run[0])), os.path.basename(run[0])) + \
            (" " + run[1].replace("ANYCCL_CUDA_", "") if run[1] else "")
        rb, ra = [], []
        for size in sorted(run[2]):
            t = run[2][size]
            b, f = before.get(size, 0), after.get(size, 0)
            if b <= 0 or f <= 0:
                continue
            same = abs(b - f) < 1e-9
            if not same:
                rb.append(abs(b - t) / t)
                ra.append(abs(f - t) / t)
            print("%-44s %8d %8.2f %8.2f %6.1f%% %8.2f %6.1f%%%s" % (name[:44], size, t, b, 100 * (b - t) / t, f,
                                                                   100 * (f - t) / t, " (plans)" if same else ""))
        eb += rb
        ea += ra
        if ra:
            summary.append("#   %-44s %2d sizes: geomean %6.1f%% -> %5.1f%%, worst %6.1f%% -> %5.1f%%" %
                           (name[:44], len(ra), gm(rb), gm(ra), 100 * max(rb), 100 * max(ra)))
    print("# per run, sizes that take the one-host kernels: |error| with the plans -> with the kernels")
    print("\n".join(summary))
    print("# all %d such sizes: geomean |error| %.1f%% -> %.1f%%; worst %.1f%% -> %.1f%%" %
          (len(eb), gm(eb), gm(ea), 100 * max(eb), 100 * max(ea)))

if __name__ == "__main__":
    main()
