#!/usr/bin/env bash
# aws_ofi_nccl.sh: build aws-ofi-nccl (AWS's NCCL net plugin over libfabric)
# from its public source and run anyccl's differential suite between 2
# virtual hosts through it, over libfabric's tcp provider. Not a CI test:
# CI cannot fetch the source, and its code is never committed here.
#
#   tests/net/aws_ofi_nccl.sh [BUILD_DIR] [SRC_DIR]
#     BUILD_DIR  anyccl's build (default build)
#     SRC_DIR    an aws-ofi-nccl checkout (default third_party/aws-ofi-nccl,
#                cloned from https://github.com/aws/aws-ofi-nccl when missing)
#
# Needs: libfabric-dev (>= 1.11) and libhwloc-dev (apt-get install, as root),
# autotools, a C++ compiler, the CUDA toolkit's headers (CUDA_HOME, default
# /usr/local/cuda). aws-ofi-nccl's init resolves CUDA driver functions: on a
# machine without the driver (libcuda.so.1) it refuses to initialise, and
# anyccl falls back to its built-in network (the script says so and exits 77).
# Exit: 0 the suite passed through the plugin; 77 skipped; else failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
SRC=${2:-$ROOT/third_party/aws-ofi-nccl}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PREFIX=$SRC/install

need() { command -v "$1" >/dev/null || { echo "aws_ofi_nccl: SKIP: $1 is missing ($2)"; exit 77; }; }
need autoreconf "apt-get install autoconf automake libtool"
need libtoolize "apt-get install libtool"
need g++ "apt-get install g++"
[ -f /usr/include/rdma/fabric.h ] || { echo "aws_ofi_nccl: SKIP: libfabric headers missing (apt-get install libfabric-dev)"; exit 77; }
[ -f /usr/include/hwloc.h ] || { echo "aws_ofi_nccl: SKIP: hwloc headers missing (apt-get install libhwloc-dev)"; exit 77; }
[ -f "$CUDA_HOME/include/cuda.h" ] || { echo "aws_ofi_nccl: SKIP: no CUDA headers in $CUDA_HOME (set CUDA_HOME)"; exit 77; }
[ -x "$BUILD/tests/coll/coll_test" ] || [ -x "$BUILD/coll_test" ] || true

if [ ! -f "$SRC/configure.ac" ]; then
  git clone --depth 1 https://github.com/aws/aws-ofi-nccl "$SRC" || { echo "aws_ofi_nccl: SKIP: cannot fetch the source"; exit 77; }
fi
LIB=$(ls "$PREFIX"/lib/libnccl-net*.so 2>/dev/null | head -1)
if [ -z "$LIB" ]; then
  echo "# building aws-ofi-nccl ($(git -C "$SRC" log -1 --format=%h 2>/dev/null)) into $PREFIX"
  (cd "$SRC" && { [ -x configure ] || ./autogen.sh >/dev/null 2>&1 || autoreconf -fi >/dev/null 2>&1; } &&
    ./configure --prefix="$PREFIX" --with-cuda="$CUDA_HOME" \
      --disable-tests --enable-platform-aws=no >"$SRC/configure.out" 2>&1 &&
    nice make -j"$(nproc)" >"$SRC/make.out" 2>&1 && make install >/dev/null 2>&1) ||
    { echo "aws_ofi_nccl: FAIL: build failed (see $SRC/configure.out, $SRC/make.out)"; exit 1; }
  LIB=$(ls "$PREFIX"/lib/libnccl-net*.so | head -1)
fi
echo "# plugin: $LIB; exports: $(nm -D --defined-only "$LIB" | awk '/ncclNetPlugin_v/{printf "%s ", $3}')"

COLL=$(ls "$BUILD"/tests/*/coll_test "$BUILD"/coll_test 2>/dev/null | head -1)
[ -n "$COLL" ] || { echo "aws_ofi_nccl: FAIL: coll_test not built in $BUILD"; exit 1; }
# libfabric's tcp provider over loopback; 4 processes, 2 virtual hosts
export NCCL_NET_PLUGIN=$LIB FI_PROVIDER=tcp FI_TCP_IFACE=lo OFI_NCCL_PROTOCOL=SENDRECV OFI_NCCL_EXCLUDE_TCP_IF=docker0
export NCCL_SOCKET_IFNAME=lo ANYCCL_TEST_HOSTS=2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
out=$(timeout 600 "$COLL" procs 4 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E 'NET/Plugin|via NET|PASS|FAIL' | sort | uniq -c | sort -rn | head -20
if printf '%s\n' "$out" | grep -q 'NET/Plugin: loaded'; then
  [ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'via NET/' && { echo "aws_ofi_nccl: PASS: the suite passed through $(basename "$LIB")"; exit 0; }
  echo "aws_ofi_nccl: FAIL: rc $rc"; exit 1
fi
echo "aws_ofi_nccl: SKIP: the plugin did not initialise here (the WARN above says why); the suite ran on the built-in network (rc $rc)"
exit 77
