#!/usr/bin/env bash
# tests/gpu/run.sh -- build anyccl and NVIDIA's nccl-tests, then run nccl-tests
# against the real NCCL and against anyccl on a GPU host; print a short table last.
#
# See tests/gpu/README.md for the environment variables.  Example:
#   NCCL_TESTS_SRC=third_party/nccl-tests MODE=check,perf bash tests/gpu/run.sh
#
# Robustness: no `set -e`; every test run is under `timeout`; the summary is
# rewritten after every run, so $OUT/summary.txt is current even if the whole
# command is killed.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/gpu"
cd "$ROOT" || exit 2

abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$ROOT/$1" ;; esac; }

# ---------------------------------------------------------------- settings
MODE=${MODE:-check,perf}
OUT=$(abspath "${OUT:-gpu-out}")
BUILD_DIR=$(abspath "${BUILD_DIR:-build-gpu}")
PREFIX=$(abspath "${PREFIX:-$BUILD_DIR/prefix}")
NCCL_TESTS_SRC=$(abspath "${NCCL_TESTS_SRC:-third_party/nccl-tests}")
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC_GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
TIMEOUT=${TIMEOUT:-300}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-$TIMEOUT}
PERF_TIMEOUT=${PERF_TIMEOUT:-$TIMEOUT}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-900}
DEADLINE=${DEADLINE:-0}            # seconds for the whole script (0: none)
LIBS=${LIBS:-nccl,anyccl}          # nccl, anyccl, xabi (NCCL-built binaries on anyccl's lib)
CHECK_BINS=${CHECK_BINS:-${BINS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter hypercube alltoallv}}
PERF_BINS=${PERF_BINS:-${BINS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}}
CHECK_VARIANTS=${CHECK_VARIANTS:-proc threads graph}   # + mpi (needs an MPI build)
CHECK_SIZES=${CHECK_SIZES:--b 8 -e 8M -f 8}
CHECK_ITERS=${CHECK_ITERS:--n 2 -w 1}
CHECK_EXTRA=${CHECK_EXTRA:-}
PERF_SIZES=${PERF_SIZES:--b 8 -e 512M -f 2}
PERF_ITERS=${PERF_ITERS:--n 20 -w 5}
PERF_EXTRA=${PERF_EXTRA:-}
PERF_GRAPH=${PERF_GRAPH:-0}        # 1: also a perf run with -G 1
USE_MPI=${USE_MPI:-0}              # 1: build nccl-tests with MPI=1 when mpicc exists
SKIP_BUILD=${SKIP_BUILD:-0}        # 1: reuse existing builds
KEEP_RAW=${KEEP_RAW:-1}            # 0: delete per-run logs after packing them into logs.tgz
COLL_GPU=$(abspath "${COLL_GPU:-$BUILD_DIR/tests/coll/coll_gpu}")
OURS_ARGS=${OURS_ARGS:-}
# Extra cmake configure arguments; by default only sm_90 code for the cuda
# backend (ptxas of src/cuda/*.cu is the slow part of the build).
CMAKE_ARGS=${CMAKE_ARGS--DANYCCL_CUDA_ARCHS=90-real}
NCCL_REAL_HOME=${NCCL_REAL_HOME:-}  # dir with include/nccl.h and lib/libnccl.so.2 (default: python nvidia.nccl)

# Never use NVLink multicast (NVLS) on shared hosts.
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# $OUT: only gpu.log, summary.txt and logs.tgz are meant to come back; the
# per-run logs sit three folders down ($OUT/runs/logs/all) on purpose.
LOGDIR="$OUT/runs/logs/all"
INDEX="$LOGDIR/index.tsv"
GPULOG="$OUT/gpu.log"
SUMMARY="$OUT/summary.txt"
WORK="$BUILD_DIR/gpu-work"
mkdir -p "$OUT" "$LOGDIR" "$WORK" || exit 2
: > "$INDEX"; : > "$GPULOG"
START=$SECONDS

