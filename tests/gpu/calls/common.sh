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
# tables [deadline4] [deadline2]: run.sh's perf tables, 4 GPUs with graphs and 2 GPUs, into $OUT/g4 and $OUT/g2
tables() {
  local d4=${1:-230} d2=${2:-150}
  BUILD_DIR=gpupack PREFIX=gpupack/prefix SKIP_BUILD=1 MODE=perf PERF_SIZES="-b 8 -e 512M -f 4" KEEP_RAW=0 \
    OUT=$OUT/g4 PERF_GRAPH=1 DEADLINE=$d4 bash tests/gpu/run.sh > $OUT/g4.txt 2>&1; echo "g4 rc=$?"
  BUILD_DIR=gpupack PREFIX=gpupack/prefix SKIP_BUILD=1 MODE=perf PERF_SIZES="-b 8 -e 512M -f 4" KEEP_RAW=0 \
    CUDA_VISIBLE_DEVICES=0,1 NGPU=2 OUT=$OUT/g2 DEADLINE=$d2 bash tests/gpu/run.sh > $OUT/g2.txt 2>&1; echo "g2 rc=$?"
}
# tables_print: their summaries
tables_print() { for g in g4 g2; do echo "=== $g"; sed -n '/^PERF/,$p' $OUT/$g/summary.txt; done; }
