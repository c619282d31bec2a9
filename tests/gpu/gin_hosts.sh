#!/bin/bash
# GIN across hosts on one 2-GPU machine: nccl-tests 2.19.x alltoall_perf -R 2
# -D 3 (every peer through GIN) and -D 4 (LSA peers by pointer, the others
# through GIN) with two processes as two virtual hosts (NCCL_HOSTID), so each
# put to the other rank goes through the proxy (staged through pinned host
# memory, network transport, host-word signals); -c 1 checks the data. Then
# the same sizes without a device kernel (-D 0) and all_reduce -R 2 as
# baselines, tests/gpu/devapi_procs in its "hosts" mode (our own launcher:
# forks one process per GPU) when PROCS_BIN is given, and port channels
# between the GPUs of 2 virtual hosts (examples/bidir_port_channel -m hosts:
# puts staged through pinned host memory by the proxies) when BIDIR_BIN is.
#
#   NT=<dir of nccl-tests built with MPI=1 against anyccl's include/> \
#   LIBDIR=<dir of anyccl's libnccl.so.2> [PROCS_BIN=<devapi_procs>] bash tests/gpu/gin_hosts.sh
#
# nccl-tests must be built with MPI=1: without MPI its processes cannot form
# one communicator, and mpirun gives each process its NCCL_HOSTID. Its -D
# kernels inline nccl_device.h, so build it against anyccl's headers
# (ncclDevComm's layout is anyccl's), e.g. on any machine with nvcc and mpicc:
#   make -C $NCCL_TESTS_SRC/src MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=$PREFIX \
#        NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR=$NT $NT/alltoall_perf $NT/all_reduce_perf
# (BUILD_NT=1 with NCCL_TESTS_SRC and PREFIX set does that here first.)
# devapi_procs: nvcc -std=c++17 -arch=sm_90 -I$PREFIX/include tests/gpu/devapi_procs.cu -L$LIBDIR -lnccl
# bidir:        nvcc -x cu -std=c++17 -arch=sm_90 -I$PREFIX/include examples/bidir_port_channel.c -L$LIBDIR -lnccl
#
# MPIRUN_ARGS adds options to mpirun (in a container whose Open MPI cannot
# use CMA: "--mca btl_vader_single_copy_mechanism none").
# Each run is bounded (RUN_TIMEOUT, default 40 s; ANYCCL_OP_TIMEOUT=20). A run
# FAILs on a non-zero exit, a timeout, no result rows, a non-zero #wrong or
# 'Out of bounds values : N FAILED'. The PASS/FAIL table comes last; exit 0
# when all passed. Logs in $OUT (default /tmp/gin-hosts).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NT=${NT:?set NT to the dir of alltoall_perf and all_reduce_perf (nccl-tests, MPI=1)}
LIBDIR=${LIBDIR:?set LIBDIR to the dir of anyccl\'s libnccl.so.2}
OUT=${OUT:-/tmp/gin-hosts}
RUN_TIMEOUT=${RUN_TIMEOUT:-40}
SIZES=${SIZES:--b 8 -e 4M -f 4}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN} ANYCCL_OP_TIMEOUT=${ANYCCL_OP_TIMEOUT:-20}
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
result() { # name PASS|FAIL detail
  printf '%-28s %s %s\n' "$1" "$2" "${3:-}" >>"$OUT/summary.txt"
  [ "$2" = PASS ] || fails=$((fails + 1))
}

if [ "${BUILD_NT:-0}" = 1 ]; then
  MPI_HOME=${MPI_HOME:-$(dirname "$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')")}
  mkdir -p "$NT"
  if make -C "${NCCL_TESTS_SRC:?}/src" -j"$(nproc)" MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="${PREFIX:?}" \
       CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR="$NT" \
       "$NT/alltoall_perf" "$NT/all_reduce_perf" >"$OUT/build-nt.log" 2>&1; then result build-nccl-tests-mpi PASS
  else result build-nccl-tests-mpi FAIL "(see $OUT/build-nt.log)"
  fi