has_mode() { case ",$MODE," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
has_lib()  { case ",${LIBS// /,}," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
log() { printf '%s\n' "$*" | tee -a "$GPULOG"; }
elapsed() { echo $((SECONDS - START)); }
# Seconds left before DEADLINE (a big number when there is none).
remaining() { if [ "$DEADLINE" -gt 0 ] 2>/dev/null; then echo $((DEADLINE - (SECONDS - START))); else echo 999999; fi; }
# index row: kind bin variant lib rc secs logfile cmd
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$INDEX"; }
info()   { record info "$1" - - - - - "$2"; log "[info] $1: $2"; }

summarize() {
  if command -v python3 >/dev/null 2>&1; then
    python3 "$HERE/summarize.py" "$INDEX" > "$SUMMARY.tmp" 2>&1
  else
    { echo "python3 not found; raw index:"; cat "$INDEX"; } > "$SUMMARY.tmp"
  fi
  mv -f "$SUMMARY.tmp" "$SUMMARY"
}

# Append a run's log to gpu.log: all of it when short, else its head, the lines
# that look like errors, and its tail.
append_log() {  # title file
  local f=$2 n
  echo "===== $1" >> "$GPULOG"
  if [ ! -f "$f" ]; then echo "(no log)" >> "$GPULOG"; return; fi
  n=$(wc -l < "$f")
  if [ "$n" -le 160 ]; then cat "$f" >> "$GPULOG"
  else
    head -n 40 "$f" >> "$GPULOG"
    echo "... ($n lines; lines that look like errors:)" >> "$GPULOG"
    grep -n -i -E 'fail|error|wrong=|abort|segmentation|warn|undefined symbol|timed out' "$f" | grep -v -E '#wrong *$' | head -n 60 >> "$GPULOG"
    echo "... (last 80 lines:)" >> "$GPULOG"
    tail -n 80 "$f" >> "$GPULOG"
  fi
}

# Run one command with a timeout (capped by the deadline); sets RC.
# usage: run_logged <timeout> <logfile> cmd...
run_logged() {
  local t=$1 f=$2; shift 2
  local rem; rem=$(remaining)
  if [ "$rem" -lt 20 ]; then RC=skip; echo "skipped: deadline" > "$f"; return; fi
  [ "$t" -gt $((rem - 10)) ] && t=$((rem - 10))
  { echo "# cmd: $*"; echo "# LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "# timeout ${t}s, started $(date '+%F %T')"; } > "$f"
  timeout -k 10 "$t" "$@" >> "$f" 2>&1 < /dev/null
  RC=$?
  { [ "$RC" = 124 ] || [ "$RC" = 137 ]; } && echo "# TIMED OUT after ${t}s (rc=$RC)" >> "$f"
  echo "# rc=$RC" >> "$f"
}

# ---------------------------------------------------------------- host facts
if [ -z "${NGPU:-}" ]; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
fi
log "anyccl GPU run: MODE=$MODE LIBS=$LIBS NGPU=$NGPU OUT=$OUT  ($(date '+%F %T'), $(hostname))"
info ngpu "$NGPU"
info mode "$MODE"
nvidia-smi -L >> "$GPULOG" 2>&1
{ nvidia-smi topo -m 2>&1 | head -n 20; command -v nvcc >/dev/null && nvcc --version | tail -n 2; } >> "$GPULOG" 2>&1

MPI_HOME_DET=""; MPIRUN=""
if command -v mpicc >/dev/null 2>&1; then
  inc=$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')
  [ -z "$inc" ] && inc=$(mpicc -show 2>/dev/null | tr ' ' '\n' | sed -n 's/^-I//p' | head -n 1)
  [ -n "$inc" ] && [ -f "$inc/mpi.h" ] && MPI_HOME_DET=$(dirname "$inc")
  MPIRUN=$(command -v mpirun 2>/dev/null || command -v mpiexec 2>/dev/null || true)
  info mpi "mpicc=$(command -v mpicc) MPI_HOME=${MPI_HOME_DET:-?} mpirun=${MPIRUN:-none} USE_MPI=$USE_MPI"
else
  info mpi "no mpicc (nccl-tests built without MPI: single process only)"
fi
MPI_ARGS=()
if [ "$USE_MPI" = 1 ] && [ -n "$MPI_HOME_DET" ]; then
  MPI_ARGS=(MPI=1 "MPI_HOME=${MPI_HOME:-$MPI_HOME_DET}")
fi

# The real NCCL, from PyTorch's environment unless NCCL_REAL_HOME is given.
if [ -z "$NCCL_REAL_HOME" ]; then
  NCCL_REAL_HOME=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [ -z "$NCCL_REAL_HOME" ] && [ -f "$CUDA_HOME/include/nccl.h" ]; then NCCL_REAL_HOME=$CUDA_HOME; fi
fi
REAL_LIBDIR=""
for d in "$NCCL_REAL_HOME/lib" "$NCCL_REAL_HOME/lib64"; do
  if ls "$d"/libnccl.so.2* >/dev/null 2>&1; then REAL_LIBDIR=$d; break; fi
done
REAL_VER=$(sed -n 's/^#define NCCL_VERSION_CODE *\([0-9]*\).*/\1/p' "$NCCL_REAL_HOME/include/nccl.h" 2>/dev/null | head -n 1)
info real_nccl "${NCCL_REAL_HOME:-none} (libdir ${REAL_LIBDIR:-none}, NCCL_VERSION_CODE ${REAL_VER:-?})"

# ---------------------------------------------------------------- builds
# A prefix that nccl-tests' Makefile can use: include/ and lib/libnccl.so.
make_prefix() {  # dir incdir libdir  (incdir's nccl.h is linked in, others added by the caller)
  local p=$1 inc=$2 lib=$3 so
  rm -rf "$p"; mkdir -p "$p/include" "$p/lib"
  ln -s "$inc/nccl.h" "$p/include/nccl.h"
  so=$(ls "$lib"/libnccl.so.2 "$lib"/libnccl.so.2.* 2>/dev/null | head -n 1)
  ln -s "$so" "$p/lib/libnccl.so.2"; ln -s "$so" "$p/lib/libnccl.so"
}

nt_bins_ok() {  # builddir: the build produced its binaries (older nccl-tests lack some, e.g. alltoallv)
  [ -x "$1/all_reduce_perf" ]
}
nt_missing() {  # builddir: wanted binaries that are not there
  local b m=""
  for b in $CHECK_BINS $PERF_BINS; do [ -x "$1/${b}_perf" ] || case " $m " in *" $b "*) ;; *) m="$m $b" ;; esac; done
  echo "${m# }"
}

build_nt() {  # name prefix -> BUILDDIR $WORK/nt-<name>; sets RC
  local name=$1 home=$2 bdir="$WORK/nt-$1" f="$LOGDIR/build-nccl-tests-$1.log"
  if [ "$SKIP_BUILD" = 1 ] && nt_bins_ok "$bdir"; then RC=0; return; fi
  local t0=$SECONDS
  run_logged "$BUILD_TIMEOUT" "$f" make -C "$NCCL_TESTS_SRC" BUILDDIR="$bdir" NCCL_HOME="$home" \
      CUDA_HOME="$CUDA_HOME" NVCC_GENCODE="$NVCC_GENCODE" ${MPI_ARGS[@]+"${MPI_ARGS[@]}"} -j "$JOBS"
  [ "$RC" = 0 ] && ! nt_bins_ok "$bdir" && RC=missing-binaries
  [ "$RC" = 0 ] && [ -n "$(nt_missing "$bdir")" ] && info "nccl_tests_missing_$name" "$(nt_missing "$bdir") (not in this nccl-tests; skipped)"
  record build "nccl-tests" - "$name" "$RC" $((SECONDS - t0)) "$f" "make -C $NCCL_TESTS_SRC NCCL_HOME=$home"
}

need_anyccl=0; need_nt_real=0; need_nt_ours=0
if has_mode ours; then need_anyccl=1; fi
if has_mode check || has_mode perf; then
  has_lib nccl && need_nt_real=1
  has_lib anyccl && { need_anyccl=1; need_nt_ours=1; }
  has_lib xabi && { need_anyccl=1; need_nt_real=1; }
fi
if { [ $need_nt_real = 1 ] || [ $need_nt_ours = 1 ]; } && [ ! -f "$NCCL_TESTS_SRC/src/common.cu" ]; then
  info nccl_tests_src "MISSING: $NCCL_TESTS_SRC (set NCCL_TESTS_SRC to a checkout of github.com/NVIDIA/nccl-tests)"
  need_nt_real=0; need_nt_ours=0
else
  [ -d "$NCCL_TESTS_SRC/.git" ] && info nccl_tests_src "$NCCL_TESTS_SRC ($(git -C "$NCCL_TESTS_SRC" log -1 --format='%h %s' 2>/dev/null))"
fi

# nccl-tests' headers.  A nccl.h of 2.28 or later makes nccl-tests include
# nccl_device.h (device-API code; its host calls are weak symbols, unused
# unless -D is given).  anyccl installs its own nccl_device.h (tried first);
# for a library without one, borrow one (the real NCCL's, else CUDA's), else
# fall back to a wrapper nccl.h that reports 2.27 so that nccl-tests leaves
# that code out.
# NT_HEADERS=auto|device|cap227 forces one.  Sets RC; the header set used goes
# to $WORK/nt-<name>.hdr.
NT_HEADERS=${NT_HEADERS:-auto}
build_nt_headers() {  # name incdir libdir
  local name=$1 inc=$2 lib=$3 pfx="$WORK/prefix-$1" attempts="" a d seen=" " n=0
  local f="$LOGDIR/build-nccl-tests-$1.log"
  rm -f "$WORK/nt-$name.hdr" "$LOGDIR/build-nccl-tests-$name".*.log
  if [ "$SKIP_BUILD" = 1 ] && nt_bins_ok "$WORK/nt-$name"; then
    RC=0; echo reused > "$WORK/nt-$name.hdr"
    record build nccl-tests - "$name" 0 0 - "reused $WORK/nt-$name"; return
  fi
  for d in "$inc" "$NCCL_REAL_HOME/include" "$CUDA_HOME/include"; do
    case $seen in *" $d "*) continue ;; esac; seen="$seen$d "
    [ -f "$d/nccl_device.h" ] && attempts="$attempts device:$d"
  done
  attempts="$attempts cap227"
  RC=none
  for a in $attempts; do
    case $NT_HEADERS in auto) ;; *) [ "${a%%:*}" = "$NT_HEADERS" ] || continue ;; esac
    n=$((n + 1))
    make_prefix "$pfx" "$inc" "$lib"
    case $a in
      device:*) d=${a#device:}; ln -s "$d/nccl_device.h" "$pfx/include/"
                [ -d "$d/nccl_device" ] && ln -s "$d/nccl_device" "$pfx/include/" ;;
      cap227)   rm -f "$pfx/include/nccl.h"
                cat > "$pfx/include/nccl.h" <<EOF
