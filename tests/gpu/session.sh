#!/bin/bash
# tests/gpu/session.sh -- on a GPU host, the standard checks and comparisons
# of the one-host kernels and the device API, from what tests/gpu/pack.sh
# built elsewhere (PACK_DEVAPI=1: gpupack/session.tgz), so that a lent GPU
# host compiles nothing:
#
#   STEPS="llmix devapi dvn bidir" bash tests/gpu/session.sh [session.tgz]
#   STEPS=matrix NGPU=4 bash tests/gpu/session.sh             (about 4 minutes on 4 H100s)
#
# Steps (each under a timeout; logs and tables under $OUT, default gpu-out/session):
#   llmix   tests/gpu/llmix.c on N, N-1 ... 2 GPUs: random back-to-back mixes
#           of the one-host kernels, every element checked (and to 16 MB with
#           shifted buffers: LLMIX_LARGE, LLMIX_SHIFT)
#   coll    anyccl's differential suite (tests/coll/coll_test.c, every collective,
#           type and op against a host reference, grouped and on several
#           streams): threads and procs on NGPU GPUs, threads on 2; coll_mismatch_gpu
#           (ranks that call different operations) on 2 and NGPU
#   devapi  tests/gpu/devapi.sh with the packed builds: nccl-tests' -R 2 -D 1..4
#           runs with -c 1 on 2 and 4 GPUs, devapi_procs, import torch,
#           torch.distributed
#   dvn     tests/gpu/devapi_vs_nccl.sh: the -D kernels against NCCL's
#   bidir   examples/bidir_port_channel on GPUs 0 and 1, threads and processes,
#           and tests/gpu/port_order.cu (orderings, each signal path counted once)
#   gin     tests/gpu/gin_hosts.sh on GPUs 0 and 1 as 2 virtual hosts: GIN and port
#           channels through the proxies (nccl-tests -D 3/-D 4 under mpirun,
#           devapi_procs hosts, the example -m hosts)
#   matrix  tests/gpu/inference.sh on NGPU GPUs (every collective 16 B-16 MB,
#           -g/-t, eager and graphs, mpirun when packed, PyTorch)
# Prints one summary last (PASS/FAIL per step, the tables' tails). Exit status
# 1 when a step failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TGZ=${1:-$ROOT/gpupack/session.tgz}
OUT=${OUT:-$ROOT/gpu-out/session}
STEPS=${STEPS:-llmix devapi dvn bidir}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mkdir -p "$OUT"
S=$OUT/pack
if [ ! -d "$S/session" ]; then
  [ -f "$TGZ" ] || { echo "session.sh: no $TGZ (tests/gpu/pack.sh with PACK_DEVAPI=1 makes it)"; exit 2; }
  mkdir -p "$S" && tar xzf "$TGZ" -C "$S" || exit 2
