#!/bin/bash
# The sim backend's validation data (docs/simulation.md): on a GPU host, the
# seven nccl-tests perf tools against anyccl's cuda backend and NCCL 2.28.9
# (the nvidia.nccl wheel), eager and with CUDA graphs (-G), raw outputs kept
# for tools/sim-fit (calibration) and tools/sim-compare (error tables).
#
#   OUT=dir bash tests/gpu/sim_validate.sh
#
# Finds (each overridable):
#   G=gp                      the carried prebuilt folder
#   NT=$G/nt                  nccl-tests binaries built against anyccl's nccl.h
#                             (a tool missing there is compiled from perf/ with cc
#                             against $ANYLIB and CUDA: anyccl's own perf tools,
#                             the same table; they ignore -G, so its graph runs
#                             are skipped)
#   ANYLIB=$G/prefix/lib      anyccl's libnccl.so.2 (cuda backend)
#   NCCLLIB=<nvidia.nccl>/lib NCCL's libnccl.so.2
# Knobs: NGPU (default: all GPUs), SIZES ("-b 8 -e 512M -f 2"), ITERS
# ("-n 10 -w 3"), COLLS (the seven), GRAPHS ("0 1": -G 0 and -G 1), LIBS
# ("anyccl nccl"), DEADLINE (330 s: no run starts after it), RUN_TIMEOUT (60 s).
# Output: $OUT/raw-<NGPU>g.tgz holding <NGPU>g/: <coll>.<lib>.G<g>.txt (nccl-tests output as is),
# calib.*.txt (one-channel runs: a lane's throughput), timeline-*.tgz
# (ANYCCL_CUDA_TIMELINE of a small all_reduce), env.txt (GPUs, topology,
# versions, ldd), index.tsv (run, rc, seconds); and $OUT/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
START=$(date +%s)
OUT=${OUT:-$ROOT/gpu-out}
G=${G:-$ROOT/gp}
NT=${NT:-$G/nt}
ANYLIB=${ANYLIB:-$G/prefix/lib}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCLLIB=${NCCLLIB:-$(python3 -c 'import nvidia.nccl,os; print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
SIZES=${SIZES:--b 8 -e 512M -f 2}
ITERS=${ITERS:--n 10 -w 3}
COLLS=${COLLS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}
GRAPHS=${GRAPHS:-0 1}
LIBS=${LIBS:-anyccl nccl}
DEADLINE=${DEADLINE:-330}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
D=$OUT/${NGPU}g
mkdir -p "$D"
SUM=$OUT/summary.txt
IDX=$D/index.tsv
: > "$IDX"
say() { echo "$*" | tee -a "$SUM"; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }

say "sim_validate: $NGPU GPUs, $(date -u +%FT%TZ), NT=$NT ANYLIB=$ANYLIB NCCLLIB=$NCCLLIB"
[ "$NGPU" -ge 1 ] 2>/dev/null || { say "no GPU found (nvidia-smi -L)"; exit 1; }
[ -f "$ANYLIB/libnccl.so.2" ] || { say "no anyccl library at $ANYLIB/libnccl.so.2"; exit 1; }
ANYLIB=$(cd "$ANYLIB" && pwd)
[ -f "$NCCLLIB/libnccl.so.2" ] || say "no NCCL at '$NCCLLIB' (pip nvidia-nccl-cu12): NCCL runs skipped"

{
  nvidia-smi -L; nvidia-smi topo -m
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  echo "nccl wheel: $(python3 -c 'import importlib.metadata as m; print(m.version("nvidia-nccl-cu12"))' 2>/dev/null)"
  echo "anyccl: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null) $(strings "$ANYLIB/libnccl.so.2" 2>/dev/null | grep -m1 -i 'anyccl.*version')"
  echo "SIZES=$SIZES ITERS=$ITERS NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
} > "$D/env.txt" 2>&1

# Tools missing from $NT: anyccl's own perf tools, compiled with cc (no nvcc).
PT=${TMPDIR:-/tmp}/sim_validate_perftools.$$
trap 'rm -rf "$PT"' EXIT
tool() { # coll -> path of the binary, "" if none
  if [ -x "$NT/${1}_perf" ]; then echo "$NT/${1}_perf"; return; fi
  local exe=$PT/${1}_perf
  if [ ! -x "$exe" ]; then
    mkdir -p "$PT"
    ln -sf "$ANYLIB/libnccl.so.2" "$PT/libnccl.so" # linking needs the unversioned name
    cc -O2 -std=gnu11 -o "$exe" "perf/$1.c" perf/common.c perf/options.c perf/data.c perf/report.c \
      -I"$G/prefix/include" -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -L"$PT" -lcudart -lnccl -lpthread -lm -ldl \
      >> "$D/build.log" 2>&1 || { echo "cc $1 failed (see build.log)" >> "$SUM"; return; }
  fi
  echo "$exe"
}
is_nt() { case "$1" in "$NT"/*) return 0 ;; esac; return 1; }

libdir() { if [ "$1" = anyccl ]; then echo "$ANYLIB"; else echo "$NCCLLIB"; fi; }
for lib in $LIBS; do
  exe=$(tool all_reduce)
  [ -n "$exe" ] && echo "ldd $lib: $(LD_LIBRARY_PATH=$(libdir "$lib"):$CUDA_HOME/lib64 ldd "$exe" | awk '/libnccl/{print $3}')" >> "$D/env.txt"
done

run() { # name lib exe args... : one nccl-tests run under timeout
  local name=$1 lib=$2 exe=$3
  shift 3
  local l; l=$(left)
  if [ "$l" -le 5 ]; then echo -e "$name\tskipped(deadline)\t0" >> "$IDX"; return; fi
  local t=$RUN_TIMEOUT
  [ "$l" -lt "$t" ] && t=$l
  local s; s=$(date +%s)
  LD_LIBRARY_PATH="$(libdir "$lib"):$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" timeout -k 5 "$t" "$exe" "$@" \
    > "$D/$name.txt" 2>&1 < /dev/null
  local rc=$?
  echo -e "$name\t$rc\t$(($(date +%s) - s))" >> "$IDX"
  local rows; rows=$(grep -cE '^ +[0-9]+ ' "$D/$name.txt")
  say "$(printf '%-34s rc=%-3s rows=%-3s %3ss' "$name" "$rc" "$rows" "$(($(date +%s) - s))")"
}

# 1. every collective, both libraries, eager then graphs
for gr in $GRAPHS; do
  for c in $COLLS; do
    exe=$(tool "$c")
    [ -n "$exe" ] || continue
    if [ "$gr" != 0 ] && ! is_nt "$exe"; then echo -e "$c.G$gr\tskipped(no -G in perf/)\t0" >> "$IDX"; continue; fi
    for lib in $LIBS; do
      [ -f "$(libdir "$lib")/libnccl.so.2" ] || continue
      # shellcheck disable=SC2086
      run "$c.$lib.G$gr" "$lib" "$exe" $SIZES $ITERS -g "$NGPU" -c 0 $( is_nt "$exe" && echo "-G $gr")
    done
  done
done
# 2. one lane (NCCL_MAX_NCHANNELS=1 on anyccl): a block's throughput and a
#    step's latency, for the calibration
exe=$(tool all_reduce)
if [ -n "$exe" ]; then
  # shellcheck disable=SC2086
  NCCL_MAX_NCHANNELS=1 run calib.all_reduce.1ch anyccl "$exe" -b 8 -e 256M -f 4 $ITERS -g "$NGPU" -c 0
fi
exe=$(tool sendrecv)
if [ -n "$exe" ]; then
  # shellcheck disable=SC2086
  ANYCCL_CUDA_P2P_CHANNELS=1 run calib.sendrecv.1ch anyccl "$exe" -b 8 -e 256M -f 4 $ITERS -g "$NGPU" -c 0
fi
# 3. a measured timeline (the cuda backend's trace source): small all_reduce
exe=$(tool all_reduce)
if [ -n "$exe" ] && [ "$(left)" -gt 20 ]; then
  mkdir -p "$D/tl"
  ANYCCL_CUDA_TIMELINE=$D/tl/all_reduce ANYCCL_TRACE=$D/tl/all_reduce.trace.json \
    run timeline.all_reduce anyccl "$exe" -b 64K -e 4M -f 8 -n 2 -w 1 -g "$NGPU" -c 0
  tar -C "$D" -czf "$D/timeline-all_reduce.tgz" tl && rm -rf "$D/tl"
fi
# the device tool brings back a few files only: one archive (KEEP_RAW=1 keeps the folder too)
tar -C "$OUT" -czf "$OUT/raw-${NGPU}g.tgz" "${NGPU}g" && [ "${KEEP_RAW:-0}" = 1 ] || rm -rf "$D"
say "done in $(($(date +%s) - START)) s; raw outputs in $OUT/raw-${NGPU}g.tgz (tar -xzf: ${NGPU}g/)"
say "fit:     tools/sim-fit.sh ${NGPU}g > my.calib"
say "compare: tools/sim-compare.sh ${NGPU}g"
