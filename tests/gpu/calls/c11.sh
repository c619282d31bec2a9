#!/usr/bin/env bash
# session 6, call 4: sumVecs (lean U=8 plain-sum loop): micro per block, correctness, reductions at
# fixed and default channel counts vs NCCL
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 TIMEOUT=60
timeout 100 $P/coll_gpu threads 4 2>&1 | tail -1
timeout 100 $P/coll_gpu procs 4 2>&1 | tail -1
$P/micro/red
for b in reduce_scatter all_reduce reduce; do
  timeout 90 $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -c 1 -n 2 -w 1 -d all -o all 2>&1 | grep -E "Out of bounds|#wrong" | tail -1 | sed "s/^/check $b /"
done
A="-b 16M -e 512M -f 2 -g 4 -n 20 -w 5"
for b in reduce reduce_scatter all_reduce; do
  bash tests/gpu/sweep.sh $NT $REAL $b "$A" nccl | grep -v "#"
  bash tests/gpu/sweep.sh $NT $NEW $b "$A" base c16:NCCL_MAX_NCHANNELS=16 c32:NCCL_MAX_NCHANNELS=32 c64:NCCL_MAX_NCHANNELS=64 \
    cb256:ANYCCL_CUDA_CHANNEL_BYTES=262144 c32s128:"NCCL_MAX_NCHANNELS=32 ANYCCL_CUDA_SLICE=131072" \
    c32s256:"NCCL_MAX_NCHANNELS=32 ANYCCL_CUDA_SLICE=262144" | grep -v "#"
done
bash tests/gpu/sweep.sh $NT $NEW reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -d bfloat16" bf16 | grep -v "#"
bash tests/gpu/sweep.sh $NT $REAL reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -d bfloat16" nccl-bf16 | grep -v "#"
