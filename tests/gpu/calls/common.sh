# Sourced by the device-call scripts (from gpupack/calls/): the repository root, the pack's
# paths, NCCL's library, the log under $OUT, and the interleaved A/B helper.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
P=$PWD/gpupack
export NCCL_NVLS_ENABLE=0 TIMEOUT=60
NEW=$P/prefix/lib; OLD=$P/old; NT=$P/gpu-work/nt-nccl; OURS=$NEW; S="bash tests/gpu/sweep.sh"
REAL=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')/lib
mkdir -p "$OUT"; exec > >(tee "$OUT/log.txt") 2>&1; ln -sfn nt-nccl gpupack/gpu-work/nt-anyccl
export LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64
# ab <bin> "<args>" [reps]: old and new library, interleaved; lines "ab <rep> <bin> <lib> <bytes> <us> <busbw>"
ab() {
  local b=$1 args=$2 reps=${3:-2} rep lib L
  for rep in $(seq "$reps"); do
    for lib in old new; do
      L=$NEW; [ $lib = old ] && L=$OLD
      LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64 timeout 60 "$NT/${b}_perf" $args 2>&1 |
        awk -v l=$lib -v b="$b" -v r="$rep" '$1 ~ /^[0-9]+$/ && NF>=12 {print "ab", r, b, l, $1, $6, $8}'
    done
  done
}
