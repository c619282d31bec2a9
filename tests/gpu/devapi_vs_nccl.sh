#!/bin/bash
# nccl-tests' device-API kernels (-R 2 -D 1 / -D 2: the program's own kernels
# over LSA pointers and barriers) built against each library's headers and
# run on that library, side by side on the same GPUs, with -c 1 checks.
# Prints one table last: time in us per size, NCCL / anyccl (min-max over
# REPS runs), and the ratio of the medians.
#
#   NT=<nccl-tests built against anyccl's headers (tests/gpu/devapi.sh)> \
#   NT_NV=<the same nccl-tests built against NVIDIA's headers> \
#   ANYCCL_LIB=<dir of anyccl's libnccl.so.2> [NCCL_LIB=<dir of NCCL's>] \
#   [NGPUS="4 2"] [DS="1 2"] [REPS=2] [GRAPH="-G 10"] bash tests/gpu/devapi_vs_nccl.sh
#
# NT_NV: `make -C nccl-tests/src NCCL_HOME=<NVIDIA's NCCL>` (the nvidia-nccl
# wheel's directory has include/ and lib/), BUILDDIR apart from NT's. Runs
# use the first N GPUs (CUDA_VISIBLE_DEVICES) for each N in NGPUS.
# NCCL_LIB defaults to the nvidia-nccl Python package. Exit status 1 when a
# run fails or reports a wrong value.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NT=${NT:?set NT to nccl-tests built against anyccl\'s headers}
NT_NV=${NT_NV:?set NT_NV to nccl-tests built against NVIDIA\'s headers}
ANYCCL_LIB=${ANYCCL_LIB:?set ANYCCL_LIB to the directory of anyccl\'s libnccl.so.2}
NCCL_LIB=${NCCL_LIB:-$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)}
NGPUS=${NGPUS:-"4 2"}
DS=${DS:-"1 2"}
REPS=${REPS:-2}
GRAPH=${GRAPH--G 10}
OUT=${OUT:-$ROOT/gpu-out/devapi-vs-nccl}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
raw=$OUT/sweep.txt
: >"$raw"
have=$(nvidia-smi -L 2>/dev/null | wc -l)
for g in $NGPUS; do
  [ "$g" -le "$have" ] || { echo "skip: $g GPUs (this host has $have)"; continue; }
  export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1)))
  for rep in $(seq "$REPS"); do
    for d in $DS; do
      for c in all_reduce alltoall; do
        b=8; [ $c = alltoall ] && b=512
        args="-b $b -e 8M -f 8 -R 2 -D $d -n 40 -w 5 -c 1 -g $g $GRAPH"
        bash "$ROOT/tests/gpu/sweep.sh" "$NT_NV" "$NCCL_LIB" $c "$args" "nccl.g$g.D$d" >>"$raw" 2>&1
        bash "$ROOT/tests/gpu/sweep.sh" "$NT" "$ANYCCL_LIB" $c "$args" "anyccl.g$g.D$d" >>"$raw" 2>&1
      done
    done
  done
done
unset CUDA_VISIBLE_DEVICES
[ -s "$raw" ] || { echo "devapi_vs_nccl: nothing ran (GPUs: $have, NGPUS: $NGPUS)"; exit 2; }
python3 - "$raw" <<'PY'
import sys, collections, statistics
t = collections.defaultdict(lambda: collections.defaultdict(list))
bad = []
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) >= 4 and p[0] == "sweep" and (p[3] == "FAILED" or p[3] == "missing"):
        bad.append(l.strip())
    if "Out of bounds values" in l and "0 OK" not in l:
        bad.append(l.strip())
    if len(p) == 7 and p[0] == "sweep" and p[3].isdigit():
        lib, g, d = p[2].split(".")
        t[(p[1], g, d)][(int(p[3]), lib)].append(float(p[4]))
        if p[6] not in ("0", "N/A"):
            bad.append(f"{p[1]} {p[2]} {p[3]} B: #wrong {p[6]}")
def cell(v):
    return "-" if not v else (f"{min(v):.2f}" if len(v) == 1 else f"{min(v):.2f}-{max(v):.2f}")
for (c, g, d), rows in sorted(t.items()):
    print(f"== {c} -R 2 -{d[0]} {d[1:]} on {g[1:]} GPUs: time in us, NCCL / anyccl, anyccl/NCCL (medians)")
    for s in sorted({s for s, _ in rows}):
        n, a = rows.get((s, "nccl"), []), rows.get((s, "anyccl"), [])
        r = f"{statistics.median(a) / statistics.median(n):.2f}" if n and a else "-"
        print(f"{s:>9} {cell(n):>13} {cell(a):>13} {r:>6}")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
