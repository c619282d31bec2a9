#!/usr/bin/env bash
# Quick GPU smoke run (development): build libnccl (sm_90 only) and
# nccl-tests against it and against NCCL, run a few checks and one
# benchmark. tests/gpu/run.sh is the full matrix.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/smoke-out}; mkdir -p "$OUT"
NG=$(nvidia-smi -L | wc -l)
nvidia-smi topo -m | head -8
B=/tmp/b; P=/tmp/pfx
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DANYCCL_CUDA_ARCHS=90-real -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null &&
  cmake --build $B -j16 --target nccl ) > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
mkdir -p $P/lib $P/include; cp include/nccl.h $P/include/; cp -a $B/libnccl.so* $P/lib/
REF=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
mkdir -p /tmp/ref/lib; ln -sf $REF/lib/libnccl.so.2 /tmp/ref/lib/libnccl.so; ln -sf $REF/lib/libnccl.so.2 /tmp/ref/lib/libnccl.so.2; ln -sfn $REF/include /tmp/ref/include
G=-gencode=arch=compute_90,code=sm_90
make -C third_party/nccl-tests BUILDDIR=/tmp/nt-any NCCL_HOME=$P CUDA_HOME=/usr/local/cuda NVCC_GENCODE=$G -j16 > $OUT/nt-any.log 2>&1 || { tail -20 $OUT/nt-any.log; exit 1; }
make -C third_party/nccl-tests BUILDDIR=/tmp/nt-ref NCCL_HOME=/tmp/ref CUDA_HOME=/usr/local/cuda NVCC_GENCODE=$G -j16 > $OUT/nt-ref.log 2>&1 || { tail -20 $OUT/nt-ref.log; exit 1; }
run() { # lib bin args...
  local lib=$1 bin=$2; shift 2
  if [[ $lib == any ]]; then LD_LIBRARY_PATH=$P/lib timeout ${TMO:-120} /tmp/nt-any/$bin "$@"; else LD_LIBRARY_PATH=$REF/lib timeout ${TMO:-120} /tmp/nt-ref/$bin "$@"; fi
}
# chk LIB BIN ARGS...: one line: wrong-count rows, out-of-bounds verdict, exit status
chk() {
  local lib=$1 bin=$2; shift 2
  local log=$OUT/chk.$$.log
  run $lib $bin "$@" > $log 2>&1; local rc=$?
  local bad=$(awk '/^ +[0-9]/ { if ($9 != "0" && $9 != "N/A") b++; if ($13 != "0" && $13 != "N/A") b++ } END { print b+0 }' $log)
  local oob=$(grep -o "Out of bounds values : [0-9]* [A-Z]*" $log | awk '{print $6, $7}')
  printf '%-22s %-28s rc=%-3s wrongrows=%-3s oob=%s\n' "$bin" "$*" "$rc" "$bad" "$oob"
  if [[ $rc != 0 || $bad != 0 ]]; then grep -E "WARN|rror|^ +[0-9]" $log | head -8; fi
  cat $log >> $OUT/all.log
}
# perf LIB BIN ARGS...: size time(out-of-place) busbw per row
perf() {
  local lib=$1 bin=$2; shift 2
  echo "-- $lib $bin $*"
  run $lib $bin "$@" 2>&1 | tee -a $OUT/all.log | awk '/^ +[0-9]/ { printf "%s:%s/%s ", $1, $6, $8 } END { print "" }'
}
eval "${SMOKE_CMDS:-true}"