fi

ROOTFLAG=
[ "$(id -u)" = 0 ] && ROOTFLAG=--allow-run-as-root
# name binary args...: two processes, rank r on GPU r (nccl-tests' local rank) and virtual host gin-host-r
run_nt() {
  local name=$1 bin=$NT/$2 f=$OUT/$1.log
  shift 2
  if [ ! -x "$bin" ]; then result "$name" FAIL "no $bin"; return; fi
  if ! ldd "$bin" | grep -q "libnccl.so.2 => $LIBDIR/"; then result "$name" FAIL "ldd: libnccl.so.2 not from $LIBDIR"; return; fi
  if ! ldd "$bin" | grep -q libmpi; then result "$name" FAIL "$bin was built with MPI=0 (see the header)"; return; fi
  local t0=$SECONDS
  timeout -k 5 "$RUN_TIMEOUT" mpirun -np 2 $ROOTFLAG --bind-to none ${MPIRUN_ARGS:-} -x LD_LIBRARY_PATH -x NCCL_DEBUG \
    -x NCCL_NVLS_ENABLE -x ANYCCL_OP_TIMEOUT sh -c 'NCCL_HOSTID=gin-host-$OMPI_COMM_WORLD_RANK exec "$@"' sh \
    "$bin" -g 1 $SIZES -c 1 "$@" >"$f" 2>&1
  local rc=$? rows wrong oob
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$f")
  wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A")) {n++} END {print n+0}' "$f")
  oob=$(grep -E 'Out of bounds values : [1-9]' "$f" || true)
  local detail="rc $rc, $rows sizes, $((SECONDS - t0)) s"
  if [ $rc = 0 ] && [ "$rows" -gt 0 ] && [ "$wrong" = 0 ] && [ -z "$oob" ]; then result "$name" PASS "($detail)"
  else result "$name" FAIL "($detail, $wrong rows wrong) $(grep -m2 -E 'WARN|rror|FAIL|invalid' "$f" | tr '\n' ' ' | cut -c1-200)"
  fi
}

if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  result gpus FAIL "fewer than 2 GPUs"
else
  run_nt alltoall-R2-D3 alltoall_perf -R 2 -D 3
  run_nt alltoall-R2-D4 alltoall_perf -R 2 -D 4
  run_nt alltoall-R2-D0 alltoall_perf -R 2
  run_nt all_reduce-R2 all_reduce_perf -R 2
  if [ -n "${PROCS_BIN:-}" ]; then
    timeout -k 5 "$RUN_TIMEOUT" "$PROCS_BIN" 2 20 hosts >"$OUT/devapi_procs-hosts.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then result devapi_procs-hosts PASS "(GIN put, put-value, counters, world barrier; 20 iterations)"
    else result devapi_procs-hosts FAIL "rc $rc: $(grep -m2 -iE 'fail|warn|want' "$OUT/devapi_procs-hosts.log" | tr '\n' ' ' | cut -c1-200)"
    fi
  fi
  if [ -n "${BIDIR_BIN:-}" ]; then
    timeout -k 5 "$RUN_TIMEOUT" "$BIDIR_BIN" -m hosts -i 20 -s 4194304 >"$OUT/bidir-hosts.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q "Succeed" "$OUT/bidir-hosts.log"; then
      result bidir-port-hosts PASS "($(grep -E 'bytes 4194304' "$OUT/bidir-hosts.log" | tail -1))"
    else result bidir-port-hosts FAIL "rc $rc: $(grep -m2 -iE 'fail|warn|error' "$OUT/bidir-hosts.log" | tr '\n' ' ' | cut -c1-200)"
    fi
  fi
fi
echo "== GIN across 2 virtual hosts (logs in $OUT)"
cat "$OUT/summary.txt"
exit $((fails > 0))
