#!/usr/bin/env bash
# session 7, call 4: does a graph slow kernels with large (32 KB) parameters? the micro, then our ops with
# fewer lanes (a smaller blob), with and without -G
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$OURS:/usr/local/cuda/lib64 TIMEOUT=60
$P/micro/graphparams
for G in 0 1; do
  $S $NT $OURS all_reduce "-b 128M -e 128M -g 4 -n 20 -w 5 -G $G" ar-G$G ar32-G$G:NCCL_MAX_NCHANNELS=32 ar24-G$G:NCCL_MAX_NCHANNELS=24 | grep -v "#"
  $S $NT $OURS alltoall "-b 32M -e 32M -g 4 -n 20 -w 5 -G $G" a2a-G$G a2a8-G$G:ANYCCL_CUDA_P2P_CHANNELS=8 a2a4-G$G:ANYCCL_CUDA_P2P_CHANNELS=4 | grep -v "#"
  $S $NT $OURS all_gather "-b 128M -e 128M -g 4 -n 20 -w 5 -G $G" ag-G$G ag32-G$G:NCCL_MAX_NCHANNELS=32 | grep -v "#"
done
awk '$1=="sweep" {print $3, $4, $5, $6}' $OUT/log.txt
