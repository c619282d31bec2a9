#!/usr/bin/env bash
# aws_ofi_nccl.sh: build aws-ofi-nccl (AWS's NCCL net plugin over libfabric)
# from its public source and run anyccl's differential suites through it,
# over libfabric's tcp provider. Not a CI test: CI cannot fetch the source,
# and its code is never committed here.
#
#   tests/net/aws_ofi_nccl.sh [--netns] [BUILD_DIR] [SRC_DIR]
#     (default)  coll_test procs 4 on 2 virtual hosts (NCCL_HOSTID), loopback
#     --netns    2 network namespaces joined by a veth pair
#                (scripts/netns-2host.sh, needs root): netns_rank, 2 ranks per
#                namespace, 60 randomized trials of every collective checked
#                against a host reference; NET between the namespaces
#     BUILD_DIR  anyccl's build (default build)
#     SRC_DIR    an aws-ofi-nccl checkout (default third_party/aws-ofi-nccl,
#                cloned from https://github.com/aws/aws-ofi-nccl when missing)
#
# Needs: libfabric-dev (>= 1.11) and libhwloc-dev (apt-get install, as root),
# autotools, a C++ compiler, the CUDA toolkit's headers (CUDA_HOME, default
# /usr/local/cuda).
#
# aws-ofi-nccl resolves CUDA driver functions at init (through the CUDA
# runtime's cudaGetDriverEntryPoint). Two ways, picked by OFI_CUDA (default
# auto: real when the system has libcuda.so.1, else cpu):
#   real  the plugin as AWS builds it (cudart linked statically) on the NVIDIA
#         driver: $SRC/install
#   cpu   the plugin built with --enable-cudart-dynamic ($SRC/build-cpudrv): it
#         dlopens libcudart.so, which BUILD/cpu-driver provides (a link to
#         anyccl-cpu, whose driver entry points come from
#         BUILD/cpu-driver/libcuda.so.1); that folder goes first on
#         LD_LIBRARY_PATH. No NVIDIA driver needed.
# Exit: 0 the suite passed through the plugin; 77 skipped; else failed.
set -u
NETNS=0
[ "${1:-}" = --netns ] && { NETNS=1; shift; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
SRC=${2:-$ROOT/third_party/aws-ofi-nccl}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OFI_CUDA=${OFI_CUDA:-auto}
if [ "$OFI_CUDA" = auto ]; then
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then OFI_CUDA=real; else OFI_CUDA=cpu; fi
fi

need() { command -v "$1" >/dev/null || { echo "aws_ofi_nccl: SKIP: $1 is missing ($2)"; exit 77; }; }
need autoreconf "apt-get install autoconf automake libtool"
need libtoolize "apt-get install libtool"
need g++ "apt-get install g++"
[ -f /usr/include/rdma/fabric.h ] || { echo "aws_ofi_nccl: SKIP: libfabric headers missing (apt-get install libfabric-dev)"; exit 77; }
[ -f /usr/include/hwloc.h ] || { echo "aws_ofi_nccl: SKIP: hwloc headers missing (apt-get install libhwloc-dev)"; exit 77; }
[ -f "$CUDA_HOME/include/cuda.h" ] || { echo "aws_ofi_nccl: SKIP: no CUDA headers in $CUDA_HOME (set CUDA_HOME)"; exit 77; }

if [ ! -f "$SRC/configure.ac" ]; then
  git clone --depth 1 https://github.com/aws/aws-ofi-nccl "$SRC" || { echo "aws_ofi_nccl: SKIP: cannot fetch the source"; exit 77; }
fi

# build DIR PREFIX [configure args]: the plugin from a clean copy of the
# checkout's HEAD (an in-tree build of the other variant may exist)
build() {
  local dir=$1 prefix=$2; shift 2
  echo "# building aws-ofi-nccl ($(git -C "$SRC" log -1 --format=%h 2>/dev/null)) into $prefix"
  rm -rf "$dir" && mkdir -p "$dir/src" &&
  if git -C "$SRC" rev-parse -q HEAD >/dev/null 2>&1; then git -C "$SRC" archive HEAD | tar -x -C "$dir/src"
  else tar -C "$SRC" --exclude=./build-cpudrv --exclude=./build-real --exclude=./install -c . | tar -x -C "$dir/src"; fi &&
  (cd "$dir/src" && { ./autogen.sh >"$dir/autogen.out" 2>&1 || autoreconf -fi >"$dir/autogen.out" 2>&1; } &&
    ./configure --prefix="$prefix" --with-cuda="$CUDA_HOME" --disable-tests \
      --enable-platform-aws=no "$@" >"$dir/configure.out" 2>&1 &&
    nice make -j"$(nproc)" >"$dir/make.out" 2>&1 && make install >/dev/null 2>&1) ||
    { echo "aws_ofi_nccl: FAIL: build failed (see $dir/configure.out, $dir/make.out)"; exit 1; }
}

if [ "$OFI_CUDA" = real ]; then
  PREFIX=$SRC/install
  LIB=$(ls "$PREFIX"/lib/libnccl-net*.so 2>/dev/null | head -1)
  [ -n "$LIB" ] || build "$SRC/build-real" "$PREFIX"
  LIBPATH=${LD_LIBRARY_PATH:-}
else
  [ -e "$BUILD/cpu-driver/libcuda.so.1" ] && [ -e "$BUILD/cpu-driver/libcudart.so" ] ||
    { echo "aws_ofi_nccl: FAIL: $BUILD/cpu-driver is not built (cmake --build $BUILD --target anyccl-cpu-driver)"; exit 1; }
  PREFIX=$SRC/build-cpudrv/install
  LIB=$(ls "$PREFIX"/lib/libnccl-net*.so 2>/dev/null | head -1)
  # the cache answer keeps configure from linking libcudart: the plugin
  # dlopens it at init instead
  [ -n "$LIB" ] || build "$SRC/build-cpudrv" "$PREFIX" --enable-cudart-dynamic \
    ac_cv_search_cudaGetDriverEntryPoint="none required"
  LIBPATH=$BUILD/cpu-driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
LIB=$(ls "$PREFIX"/lib/libnccl-net*.so | head -1)
echo "# plugin: $LIB ($OFI_CUDA CUDA driver); exports: $(nm -D --defined-only "$LIB" | awk '/ncclNetPlugin_v/{printf "%s ", $3}')"

# verdict OUT RC: the plugin carried the suite (loaded, NET through it, passed)
verdict() {
  local out=$1 rc=$2
  printf '%s\n' "$out" | grep -E 'NET/Plugin: |Selected provider|via NET|PASS|FAIL|netns-2host' |
    sed -E 's/^(\[h[0-9] r[0-9]\] )?[^ ]+:[0-9]+:[0-9]+ //' | sort | uniq -c | sort -rn | head -20
  if printf '%s\n' "$out" | grep -q 'NET/Plugin: loaded'; then
    if printf '%s\n' "$out" | grep -q 'failed to initialise; using the built-in network'; then
      echo "aws_ofi_nccl: FAIL: the plugin did not initialise on every rank"; exit 1
    fi
    [ "$rc" = 0 ] && printf '%s\n' "$out" | grep -q 'via NET/Libfabric' &&
      { echo "aws_ofi_nccl: PASS: the suite passed through $(basename "$LIB")"; exit 0; }
    echo "aws_ofi_nccl: FAIL: rc $rc"; exit 1
  fi
  echo "aws_ofi_nccl: SKIP: the plugin did not initialise here (the WARN above says why); the suite ran on the built-in network (rc $rc)"
  exit 77
}

if [ $NETNS = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "aws_ofi_nccl: SKIP: --netns needs root"; exit 77; }
  RANK=$(ls "$BUILD"/tests/netns/netns_rank 2>/dev/null | head -1)
  [ -n "$RANK" ] || { echo "aws_ofi_nccl: FAIL: netns_rank not built in $BUILD"; exit 1; }
  # Every rank sees the veth (anyccl0, 10.200.0.1 / .2) and lo: bootstrap,
  # anyccl's sockets and libfabric all on the veth; aws-ofi-nccl's default
  # exclusion of lo stays.
  out=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 300 "$ROOT/scripts/netns-2host.sh" -n 2 --timeout 240 \
        --env LD_LIBRARY_PATH="$LIBPATH" --env NCCL_NET_PLUGIN="$LIB" --env FI_PROVIDER=tcp \
        --env FI_TCP_IFACE=anyccl0 --env OFI_NCCL_PROTOCOL=SENDRECV --env OFI_NCCL_EXCLUDE_TCP_IF=lo,docker0 \
        -- "$RANK" --trials 60 --seed "${SEED:-$RANDOM}" 2>&1)
  rc=$?
  [ $rc = 77 ] && { printf '%s\n' "$out" | grep SKIP; exit 77; }
  printf '%s\n' "$out" | grep -E 'netns_rank [0-9]/' | sed 's/^/# /'
  verdict "$out" $rc
fi

COLL=$(ls "$BUILD"/tests/*/coll_test "$BUILD"/coll_test 2>/dev/null | head -1)
[ -n "$COLL" ] || { echo "aws_ofi_nccl: FAIL: coll_test not built in $BUILD"; exit 1; }
# libfabric's tcp provider over loopback; 4 processes, 2 virtual hosts. By
# default aws-ofi-nccl skips lo (OFI_NCCL_EXCLUDE_TCP_IF=lo,docker0).
export LD_LIBRARY_PATH=$LIBPATH
export NCCL_NET_PLUGIN=$LIB FI_PROVIDER=tcp FI_TCP_IFACE=lo OFI_NCCL_PROTOCOL=SENDRECV OFI_NCCL_EXCLUDE_TCP_IF=docker0
export NCCL_SOCKET_IFNAME=lo ANYCCL_TEST_HOSTS=2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
out=$(timeout 600 "$COLL" procs 4 2>&1)
verdict "$out" $?