/* generated by tests/gpu/run.sh: $inc/nccl.h, reported as 2.27 so that
   nccl-tests leaves out its device-API (nccl_device.h) code. */
#include "$inc/nccl.h"
#undef NCCL_MINOR
#define NCCL_MINOR 27
#undef NCCL_PATCH
#define NCCL_PATCH 0
#undef NCCL_VERSION_CODE
#define NCCL_VERSION_CODE NCCL_VERSION(2, 27, 0)
EOF
                ;;
    esac
    log "[build] nccl-tests against $name (headers: $a) ..."
    rm -rf "$WORK/nt-$name"
    build_nt "$name" "$pfx"
    log "[build] nccl-tests against $name (headers: $a): rc=$RC"
    if [ "$RC" = 0 ]; then echo "$a" > "$WORK/nt-$name.hdr"; info "nccl_tests_headers_$name" "$a"; return; fi
    mv -f "$f" "$LOGDIR/build-nccl-tests-$name.$n.log" 2>/dev/null
  done
}
append_build_logs() {  # name
  local g
  for g in "$LOGDIR/build-nccl-tests-$1".*.log "$LOGDIR/build-nccl-tests-$1.log"; do
    [ -f "$g" ] && append_log "build nccl-tests against $1: $(basename "$g")" "$g"
  done
}