fi
P=$S/session
L=$P/prefix/lib
SUM=$OUT/summary.txt
: >"$SUM"
fails=0
step() { # name status detail
  printf '%-10s %s %s\n' "$1" "$2" "${3:-}" >>"$SUM"
  [ "$2" = PASS ] || fails=$((fails + 1))
}
tabled() { # name log command...: run it into log, PASS or FAIL by its exit status
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then step "$name" PASS "(table: $log)"; else step "$name" FAIL "rc $rc (see $log)"; fi
}
for st in $STEPS; do
  case $st in
    llmix)
      ok=1
      for g in $(seq "$NGPU" -1 2); do
        LD_LIBRARY_PATH=$L timeout 150 "$P/llmix" "$g" 40 8 $((g + 11)) >"$OUT/llmix-$g.log" 2>&1 || ok=0
        tail -1 "$OUT/llmix-$g.log" >>"$OUT/llmix.txt"
        # to 16 MB, ranks' buffers shifted by 0 or 4 bytes at random (the in-place kernels' mixed offers)
        LLMIX_LARGE=1 LLMIX_SHIFT=1 LD_LIBRARY_PATH=$L timeout 150 "$P/llmix" "$g" 20 8 $((g + 31)) \
          >"$OUT/llmix-$g-large.log" 2>&1 || ok=0
        tail -1 "$OUT/llmix-$g-large.log" >>"$OUT/llmix.txt"
      done
      [ $ok = 1 ] && step llmix PASS "$(tr '\n' ';' <"$OUT/llmix.txt")" || step llmix FAIL "(see $OUT/llmix-*.log)"
      ;;
    coll)
      ok=1
      : >"$OUT/coll.txt"
      modes=("threads $NGPU" "procs $NGPU")
      [ "$NGPU" -gt 2 ] && modes+=("threads 2")
      for m in "${modes[@]}"; do
        LD_LIBRARY_PATH=$L timeout 150 "$P/coll_gpu" $m >"$OUT/coll-${m// /}.log" 2>&1 || ok=0
        tail -1 "$OUT/coll-${m// /}.log" >>"$OUT/coll.txt"
      done
      # ranks that disagree (every case must end in ncclInvalidUsage, bounded, no stray write)
      if [ -x "$P/coll_mismatch_gpu" ]; then
        mm=("threads 2" "procs 2")
        [ "$NGPU" -gt 2 ] && mm+=("threads $NGPU")
        for m in "${mm[@]}"; do
          MISMATCH_NRANKS=${m#* } LD_LIBRARY_PATH=$L timeout 300 "$P/coll_mismatch_gpu" ${m% *} all \
            >"$OUT/mismatch-${m// /}.log" 2>&1 || ok=0
          tail -1 "$OUT/mismatch-${m// /}.log" >>"$OUT/coll.txt"
        done
      fi
      [ $ok = 1 ] && step coll PASS "$(tr '\n' ';' <"$OUT/coll.txt")" || step coll FAIL "$(tr '\n' ';' <"$OUT/coll.txt")"
      ;;
    devapi)
      PREFIX=$P/prefix NT_BUILD=$P/nt-devapi SKIP_BUILD=1 SKIP_NT_BUILD=1 OUT=$OUT/devapi RUN_TIMEOUT=60 MAXBYTES=8M \
        timeout 300 bash "$ROOT/tests/gpu/devapi.sh" >/dev/null 2>&1
      rc=$?
      n=$(grep -c ' PASS' "$OUT/devapi/devapi-summary.txt" 2>/dev/null)
      [ $rc = 0 ] && step devapi PASS "($n checks)" ||
        step devapi FAIL "rc $rc: $(grep -v ' PASS' "$OUT/devapi/devapi-summary.txt" 2>/dev/null | head -3 | tr '\n' ';')"
      ;;
    dvn)
      tabled dvn "$OUT/dvn.txt" env NT=$P/nt-devapi NT_NV=$P/nt ANYCCL_LIB=$L OUT=$OUT/dvn \
        timeout 300 bash "$ROOT/tests/gpu/devapi_vs_nccl.sh"
      ;;
    bidir)
      ok=1
      for m in threads procs; do
        LD_LIBRARY_PATH=$L CUDA_VISIBLE_DEVICES=0,1 timeout 90 "$P/bidir_port_channel" -m $m >"$OUT/bidir-$m.log" 2>&1 || ok=0
        grep -q Succeed "$OUT/bidir-$m.log" || ok=0
        # the three signal paths of port channels, each counted once
        for e in ANYCCL_PORT_STREAM_SIGNALS=1 ANYCCL_PORT_STREAM_SIGNALS=0 ANYCCL_PORT_HOST_SIGNALS=0; do
          [ -x "$P/port_order" ] || break
          env $e ANYCCL_PORT_TIMEOUT=10 LD_LIBRARY_PATH=$L CUDA_VISIBLE_DEVICES=0,1 timeout 40 "$P/port_order" -m $m -r 24 \
            >>"$OUT/port-order.log" 2>&1 || { ok=0; echo "(that was $e)" >>"$OUT/port-order.log"; }
        done
      done
      [ $ok = 1 ] && step bidir PASS || step bidir FAIL "(see $OUT/bidir-*.log)"
      ;;
    gin)
      [ -x "$P/nt-devapi-mpi/alltoall_perf" ] || { step gin FAIL "no nt-devapi-mpi in the pack (pack.sh needs mpicc)"; continue; }
      tabled gin "$OUT/gin.txt" env CUDA_VISIBLE_DEVICES=0,1 NT=$P/nt-devapi-mpi LIBDIR=$L \
        PROCS_BIN=$P/nt-devapi/devapi_procs BIDIR_BIN=$P/bidir_port_channel OUT=$OUT/gin \
        timeout 400 bash "$ROOT/tests/gpu/gin_hosts.sh"
      ;;
    matrix)
      mpi=; [ -x "$P/nt-mpi/all_reduce_perf" ] && mpi=$P/nt-mpi
      tabled matrix "$OUT/matrix.txt" env NT=$P/nt NT_MPI=$mpi MPI_COLLS="all_reduce alltoall" ANYCCL_LIB=$L \
        NGPU=$NGPU SIZES="-b 16 -e 16M -f 4" ITERS="-n 40 -w 5" OUT=$OUT/matrix \
        timeout 560 bash "$ROOT/tests/gpu/inference.sh"
      ;;
    *) step "$st" FAIL "unknown step (llmix devapi dvn bidir gin matrix)" ;;
  esac
done
for st in $STEPS; do
  case $st in
    dvn) tail -60 "$OUT/dvn.txt" 2>/dev/null ;;
    gin) tail -30 "$OUT/gin.txt" 2>/dev/null ;;
    bidir) grep -hE "Bidir|reference" "$OUT"/bidir-*.log 2>/dev/null ;;
    matrix) tail -100 "$OUT/matrix.txt" 2>/dev/null ;;
  esac
done
echo "== session: $NGPU GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
cat "$SUM"
[ $fails = 0 ]
