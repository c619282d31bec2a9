#!/usr/bin/env bash
# session 7, call 6: the final library with one process per GPU (nccl-tests built with MPI=1, gpupack/gpu-work/nt-mpi):
# correctness across types and ops, small sizes against NCCL (no launch threads here: the kernel's own time),
# and a timeline of a small all_reduce
set -u
cd "$(dirname "$0")/../.." || exit 2
P=$PWD/gpupack
export NCCL_NVLS_ENABLE=0
REAL=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')/lib
OURS=$P/prefix/lib; NT=$P/gpu-work/nt-mpi
mkdir -p $OUT; exec > >(tee $OUT/log.txt) 2>&1
M="timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x ANYCCL_CUDA_TIMELINE"
chk() { grep -E "Out of bounds|FAILED|rror" | head -n 3 | tr '\n' ' '; echo; }
export LD_LIBRARY_PATH=$OURS:/usr/local/cuda/lib64
echo -n "check np4 all_reduce -d all -o all: "; $M -np 4 $NT/all_reduce_perf -b 8 -e 8M -f 16 -g 1 -c 1 -n 1 -w 1 -d all -o all 2>&1 | chk
for b in reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter hypercube; do echo -n "check np4 $b: "; $M -np 4 $NT/${b}_perf -b 8 -e 64M -f 8 -g 1 -c 1 -n 1 -w 1 2>&1 | chk; done
for b in all_reduce alltoall; do echo -n "check np4 G1 $b: "; $M -np 4 $NT/${b}_perf -b 8 -e 64M -f 8 -g 1 -c 1 -n 2 -w 1 -G 1 2>&1 | chk; done
for b in all_reduce sendrecv; do echo -n "check np2 $b: "; $M -np 2 $NT/${b}_perf -b 8 -e 64M -f 8 -g 1 -c 1 -n 1 -w 1 2>&1 | chk; done
# fp8 is back on the element path (opVecs without fp8): one process, 4 GPUs, every type and op
for b in all_reduce reduce_scatter reduce; do echo -n "check g4 $b -d all -o all: "; timeout 120 $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -c 1 -n 1 -w 1 -d all -o all 2>&1 | chk; done
echo "=== small sizes, a process per GPU, time us (NCCL then anyccl)"
for np in 4 2; do for b in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do for lib in REAL OURS; do
  LD_LIBRARY_PATH=${!lib}:/usr/local/cuda/lib64 $M -np $np $NT/${b}_perf -b 8 -e 64K -f 8 -g 1 -n 100 -w 10 2>&1 |
    awk -v t="np$np $b $lib" '$1 ~ /^[0-9]+$/ && NF >= 12 {s = s " " $6} END {print "small", t, s}'
done; done; done
echo "=== timeline, all_reduce 8 B, np 4"
rm -f /tmp/tl.*; ANYCCL_CUDA_TIMELINE=/tmp/tl $M -np 4 $NT/all_reduce_perf -b 8 -e 8 -g 1 -n 100 -w 5 > /dev/null 2>&1
for r in 0 3; do awk -f $P/calls/tlstat.awk /tmp/tl.$r; done
grep "^small" $OUT/log.txt
grep "^check" $OUT/log.txt
