#!/usr/bin/env python3
"""Summarize tests/gpu/run.sh results.

usage: summarize.py INDEX.tsv          (the index run.sh writes)
       summarize.py --parse LOG        (one nccl-tests log: verdict and rows, for testing)

INDEX rows (tab-separated): kind bin variant lib rc secs logfile cmd
  kind: info | build | check | perf | ours

nccl-tests data lines (src/util.cu writeBenchmarkLinePreamble/Body):
  size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
  (out-of-place, then in-place; "#wrong" is "N/A" where not checked.)
Footer: "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth : X".
"""
import math
import os
import re
import sys

OOB_RE = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
AVG_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
STRONG_RE = re.compile(r"(Test (NCCL|CUDA) failure|undefined symbol|cannot open shared|Segmentation|"
                       r"core dumped|TIMED OUT)")
ERR_RE = re.compile(r"(Test (NCCL|CUDA) failure|Test failure|failure|error|Error|ERROR|"
                    r"undefined symbol|cannot open shared|Segmentation|Aborted|core dumped|"
                    r"TIMED OUT|NCCL WARN|rank=\d+ #wrong=)")
LIB_ORDER = ["nccl", "anyccl", "xabi"]


def fnum(s):
    try:
        return float(s)
    except ValueError:
        return None


def parse_log(path):
    """-> dict(rows=[...], oob=int|None, avgbw=float|None, err=str|None, wrong_rows=int)"""
    strong = None
    res = {"rows": [], "oob": None, "oob_failed": False, "avgbw": None, "err": None,
           "wrong_rows": 0, "first_wrong": None}
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        res["err"] = "no log"
        return res
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = OOB_RE.search(s)
            if m:
                res["oob"] = int(m.group(1))
                res["oob_failed"] = m.group(2).upper() == "FAILED"
            m = AVG_RE.search(s)
            if m:
                res["avgbw"] = fnum(m.group(1))
            if s.startswith("# TIMED OUT") and not strong:
                strong = s[2:]
            continue
        f = s.split()
        if len(f) >= 13 and f[0].isdigit() and f[1].isdigit():
            row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "op": f[3], "root": f[4],
                   "time": fnum(f[5]), "algbw": fnum(f[6]), "busbw": fnum(f[7]), "wrong": fnum(f[8]),
                   "time_ip": fnum(f[9]), "busbw_ip": fnum(f[11]), "wrong_ip": fnum(f[12])}
            if row["time"] is None and row["time_ip"] is None:
                continue
            res["rows"].append(row)
            if (row["wrong"] or 0) > 0 or (row["wrong_ip"] or 0) > 0:
                res["wrong_rows"] += 1
                if res["first_wrong"] is None:
                    res["first_wrong"] = "%s %s %s root %s: #wrong %s/%s" % (
                        f[0], f[2], f[3], f[4], f[8], f[12])
            continue
        if strong is None and STRONG_RE.search(s):
            strong = s[:160]
        if res["err"] is None and ERR_RE.search(s):
            res["err"] = s[:160]
    if strong:
        res["err"] = strong
    return res


def verdict(rc, p):
    """PASS / FAIL(...) / SKIP(...) for a correctness run."""
    if rc == "skip":
        return "SKIP(deadline)", None
    if rc in ("not-built", "no-mpi"):
        return "SKIP(%s)" % rc, None
    detail = p["first_wrong"] or p["err"]
    if rc in ("124", "137"):
        return "TIMEOUT", detail
    if p["wrong_rows"]:
        return "FAIL(wrong)", detail
    if p["oob"] and p["oob"] > 0 or p["oob_failed"]:
        return "FAIL(oob=%s)" % p["oob"], detail
    if rc != "0":
        return "FAIL(rc=%s)" % rc, detail
    if not p["rows"] or p["oob"] is None:
        return "FAIL(noresult)", detail
    return "PASS", None


def pick(rows, target):
    """Row whose size is nearest to target (log scale); (row, exact)."""
    cand = [r for r in rows if r["size"] > 0] or rows
    if not cand:
        return None, False
    best = min(cand, key=lambda r: abs(math.log(max(r["size"], 1) / target)))
    return best, best["size"] == target


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return "%dB" % n


def cell(v, exact=True, fmt="%.2f"):
    if v is None:
        return "-"
    s = fmt % v
    return s if exact else "~" + s


