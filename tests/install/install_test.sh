#!/bin/sh
# Install the build into a temporary prefix, build the randomized-trials
# program from source as a user would (installed headers and pkg-config
# only, nothing from the source or build tree), and run it on 1, 3, 4 and 8
# ranks in one process and across processes.
#
#   install_test.sh BUILD_DIR TEST_SOURCE_DIR LIBDIR [CMAKE]
set -eu
build=$1
src=$2
libdir=$3
cmake=${4:-cmake}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/anyccl-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "FAIL: cmake --install"
  exit 1
fi

export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
for pc in anyccl anyccl-cpu; do
  if [ ! -f "$PKG_CONFIG_PATH/$pc.pc" ]; then
    echo "FAIL: $pc.pc is not installed in $PKG_CONFIG_PATH"
    exit 1
  fi
  # WORKAROUND (reported bug): the .pc files are configured at cmake time with
  # CMAKE_INSTALL_PREFIX, so an install with --prefix elsewhere still points
  # at the configure-time prefix. Rewrite it here until the .pc files become
  # relocatable; this does nothing once they are.
  want="prefix=$prefix"
  have=$(grep '^prefix=' "$PKG_CONFIG_PATH/$pc.pc" || true)
  case "$have" in
    "$want" | 'prefix=${pcfiledir}'*) ;;
    *)
      echo "WORKAROUND: installed $pc.pc says '$have', not '$want' (not relocatable); rewriting it for this test"
      sed -i "s|^prefix=.*|$want|" "$PKG_CONFIG_PATH/$pc.pc"
      ;;
  esac
done

# The program as a user has it: one source file (and the header it includes).
cp "$src/coll_test.c" "$tmp/prog.c"
cp "$src/coll_common.h" "$tmp/coll_common.h"
cd "$tmp"
echo "== cc prog.c $(pkg-config --cflags --libs anyccl-cpu anyccl)"
cc prog.c $(pkg-config --cflags --libs anyccl-cpu anyccl)

# It must run against the installed libraries (rpath from the .pc files).
for lib in libnccl.so libanyccl-cpu.so; do
  where=$(ldd ./a.out | grep "$lib" | awk '{print $3}')
  case "$where" in
    "$prefix"/*) echo "$lib -> $where" ;;
    *)
      echo "FAIL: a.out resolves $lib to '$where', not into $prefix"
      ldd ./a.out
      exit 1
      ;;
  esac
done

status=0
for mode in threads procs; do
  for n in 1 3 4 8; do
    if ./a.out "$mode" "$n" >"$tmp/run.log" 2>&1; then
      tail -n 1 "$tmp/run.log"
    else
      rc=$?
      grep -v 'NCCL WARN' "$tmp/run.log" | tail -n 40
      echo "FAIL: ./a.out $mode $n exited with status $rc"
      status=1
    fi
  done
done
[ $status -eq 0 ] && echo "install test: PASS" || echo "install test: FAIL"
exit $status
