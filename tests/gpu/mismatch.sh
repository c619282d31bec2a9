#!/bin/bash
# coll_mismatch_gpu (tests/coll/coll_mismatch.c on the cuda backend) in every
# mode on one GPU host: ranks as threads, as processes, on two virtual hosts,
# and 3 and 4 processes (4 GPUs: pairs of modes side by side on GPUs 0,1
# and 2,3; 2 GPUs: one after the other, without the 3- and 4-rank modes).
#
#   BIN=build-gpu/tests/coll/coll_mismatch_gpu LIBDIR=build-gpu bash tests/gpu/mismatch.sh
set -u
BIN=${BIN:?set BIN to coll_mismatch_gpu}
LIBDIR=${LIBDIR:?set LIBDIR to the dir of anyccl\'s libnccl.so.2}
OUT=${OUT:-/tmp/mismatch-out}
export NCCL_NVLS_ENABLE=0 ANYCCL_OP_TIMEOUT=${ANYCCL_OP_TIMEOUT:-8} LD_LIBRARY_PATH=$LIBDIR
mkdir -p "$OUT"
run() { # name devices mode [VAR=value...]
  local name=$1 devs=$2 mode=$3; shift 3
  env CUDA_VISIBLE_DEVICES="$devs" "$@" timeout 300 "$BIN" "$mode" all >"$OUT/$name.log" 2>&1
}
# each mode also with ANYCCL_CUDA_SYMM=0 (-fifo): the FIFO paths, which the
# one-host LL and staged kernels take over up to 1 and 4 MB
if [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then
  run threads 0,1 threads & run procs 2,3 procs & wait
  run threads-fifo 0,1 threads ANYCCL_CUDA_SYMM=0 & run procs-fifo 2,3 procs ANYCCL_CUDA_SYMM=0 & wait
  run hosts 0,1 hosts & run procs3 2,3,0 procs MISMATCH_NRANKS=3 & wait
  run procs4 0,1,2,3 procs MISMATCH_NRANKS=4
  modes="threads procs threads-fifo procs-fifo hosts procs3 procs4"
else # 2 GPUs: one mode at a time
  run threads 0,1 threads; run procs 0,1 procs
  run threads-fifo 0,1 threads ANYCCL_CUDA_SYMM=0; run procs-fifo 0,1 procs ANYCCL_CUDA_SYMM=0
  run hosts 0,1 hosts
  modes="threads procs threads-fifo procs-fifo hosts"
fi
rc=0
for m in $modes; do
  tail -1 "$OUT/$m.log" | grep -q ", 0 failed" || rc=1
  echo "$m: $(tail -1 "$OUT/$m.log")"
  grep "^FAIL" "$OUT/$m.log" | head -12
done
exit $rc