# nccl-tests against the real NCCL, in the background while anyccl builds.
NT_REAL_PID=""
if [ $need_nt_real = 1 ]; then
  if [ -n "$REAL_LIBDIR" ] && [ -f "$NCCL_REAL_HOME/include/nccl.h" ]; then
    ( build_nt_headers nccl "$NCCL_REAL_HOME/include" "$REAL_LIBDIR" ) &
    NT_REAL_PID=$!
  else
    record build nccl-tests - nccl no-real-nccl 0 - "real NCCL not found"
    log "[build] real NCCL not found: no NCCL runs"
  fi
fi

OUR_LIBDIR=""
if [ $need_anyccl = 1 ]; then
  t0=$SECONDS; f="$LOGDIR/build-anyccl.log"
  if [ "$SKIP_BUILD" = 1 ] && ls "$PREFIX"/lib*/libnccl.so.2 >/dev/null 2>&1; then RC=0
  else
    log "[build] anyccl: cmake configure/build/install -> $PREFIX ..."
    run_logged "$BUILD_TIMEOUT" "$f" bash -c "cmake -S '$ROOT' -B '$BUILD_DIR' -DCMAKE_BUILD_TYPE=Release $CMAKE_ARGS && cmake --build '$BUILD_DIR' -j $JOBS && cmake --install '$BUILD_DIR' --prefix '$PREFIX'"
  fi
  OUR_LIBDIR=$(dirname "$(ls "$PREFIX"/lib*/libnccl.so.2 2>/dev/null | head -n 1)" 2>/dev/null)
  [ "$RC" = 0 ] && [ -z "$OUR_LIBDIR" ] && RC=no-libnccl.so.2
  record build anyccl - anyccl "$RC" $((SECONDS - t0)) "$f" "cmake build+install"
  append_log "build anyccl (rc=$RC)" "$f"
  log "[build] anyccl: rc=$RC libdir=${OUR_LIBDIR:-none} ($((SECONDS - t0))s)"
  [ "$RC" = 0 ] || OUR_LIBDIR=""
