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
#   PACK_DEVAPI=1 NCCL_TESTS_SRC=<nccl-tests v2.19.6> tests/gpu/pack.sh
#                                       also PACK_DIR/session.tgz (below), for
#                                       tests/gpu/session.sh on a GPU host
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
cp "$BUILD/tests/coll/coll_gpu" "$BUILD/tests/coll/coll_mismatch_gpu" "$PACK/"
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
# PACK_DEVAPI=1 (nccl-tests 2.19 or later in NCCL_TESTS_SRC): what a session of
# device-API and inference-regime runs needs, built here, in one tarball:
#   gpupack/session/prefix      anyccl (lib, headers), as above
#   gpupack/session/nt          nccl-tests against NVIDIA's headers (every *_perf:
#                               the NCCL side of devapi_vs_nccl.sh, and both
#                               libraries' runs of inference.sh)
#   gpupack/session/nt-devapi   all_reduce_perf, alltoall_perf, devapi_procs against
#                               anyccl's headers, NVIDIA's hidden (devapi.sh's build)
#   gpupack/session/nt-mpi      all_reduce_perf and alltoall_perf with MPI=1 (when mpicc is here)
#   gpupack/session/nt-devapi-mpi  the same against anyccl's headers (tests/gpu/gin_hosts.sh)
#   gpupack/session/llmix, bidir_port_channel (the example built with nvcc: GPU kernels), port_order,
#                               coll_gpu (anyccl's differential suite, tests/coll/coll_test.c),
#                               coll_mismatch_gpu (tests/coll/coll_mismatch.c: ranks that disagree)
#   gpupack/session.tgz         all of it (carry it; tests/gpu/session.sh unpacks it)
#   gpupack/sass-guard.txt      tests/gpu/sass_guard.sh: nt-devapi's device-API kernels
#                               against nt's, loop by loop (printed when worse;
#                               CUOBJDUMP names a cuobjdump where the toolkit has none)
if [ "${PACK_DEVAPI:-0}" = 1 ]; then
  grep -q nccl_device "$NCCL_TESTS_SRC/src/all_reduce.cu" ||
    { echo "PACK_DEVAPI: $NCCL_TESTS_SRC is older than nccl-tests 2.17 (no device-API kernels)"; exit 2; }
  S=$PACK/session
  GEN=-gencode=arch=compute_90,code=sm_90
  rm -rf "$S" && mkdir -p "$S"
  cp -a "$PACK/prefix" "$S/prefix"
  cp -a "$PACK/gpu-work/nt-nccl" "$S/nt" # (built above from the same source)
  PREFIX="$S/prefix" NT_BUILD="$S/nt-devapi" NCCL_TESTS_SRC="$NCCL_TESTS_SRC" SKIP_BUILD=1 SKIP_RUNS=1 SKIP_TORCH=1 \
    OUT="$PACK/devapi-build" bash tests/gpu/devapi.sh > "$PACK/devapi-build.log" 2>&1 ||
    { echo "devapi.sh's build failed: $PACK/devapi-build.log"; exit 1; }
  if command -v mpicc > /dev/null; then
    MPI_HOME=${MPI_HOME:-$(dirname "$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')")}
    make -C "$NCCL_TESTS_SRC/src" BUILDDIR="$S/nt-mpi" MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$CUDA_HOME" \
         CUDA_HOME="$CUDA_HOME" NVCC_GENCODE=$GEN -j "$JOBS" "$S/nt-mpi/all_reduce_perf" "$S/nt-mpi/alltoall_perf" \
         > "$PACK/nt-session-mpi-build.log" 2>&1 || { echo "nccl-tests MPI build failed"; exit 1; }
  fi
  # gin_hosts.sh's nccl-tests: MPI=1 against anyccl's headers, NVIDIA's hidden as devapi.sh hides them
  if command -v mpicc > /dev/null; then
    H=$PACK/devapi-build
    unshare -m "$H/hide-nccl-headers.sh" "$H/nvidia-headers.txt" make -C "$NCCL_TESTS_SRC/src" BUILDDIR="$S/nt-devapi-mpi" \
      MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$S/prefix" CUDA_HOME="$CUDA_HOME" NVCC_GENCODE=$GEN -j "$JOBS" \
      "$S/nt-devapi-mpi/all_reduce_perf" "$S/nt-devapi-mpi/alltoall_perf" > "$PACK/nt-devapi-mpi-build.log" 2>&1 ||
      { echo "nccl-tests MPI build against anyccl failed: $PACK/nt-devapi-mpi-build.log"; exit 1; }
  fi
  cc -O2 -I"$S/prefix/include" -I"$CUDA_HOME/include" tests/gpu/llmix.c -o "$S/llmix" -L"$S/prefix/lib" \
     -l:libnccl.so.2 -L"$CUDA_HOME/lib64" -lcudart_static -lpthread -ldl -lrt
  "$CUDA_HOME/bin/nvcc" -x cu -std=c++17 $GEN -O2 -I"$S/prefix/include" examples/bidir_port_channel.c \
     -L"$S/prefix/lib" -lnccl -o "$S/bidir_port_channel"
  "$CUDA_HOME/bin/nvcc" -std=c++17 $GEN -O2 -I"$S/prefix/include" tests/gpu/port_order.cu \
     -L"$S/prefix/lib" -lnccl -o "$S/port_order"
  cp "$PACK/coll_gpu" "$PACK/coll_mismatch_gpu" "$S/" # (the differential suite and the mismatch cases: session.sh's coll step)
  for d in nt nt-devapi nt-mpi nt-devapi-mpi; do
    [ -d "$S/$d" ] || continue
    find "$S/$d" -name '*.o' -delete
    rm -rf "$S/$d/os" "$S/$d/verifiable"
    strip "$S/$d"/*_perf "$S/$d"/devapi_procs 2>/dev/null || true
  done
  rm -f "$S"/prefix/lib/libanyccl-cpu* # (the GPU hosts run the cuda backend)
  # the device-API kernels' peer loads in flight against NVIDIA's build (a
  # warning, not a stop: the GPU run measures what it costs)
  if CUOBJDUMP=${CUOBJDUMP:-} bash tests/gpu/sass_guard.sh "$S/nt" "$S/nt-devapi" >"$PACK/sass-guard.txt" 2>&1; then
    tail -1 "$PACK/sass-guard.txt"
  else
    echo "WARNING: tests/gpu/sass_guard.sh (is cuobjdump there? set CUOBJDUMP):"; cat "$PACK/sass-guard.txt"
  fi
  tar czf "$PACK/session.tgz" -C "$PACK" session
  ls -la "$PACK/session.tgz"
fi
du -sh "$PACK"
