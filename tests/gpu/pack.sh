#!/usr/bin/env bash
# tests/gpu/pack.sh -- build everything a GPU run needs on a machine WITHOUT a GPU
# (nvcc is enough), into one folder small enough to carry to a GPU host:
#
#   gpupack/prefix/lib/libnccl.so.2     anyccl, sm_90 only (ANYCCL_CUDA_ARCHS)
#   gpupack/gpu-work/nt-nccl/*_perf     nccl-tests, built once against the local NCCL
#   gpupack/gpu-work/nt-anyccl          -> nt-nccl (the binaries only see nccl.h's ABI;
#                                          LD_LIBRARY_PATH picks the library)
#   gpupack/coll_gpu, gpupack/enqueue_probe, gpupack/net_bench
#
#   tests/gpu/pack.sh [PACK_DIR]        (default: gpupack, git-ignored)
#
# Then on the GPU host (e.g. the device tool with carry=["gpupack","third_party/nccl-tests"]):
#   BUILD_DIR=gpupack PREFIX=gpupack/prefix SKIP_BUILD=1 MODE=check,perf bash tests/gpu/run.sh
#   bash tests/gpu/sweep.sh gpupack/gpu-work/nt-nccl gpupack/prefix/lib all_reduce "-b 32M -e 512M -f 4 -g 4" base
# Building here saves a GPU host the ~2 minutes of compiling each time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PACK=$(realpath -m "${1:-gpupack}")
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_TESTS_SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
[ -f "$NCCL_TESTS_SRC/src/common.cu" ] || { echo "no nccl-tests at $NCCL_TESTS_SRC (check out NVIDIA/nccl-tests v2.16.9 there)"; exit 2; }
[ -f "$CUDA_HOME/include/nccl.h" ] || { echo "no nccl.h in $CUDA_HOME/include (NCCL_HOME for the nccl-tests build)"; exit 2; }

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DANYCCL_CUDA_ARCHS=90-real > /dev/null
cmake --build "$BUILD" -j "$JOBS"
mkdir -p "$PACK/gpu-work"
cmake --install "$BUILD" --prefix "$PACK/prefix" > /dev/null
rm -f "$PACK"/prefix/lib/libanyccl-cpu*
cp "$BUILD/tests/coll/coll_gpu" "$PACK/"
cc -O2 -std=gnu11 -I"$CUDA_HOME/include" tests/gpu/enqueue_probe.c -o "$PACK/enqueue_probe" \
   -L"$CUDA_HOME/lib64" -lnccl -lcudart_static -lpthread -ldl -lrt
cc -O2 -std=gnu11 -I"$CUDA_HOME/include" tests/gpu/net_bench.c -o "$PACK/net_bench" \
   -L"$CUDA_HOME/lib64" -lnccl -lcudart_static -lpthread -ldl -lrt
if [ ! -x "$PACK/gpu-work/nt-nccl/all_reduce_perf" ]; then
  make -C "$NCCL_TESTS_SRC" BUILDDIR="$PACK/gpu-work/nt-nccl" NCCL_HOME="$CUDA_HOME" CUDA_HOME="$CUDA_HOME" \
       NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 -j "$JOBS" > "$PACK/nccl-tests-build.log" 2>&1
  find "$PACK/gpu-work/nt-nccl" -name '*.o' -delete
  strip "$PACK"/gpu-work/nt-nccl/*_perf
fi
# PACK_MPI=1: also nccl-tests with MPI=1 (gpu-work/nt-mpi, for mpirun on the GPU host; carry it
# with prefix/ only: the whole pack is then over the 64 MiB a device call carries)
if [ "${PACK_MPI:-0}" = 1 ] && [ ! -x "$PACK/gpu-work/nt-mpi/all_reduce_perf" ] && command -v mpicc > /dev/null; then
  MPI_HOME=${MPI_HOME:-$(dirname "$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')")}
  make -C "$NCCL_TESTS_SRC" BUILDDIR="$PACK/gpu-work/nt-mpi" MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$CUDA_HOME" \
       CUDA_HOME="$CUDA_HOME" NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 -j "$JOBS" > "$PACK/nccl-tests-mpi-build.log" 2>&1
  find "$PACK/gpu-work/nt-mpi" -name '*.o' -delete
  strip "$PACK"/gpu-work/nt-mpi/*_perf
fi
ln -sfn nt-nccl "$PACK/gpu-work/nt-anyccl"
du -sh "$PACK"
