#!/bin/bash
# The inference-size regime on one GPU host, NCCL and anyccl back to back:
# mixed collectives back to back, checked (tests/gpu/llmix.c); every
# collective of nccl-tests from 8 B to 16 MB, checked (-c 1), one
# thread driving all GPUs (-g N) and a thread per GPU (-t N), each with and
# without CUDA graphs (-G 10); then PyTorch's ProcessGroupNCCL (a process per
# GPU), bf16 all_reduce eager and captured in a CUDA graph (the
# tensor-parallel loop). Prints one table last: time in us, NCCL / anyccl,
# and the ratio anyccl / NCCL.
#
#   NT=<nccl-tests build dir> ANYCCL_LIB=<dir of anyccl's libnccl.so.2> \
#     [NCCL_LIB=<dir of NCCL's>] [NGPU=2] [OUT=gpu-out/inference] bash tests/gpu/inference.sh
#
# NT_MPI=<nccl-tests built with MPI=1> adds a process per GPU (mpirun -np
# NGPU, -g 1), eager and -G 10, for the binaries found there (MPI_COLLS,
# default all_reduce), in the table's columns p and P.
#
# NCCL_LIB defaults to the nvidia-nccl Python package. Exit status 0 when
# every run passed its check (#wrong 0, out-of-bounds OK) on both libraries.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NT=${NT:?set NT to the nccl-tests build directory}
ANYCCL_LIB=${ANYCCL_LIB:?set ANYCCL_LIB to the directory of anyccl\'s libnccl.so.2}
NCCL_LIB=${NCCL_LIB:-$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)}
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
OUT=${OUT:-$ROOT/gpu-out/inference}
COLLS=${COLLS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}
SIZES=${SIZES:--b 8 -e 16M -f 4}
ITERS=${ITERS:--n 100 -w 10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mkdir -p "$OUT"
rc=0
# Mixed collectives back to back on NGPU, NGPU-1 ... 2 GPUs (tests/gpu/llmix.c):
# the one-host LL kernels reuse their line areas launch after launch; every
# result is checked
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if cc -O2 -I"$ROOT/include" -I"$CUDA_HOME/include" "$ROOT/tests/gpu/llmix.c" -o "$OUT/llmix" -L"$ANYCCL_LIB" -l:libnccl.so.2 \
  -L"$CUDA_HOME/lib64" -lcudart_static -lpthread -ldl -lrt >"$OUT/llmix-build.log" 2>&1; then
  for g in $(seq "$NGPU" -1 2); do
    LD_LIBRARY_PATH=$ANYCCL_LIB timeout 300 "$OUT/llmix" "$g" 40 8 1 >"$OUT/llmix-$g.log" 2>&1 ||
      { echo "FAIL: llmix on $g GPUs (see $OUT/llmix-$g.log)"; rc=1; }
  done
else
  echo "FAIL: llmix build (see $OUT/llmix-build.log)"
  rc=1
fi
# a run's log: its check must pass (#wrong 0, out of bounds OK)
check() { # name log
  if ! grep -q "Out of bounds values : 0 OK" "$2" || awk '/^ +[0-9]+ +[0-9]+ /{ if ($9 != 0 && $9 != "N/A") bad=1 } END{exit !bad}' "$2"; then
    echo "FAIL: $1 (see $2)"
    rc=1
  fi
}
for c in $COLLS; do
  for m in g G; do # g: -g N, one thread; t: -t N, a thread per GPU; capitals: under CUDA graphs
    for lay in g t; do
      X="-g $NGPU"; [ $lay = t ] && X="-t $NGPU -g 1"
      [ $m = G ] && X="$X -G 10"
      for lib in nccl anyccl; do
        L=$ANYCCL_LIB; [ $lib = nccl ] && L=$NCCL_LIB
        log="$OUT/$c-$lay$m-$lib.log"
        LD_LIBRARY_PATH=$L timeout 120 "$NT/${c}_perf" $SIZES $ITERS -c 1 $X >"$log" 2>&1
        check "$c $lay$m $lib" "$log"
      done
    done
  done
done
# nccl-tests with a process per GPU (mpirun), when built with MPI=1
MPI_COLLS=${MPI_COLLS:-all_reduce}
ROOTFLAG=; [ "$(id -u)" = 0 ] && ROOTFLAG=--allow-run-as-root
for c in $MPI_COLLS; do
  [ -n "${NT_MPI:-}" ] && [ -x "$NT_MPI/${c}_perf" ] || continue
  for m in p P; do
    X="-g 1"; [ $m = P ] && X="-g 1 -G 10"
    for lib in nccl anyccl; do
      L=$ANYCCL_LIB; [ $lib = nccl ] && L=$NCCL_LIB
      log="$OUT/$c-$m-$lib.log"
      LD_LIBRARY_PATH=$L timeout 120 mpirun -np "$NGPU" $ROOTFLAG --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
        "$NT_MPI/${c}_perf" $SIZES $ITERS -c 1 $X >"$log" 2>&1
      check "$c $m $lib" "$log"
    done
  done
done
# PyTorch: a process per GPU, bf16 all_reduce (timings only)
for lib in nccl anyccl; do
  P=""; [ $lib = anyccl ] && P=$ANYCCL_LIB/libnccl.so.2
  LD_PRELOAD=$P TORCH_CHECK_ONLY_TIMINGS=1 TORCH_CHECK_REPLAYS=1 timeout 300 python3 "$ROOT/tests/gpu/torch_check.py" \
    --nproc "$NGPU" --out "$OUT/torch-$lib.json" --port $((29620 + ${#lib})) >"$OUT/torch-$lib.log" 2>&1 || rc=1
done
# rows PREFIX...: a column per PREFIX (PREFIX-nccl.log beside PREFIX-anyccl.log),
# a row per size: NCCL's time / anyccl's (their ratio)
rows() {
  local k=0 files=()
  for p in "$@"; do
    awk '/^ +[0-9]+ +[0-9]+ /{print $1, $6}' "$p-nccl.log" >"$OUT/.n.$k"
    awk '/^ +[0-9]+ +[0-9]+ /{print $6}' "$p-anyccl.log" >"$OUT/.a.$k"
    files+=("$OUT/.n.$k" "$OUT/.a.$k")
    k=$((k + 1))
  done
  paste -d' ' "${files[@]}" |
    awk -v cols=$k '{printf "%10s", $1;
          for (k = 0; k < cols; k++) { n = $(2 + 3 * k); a = $(3 + 3 * k);
            if (n + 0 > 0) printf " %7.2f / %6.2f (%4.2f)", n, a, a / n; else printf " %22s", "-" }
          printf "\n" }'
}
{
  tail -qn 1 "$OUT"/llmix-*.log 2>/dev/null
  echo "nccl-tests, $NGPU GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)): time in us, NCCL / anyccl (ratio)"
  echo "g: -g $NGPU (one thread), t: -t $NGPU (a thread per GPU); G, T: the same under CUDA graphs (-G 10)"
  for c in $COLLS; do
    echo "== $c"
    printf "%10s" bytes
    for v in g t G T; do printf " %22s" "$v"; done
    echo
    cols=()
    for v in g t G T; do
      lay=$(echo $v | tr GT gt); m=g; [ $v = G ] || [ $v = T ] && m=G
      cols+=("$OUT/$c-$lay$m")
    done
    rows "${cols[@]}"
  done
  for c in $MPI_COLLS; do
    [ -f "$OUT/$c-p-nccl.log" ] || continue
    echo "== $c, a process per GPU (mpirun -np $NGPU): p eager, P under CUDA graphs (-G 10)"
    printf "%10s %22s %22s\n" bytes p P
    rows "$OUT/$c-p" "$OUT/$c-P"
  done
  rm -f "$OUT"/.n.* "$OUT"/.a.*
  echo "== PyTorch ProcessGroupNCCL, $NGPU processes, bf16 all_reduce: time in us, NCCL / anyccl (ratio)"
  python3 - "$OUT/torch-nccl.json" "$OUT/torch-anyccl.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(f))["timings_us"] for f in sys.argv[1:3])
except Exception as e:
    print("  missing result:", e); sys.exit(0)
print(f"{'bytes':>10s} {'eager':>22s} {'graph':>22s}")
for k in a:
    (ea, ga), (eb, gb) = a[k], b.get(k, (float("nan"),) * 2)
    print(f"{int(k):>10d} {ea:7.2f} / {eb:6.2f} ({eb / ea:4.2f}) {ga:7.2f} / {gb:6.2f} ({gb / ga:4.2f})")
PY
} | tee "$OUT/table.txt"
exit $rc