def main(argv):
    if len(argv) == 3 and argv[1] == "--parse":
        p = parse_log(argv[2])
        rc = "0"
        v, d = verdict(rc, p)
        print("verdict(rc=0):", v, "|", d)
        print("rows:", len(p["rows"]), "oob:", p["oob"], "avgbw:", p["avgbw"], "err:", p["err"])
        for r in p["rows"][:5]:
            print(r)
        return 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    rows = []
    with open(argv[1], errors="replace") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            if len(f) >= 8:
                rows.append(dict(zip(("kind", "bin", "var", "lib", "rc", "secs", "log", "cmd"), f)))

    out = []
    infos = [r for r in rows if r["kind"] == "info"]
    ngpu = next((r["cmd"] for r in infos if r["bin"] == "ngpu"), "?")
    nfail = [0]
    out.append("== anyccl GPU run summary (NGPU=%s)" % ngpu)
    for r in infos:
        if r["bin"] not in ("ngpu",):
            out.append("  %-26s %s" % (r["bin"], r["cmd"]))
    builds_ok = {(r["bin"], r["lib"]) for r in rows if r["kind"] == "build" and r["rc"] == "0"}
    nfail[0] += len({(r["bin"], r["lib"]) for r in rows if r["kind"] == "build"} - builds_ok)
    for r in rows:
        if r["kind"] == "build":
            st = "OK" if r["rc"] == "0" else "FAILED(rc=%s)" % r["rc"]
            extra = ""
            if r["rc"] != "0" and r["log"] not in ("-", ""):
                p = parse_log(r["log"])
                extra = "  " + (p["err"] or "")
            out.append("  build %-10s %-7s %s (%ss)%s" % (r["bin"], r["lib"], st, r["secs"], extra))

    # ---- ours
    for r in rows:
        if r["kind"] == "ours":
            st = "PASS" if r["rc"] == "0" else ("SKIP(not built)" if r["rc"] == "not-built" else
                                                "SKIP(deadline)" if r["rc"] == "skip" else
                                                "TIMEOUT" if r["rc"] in ("124", "137") else "FAIL(rc=%s)" % r["rc"])
            out.append("")
            nfail[0] += st.startswith(("FAIL", "TIMEOUT"))
            out.append("OURS  %s: %s (%ss)" % (r["bin"], st, r["secs"]))

    # ---- check
    checks = [r for r in rows if r["kind"] == "check"]
    if checks:
        bins, vars_, libs = [], [], []
        cells, fails = {}, []
        for r in checks:
            for lst, k in ((bins, "bin"), (vars_, "var"), (libs, "lib")):
                if r[k] not in lst:
                    lst.append(r[k])
            p = parse_log(r["log"]) if r["log"] not in ("-", "") else parse_log("/nonexistent")
            v, d = verdict(r["rc"], p)
            cells[(r["bin"], r["var"], r["lib"])] = v
            if not v.startswith(("PASS", "SKIP")):
                nfail[0] += 1
                fails.append("  %s %s %s: %s%s" % (r["bin"], r["var"], r["lib"], v, (" -- " + d) if d else ""))
        libs.sort(key=lambda x: LIB_ORDER.index(x) if x in LIB_ORDER else 99)
        out.append("")
        if fails:
            out.append("CHECK failures (first wrong row or error line):")
            out.extend(fails[:30])
            if len(fails) > 30:
                out.append("  ... and %d more" % (len(fails) - 30))
        w = max(12, max(len(v) for v in cells.values()) + 1)
        out.append("CHECK (-c 1, -d all [-o all]; proc=-g N, threads=-t N -g 1, graph=-g N -G 1)")
        out.append("%-15s %-7s" % ("collective", "lib") + "".join("%-*s" % (w, v) for v in vars_))
        npass = ntot = 0
        for b in bins:
            for i, lib in enumerate(libs):
                line = "%-15s %-7s" % (b if i == 0 else "", lib)
                for v in vars_:
                    c = cells.get((b, v, lib), "-")
                    if c != "-" and not c.startswith("SKIP"):
                        ntot += 1
                        npass += c == "PASS"
                    line += "%-*s" % (w, c)
                out.append(line.rstrip())
        out.append("check: %d/%d PASS" % (npass, ntot))

    # ---- perf
    perfs = [r for r in rows if r["kind"] == "perf"]
    if perfs:
        out.append("")
        out.append("PERF (out-of-place; time in us, busbw in GB/s; ~ = nearest size; ratio = anyccl/nccl)")
        hdr = "%-15s %-9s %9s %9s %8s %8s %8s  %s" % ("collective", "lib", "t@8B", "t@64K",
                                                      "bw@32M", "bw@128M", "bw@512M", "status")
        out.append(hdr)
        seen = []
        for r in perfs:
            if (r["bin"], r["var"]) not in seen:
                seen.append((r["bin"], r["var"]))
        for b, var in seen:
            vals = {}
            group = sorted([r for r in perfs if r["bin"] == b and r["var"] == var],
                           key=lambda r: LIB_ORDER.index(r["lib"]) if r["lib"] in LIB_ORDER else 99)
            for i, r in enumerate(group):
                p = parse_log(r["log"]) if r["log"] not in ("-", "") else parse_log("/nonexistent")
                v, d = verdict(r["rc"], p)
                if v.startswith("FAIL(noresult)") and p["rows"]:
                    v = "PASS"
                st = "ok" if v == "PASS" else v + ((" " + d[:60]) if d else "")
                nfail[0] += st.startswith(("FAIL", "TIMEOUT"))
                picks = []
                for tgt, key in ((8, "time"), (64 << 10, "time"), (32 << 20, "busbw"),
                                 (128 << 20, "busbw"), (512 << 20, "busbw")):
                    row, exact = pick(p["rows"], tgt)
                    picks.append((row[key] if row else None, exact))
                vals[r["lib"]] = [x[0] for x in picks]
                name = b + ("/G" if var == "graph" else "")
                out.append("%-15s %-9s %9s %9s %8s %8s %8s  %s" % (
                    name if i == 0 else "", r["lib"],
                    *[cell(x, e, "%.1f" if k < 2 else "%.1f") for k, (x, e) in enumerate(picks)], st))
            if "nccl" in vals and "anyccl" in vals:
                ratio = []
                for a, n in zip(vals["anyccl"], vals["nccl"]):
                    ratio.append("%.2fx" % (a / n) if a is not None and n else "-")
                out.append("%-15s %-9s %9s %9s %8s %8s %8s" % ("", "ratio", *ratio))
    out[0] += " -- %s" % ("%d failure(s)" % nfail[0] if nfail[0] else "no failures")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
