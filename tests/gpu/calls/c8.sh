#!/usr/bin/env bash
# session 6, call 1: (a) cut-major lib (prefix) vs old on the p2p deadlock case + p2p perf;
# (b) reduce / reduce_scatter: does a deeper pipeline (smaller slices, fewer channels) close the 32 MB gap?
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 timeout 60 $P/coll_gpu threads 4 2>&1 | tail -1
for lib in old new; do
  L=$NEW; [ $lib = old ] && L=$OLD
  t0=$SECONDS
  LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64 ANYCCL_CUDA_P2P_CHANNELS=64 ANYCCL_OP_TIMEOUT=8 timeout 30 \
    $NT/alltoall_perf -b 4G -e 4G -g 4 -n 1 -w 0 -c 1 2>&1 | grep -E "^ +[0-9]+|Out of bounds|WARN|error" | head -4
  echo "deadlock-case $lib rc=${PIPESTATUS[0]} $((SECONDS-t0))s"
done
for b in alltoall sendrecv; do ab $b "-b 256K -e 512M -f 8 -g 4 -n 10 -w 3" 1; done
export TIMEOUT=60
A="-b 16M -e 512M -f 2 -g 4 -n 20 -w 5"
for b in reduce reduce_scatter; do
  bash tests/gpu/sweep.sh $NT $REAL $b "$A" nccl | grep -v "#"
  bash tests/gpu/sweep.sh $NT $NEW $b "$A" base s128:ANYCCL_CUDA_SLICE=131072 s64:ANYCCL_CUDA_SLICE=65536 s32:ANYCCL_CUDA_SLICE=32768 \
    c32s128:"NCCL_MAX_NCHANNELS=32 ANYCCL_CUDA_SLICE=131072" c64s64:"NCCL_MAX_NCHANNELS=64 ANYCCL_CUDA_SLICE=65536" | grep -v "#"
done
bash tests/gpu/sweep.sh $NT $NEW broadcast "$A" base s64:ANYCCL_CUDA_SLICE=65536 | grep -v "#"