fi

if [ $need_nt_ours = 1 ] && [ -n "$OUR_LIBDIR" ]; then
  build_nt_headers anyccl "$PREFIX/include" "$OUR_LIBDIR"
  append_build_logs anyccl
elif [ $need_nt_ours = 1 ]; then
  record build nccl-tests - anyccl no-anyccl 0 - "anyccl did not build"
fi

if [ -n "$NT_REAL_PID" ]; then
  wait "$NT_REAL_PID"
  append_build_logs nccl
fi
summarize

# ---------------------------------------------------------------- runs
# lib -> binaries dir and library dir
lib_bindir() { case $1 in nccl|xabi) echo "$WORK/nt-nccl" ;; anyccl) echo "$WORK/nt-anyccl" ;; esac; }
lib_libdir() { case $1 in nccl) echo "$REAL_LIBDIR" ;; anyccl|xabi) echo "$OUR_LIBDIR" ;; esac; }
LIB_LIST=$(echo "$LIBS" | tr ',' ' ')

declare -A LDD_DONE=()
check_ldd() {  # lib binary libdir: record where libnccl.so.2 resolves once per lib
  [ -n "${LDD_DONE[$1]:-}" ] && return; LDD_DONE[$1]=1
  command -v ldd >/dev/null 2>&1 || { info "ldd_$1" "ldd unavailable"; return; }
  local got; got=$(LD_LIBRARY_PATH="$3:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" ldd "$2" 2>/dev/null | awk '/libnccl\.so/{print $3}')
  local want; want=$(readlink -f "$3/libnccl.so.2" 2>/dev/null)
  if [ "$(readlink -f "$got" 2>/dev/null)" = "$want" ]; then info "ldd_$1" "libnccl.so.2 -> $got (ok)"
  else info "ldd_$1" "libnccl.so.2 -> ${got:-not found} (WRONG: wanted $want)"; fi
}

