#!/usr/bin/env bash
# tests/gpu/sass_guard.sh -- before a GPU run: do nccl-tests' device-API
# kernels, built against anyccl's headers, keep as many peer loads in flight
# as the same kernels built against NVIDIA's? No GPU needed: it reads the
# machine code (sass_compare.sh, sass_loops.py).
#
#   sass_guard.sh <nccl-tests dir, NVIDIA's headers> <nccl-tests dir, anyccl's headers>
#
# The directories hold all_reduce_perf and alltoall_perf (tests/gpu/pack.sh
# with PACK_DEVAPI=1 leaves them in gpupack/session/nt and nt-devapi). For
# each kernel of -D 1 and -D 2 (float) and each loop size both builds have
# (loads a pass), the shortest critical path in load latencies, NVIDIA's
# against anyccl's; WORSE where anyccl's exceeds NVIDIA's by more than a
# quarter of a latency, or where a loop of anyccl's waits longer per load
# than NVIDIA's slowest. ptxas decides these from the whole kernel, so a
# change to the barrier's code can move the data loop's: on 4 H100s a 4-peer
# loop at 4 latencies against 1 made all_reduce -D 1 take 2x NCCL's time at
# 2 MB. Exit status 1 when a loop is worse. Needs cuobjdump (CUOBJDUMP=...;
# `pip install nvidia-cuda-cuobjdump` has one).
set -u
[ $# -eq 2 ] || { sed -n '2,19p' "$0"; exit 2; }
NV=$1 ANY=$2
HERE=$(cd "$(dirname "$0")" && pwd)
export CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)}
[ -x "$CUOBJDUMP" ] || { echo "sass_guard: no cuobjdump (set CUOBJDUMP)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
worse=0
printf "%-36s %6s %14s %14s\n" kernel loads NVIDIA anyccl
for k in all_reduce:allReduceLsaKernelIfE all_reduce:allReduceLsaVectorizedKernelIfE \
         alltoall:NvlAlltoAllKernelIfE alltoall:NvlAlltoAllKernelOptimizedIfE; do
  bin=${k%%:*} pat=${k#*:}
  OUT=$tmp/$pat bash "$HERE/sass_compare.sh" "$NV/${bin}_perf" "$ANY/${bin}_perf" "_Z[0-9]+$pat" >"$tmp/$pat.txt" 2>&1 ||
    { echo "sass_guard: $pat: $(tail -1 "$tmp/$pat.txt")"; worse=1; continue; }
  python3 - "$tmp/$pat.txt" "$pat" <<'PY' || worse=1
import re, sys
side, paths = None, {"A": {}, "B": {}}
for l in open(sys.argv[1]):
    m = re.search(r"/([AB])\.sass: \d+ instructions", l)
    if m:
        side = m.group(1)
        continue
    m = re.search(r"(\d+) loads, critical path ([\d.]+)", l)
    if m and side and int(m.group(1)) > 1:
        paths[side].setdefault(int(m.group(1)), []).append(float(m.group(2)))
# per loop size, the best loop of each build; and no loop of anyccl's slower
# per load than NVIDIA's slowest (an unrolled copy of a loop NVIDIA's build
# keeps short has more loads, not a longer path per load)
rate = lambda side: max((p / k for k, v in paths[side].items() for p in v), default=0.0)
bad = False
for k in sorted(set(paths["A"]) & set(paths["B"])):
    a, b = min(paths["A"][k]), min(paths["B"][k])
    verdict = "WORSE" if b > a + 0.25 else ""
    bad |= verdict != ""
    print(f"{sys.argv[2][:36]:36} {k:6} {a:14.2f} {b:14.2f} {verdict}")
if rate("B") > rate("A") + 0.05:
    print(f"{sys.argv[2][:36]:36} {'/load':>6} {rate('A'):14.2f} {rate('B'):14.2f} WORSE")
    bad = True
sys.exit(1 if bad else 0)
PY
done
[ $worse = 0 ] && echo "sass_guard: no loop worse than NVIDIA's" || echo "sass_guard: WORSE loops above"
exit $worse
