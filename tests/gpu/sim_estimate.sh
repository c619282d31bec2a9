#!/bin/bash
# ncclGroupSimulateEnd on a GPU host: each rank's estimate (anyccl's model,
# nothing launched) beside the measured time of the same call, for anyccl's
# cuda backend and for NCCL (its own estimate), a thread per GPU.
#
#   OUT=dir bash tests/gpu/sim_estimate.sh
#
# ANYLIB: anyccl's libnccl (default: build-gpu, built here for sm_90 if
# missing); NCCLLIB: NCCL's (default: the nvidia.nccl wheel). Prints and
# writes $OUT/{anyccl,nccl}.txt: "rank coll bytes estimate_us measured_us"
# (all_reduce, all_gather, broadcast from rank 1, send/recv ring; 64 KB -
# 64 MB per rank; 20 timed runs each); the run also checks that the simulate
# left the poisoned output alone and that the communicator works after it.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
CUDA=${CUDA_HOME:-/usr/local/cuda}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ -z "${ANYLIB:-}" ]; then
  if ! ls build-gpu/libnccl.so* > /dev/null 2>&1; then
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DANYCCL_CUDA_ARCHS=90-real > "$OUT/cmake.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target nccl > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  fi
  ANYLIB=$ROOT/build-gpu
fi
NCCLLIB=${NCCLLIB:-$(python3 -c 'import nvidia.nccl,os; print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)}
cc -O2 -std=gnu11 -Iinclude -I"$CUDA/include" tests/sim/test_simest.c -o "$OUT/simest" -L"$ANYLIB" -l:libnccl.so.2 \
  -L"$CUDA/lib64" -lcudart -lpthread -lm || exit 1
export TEST_SIMEST_BIG=1 TEST_SIMEST_MEASURE=${ITERS:-20} NCCL_DEBUG=WARN
rc=0
for lib in anyccl nccl; do
  dir=$ANYLIB
  [ $lib = nccl ] && dir=$NCCLLIB
  [ -n "$dir" ] || { echo "$lib: no library (set NCCLLIB)"; continue; }
  LD_LIBRARY_PATH=$dir:$CUDA/lib64 timeout 300 "$OUT/simest" threads "$NGPU" > "$OUT/$lib.txt" 2>&1 || rc=1
  echo "== $lib ($dir): rank coll bytes estimate_us measured_us"
  grep -E '^0 |FAIL' "$OUT/$lib.txt"
done
exit $rc
