#!/usr/bin/env bash
# session 6, call 2: per-block throughput (micro/bw), NCCL vs anyccl at fixed channel counts,
# NCCL's own channel choice, cut-major A/B interleaved, p2p channel counts.
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TIMEOUT=60
nvidia-smi topo -m | head -6
$P/micro/bw
A="-b 32M -e 512M -f 16 -g 4 -n 20 -w 5"
for b in reduce all_gather reduce_scatter; do
  bash tests/gpu/sweep.sh $NT $REAL $b "$A" nccl nc8:"NCCL_MIN_NCHANNELS=8 NCCL_MAX_NCHANNELS=8" nc16:"NCCL_MIN_NCHANNELS=16 NCCL_MAX_NCHANNELS=16" nc32:"NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=32" | grep -v "#"
  bash tests/gpu/sweep.sh $NT $NEW $b "$A" base c8:NCCL_MAX_NCHANNELS=8 c16:NCCL_MAX_NCHANNELS=16 c32:NCCL_MAX_NCHANNELS=32 | grep -v "#"
done
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV LD_LIBRARY_PATH=$REAL $NT/reduce_perf -b 32M -e 32M -g 4 -n 2 -w 1 2>&1 | grep -iE "channel|nthreads|algo|proto|tuner" | grep -v "Channel [0-9][0-9]/[0-9]*/.*->" | head -30
for b in alltoall sendrecv; do ab $b "-b 256K -e 16M -f 8 -g 4 -n 50 -w 5"; done
for b in alltoall sendrecv; do
  bash tests/gpu/sweep.sh $NT $NEW $b "-b 64K -e 16M -f 4 -g 4 -n 50 -w 5" k32 k16:ANYCCL_CUDA_P2P_CHANNELS=16 k8:ANYCCL_CUDA_P2P_CHANNELS=8 | grep -v "#"
done
