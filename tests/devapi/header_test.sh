#!/bin/sh
# Compile devapi_kernel.cu with nvcc against anyccl's include directory the
# way nccl-tests does (-I$NCCL_HOME/include), and check that every nccl.h /
# nccl_device header the compiler read is anyccl's: NVIDIA's copies in the
# CUDA toolkit's include directory must not get in.
#   header_test.sh <nvcc> <anyccl include dir> <devapi_kernel.cu> <scratch dir>
nvcc=$1 inc=$2 src=$3 out=$4
set -e
deps=$("$nvcc" -std=c++17 -I"$inc" -M "$src")
bad=$(printf '%s\n' "$deps" | tr ' ' '\n' | grep -E '(^|/)nccl(_device)?(\.h|/)' | grep -v "^$inc/" || true)
if [ -n "$bad" ]; then
  echo "FAIL: NCCL headers from outside $inc were read:"
  printf '%s\n' "$bad"
  exit 1
fi
n=$(printf '%s\n' "$deps" | tr ' ' '\n' | grep -c "^$inc/nccl")
[ "$n" -ge 3 ] || { echo "FAIL: only $n anyccl headers were read (expected nccl.h, nccl_device.h and its parts)"; exit 1; }
"$nvcc" -std=c++17 -arch=sm_90 -I"$inc" -c "$src" -o "$out/devapi_kernel.o"
echo "ok: $n anyccl headers, no others; the kernels compiled"