run_nt() {  # kind bin variant lib timeout args...
  local kind=$1 bin=$2 var=$3 lib=$4 t=$5; shift 5
  local bdir libdir exe f t0
  bdir=$(lib_bindir "$lib"); libdir=$(lib_libdir "$lib"); exe="$bdir/${bin}_perf"
  f="$LOGDIR/$kind.$bin.$var.$lib.log"
  if [ -z "$libdir" ] || [ ! -x "$exe" ]; then
    record "$kind" "$bin" "$var" "$lib" not-built 0 - "$exe"; return
  fi
  check_ldd "$lib" "$exe" "$libdir"
  local pre=()
  if [ "$var" = mpi ]; then
    if "$MPIRUN" --version 2>&1 | grep -qi 'open mpi'; then
      pre=("$MPIRUN" -np "$NGPU" --allow-run-as-root --oversubscribe --bind-to none
           -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x PATH)
      for v in $(env | sed -n 's/^\(\(NCCL\|ANYCCL\|CUDA\)_[A-Za-z0-9_]*\)=.*/\1/p'); do pre+=(-x "$v"); done
    else
      pre=("$MPIRUN" -np "$NGPU" -genvall)
    fi
  fi
  t0=$SECONDS
  LD_LIBRARY_PATH="$libdir:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" run_logged "$t" "$f" ${pre[@]+"${pre[@]}"} "$exe" "$@"
  record "$kind" "$bin" "$var" "$lib" "$RC" $((SECONDS - t0)) "$f" "$exe $*"
  log "[$kind] $bin $var $lib: rc=$RC ($((SECONDS - t0))s)"
  append_log "[$kind] $bin $var $lib (rc=$RC)" "$f"
  summarize
}

if has_mode check; then
  for bin in $CHECK_BINS; do
    case $bin in all_reduce|reduce|reduce_scatter) dt=(-d all -o all) ;; *) dt=(-d all) ;; esac
    for var in $CHECK_VARIANTS; do
      case $var in
        proc)    vargs=(-g "$NGPU") ;;
        threads) vargs=(-t "$NGPU" -g 1) ;;
        graph)   vargs=(-g "$NGPU" -G 1) ;;
        mpi)     if [ ${#MPI_ARGS[@]} -eq 0 ] || [ -z "$MPIRUN" ]; then
                   for lib in $LIB_LIST; do record check "$bin" mpi "$lib" no-mpi 0 - "no MPI build"; done; continue
                 fi
                 vargs=(-g 1) ;;
        *) log "unknown check variant $var"; continue ;;
      esac
      for lib in $LIB_LIST; do
        # shellcheck disable=SC2086
        run_nt check "$bin" "$var" "$lib" "$CHECK_TIMEOUT" $CHECK_SIZES $CHECK_ITERS -c 1 "${dt[@]}" "${vargs[@]}" $CHECK_EXTRA
      done
    done
  done
fi

if has_mode perf; then
  pvars="plain"; [ "$PERF_GRAPH" = 1 ] && pvars="plain graph"
  for bin in $PERF_BINS; do
    for var in $pvars; do
      gargs=(); [ "$var" = graph ] && gargs=(-G 1)
      for lib in $LIB_LIST; do
        # shellcheck disable=SC2086
        run_nt perf "$bin" "$var" "$lib" "$PERF_TIMEOUT" -c 0 $PERF_SIZES -g "$NGPU" $PERF_ITERS ${gargs[@]+"${gargs[@]}"} $PERF_EXTRA
      done
    done
  done
fi

if has_mode ours; then
  f="$LOGDIR/ours.coll_gpu.log"
  if [ -x "$COLL_GPU" ]; then
    t0=$SECONDS
    # shellcheck disable=SC2086
    NGPU=$NGPU run_logged "$TIMEOUT" "$f" "$COLL_GPU" $OURS_ARGS
    record ours coll_gpu - anyccl "$RC" $((SECONDS - t0)) "$f" "$COLL_GPU $OURS_ARGS"
    log "[ours] coll_gpu: rc=$RC ($((SECONDS - t0))s)"
    append_log "[ours] coll_gpu (rc=$RC)" "$f"
  else
    record ours coll_gpu - anyccl not-built 0 - "$COLL_GPU"
    log "[ours] $COLL_GPU not found"
  fi
fi

# ---------------------------------------------------------------- wrap up
summarize
( cd "$OUT/runs/logs" && tar czf "$OUT/logs.tgz" all ) 2>/dev/null
[ "$KEEP_RAW" = 0 ] && rm -rf "$OUT/runs"
{ echo; echo "===== summary ($(elapsed)s)"; cat "$SUMMARY"; } >> "$GPULOG"
echo
echo "logs: $GPULOG  $SUMMARY  $OUT/logs.tgz   ($(elapsed)s)"
cat "$SUMMARY"
# exit status: 0 when nothing failed (builds, runs; SKIPs do not count), else 1
head -n 1 "$SUMMARY" | grep -q 'no failures'
