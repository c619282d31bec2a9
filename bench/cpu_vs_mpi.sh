#!/usr/bin/env bash
# bench/cpu_vs_mpi.sh: anyccl (cpu backend) against Open MPI and MPICH on this
# machine, same ranks, same sizes, back to back, and the result written into
# docs/performance.md (between <!-- cpu_vs_mpi:begin --> and
# <!-- cpu_vs_mpi:end -->) with plots in docs/perf/.
#
#   bench/cpu_vs_mpi.sh              # the full comparison (about 20 min on 2 cores)
#   bench/cpu_vs_mpi.sh -q           # a quick pass through every step (2 ranks, 1 repetition)
#   bench/cpu_vs_mpi.sh -h           # the options
#
# What it does, from a fresh clone:
#   1. installs what is missing (apt-get: openmpi-bin libopenmpi-dev mpich
#      libmpich-dev gnuplot-nox iperf3 cmake build-essential pkg-config
#      libexpat1-dev), as root or through sudo;
#   2. builds anyccl (Release) with the perf tools against Open MPI
#      (build-bench/), bench/mpi_coll_bench.c with mpicc.openmpi and
#      mpicc.mpich, bench/memcpy_bound.c;
#   3. measures the memory bandwidth (memcpy_bound, at the start and the end);
#   4. float32 sum all-reduce over -b..-e (factor -f) for each rank count,
#      repeated -k times; within a repetition the four libraries run back to
#      back: anyccl processes (mpirun.openmpi of build-bench/perf/all_reduce_perf),
#      anyccl threads (one process, -g N), Open MPI, MPICH (mpi_coll_bench).
#      Sizes below 2 MB run with -n SMALL_ITERS, from 2 MB on with -n LARGE_ITERS;
#   5. every other collective at 32 MB, the same way (2 and 4 ranks: -C);
#   6. iperf3 -P 4 over loopback, then sendrecv_perf across 2 virtual hosts
#      (NCCL_HOSTID = MPI rank, NCCL_SOCKET_IFNAME==lo: the network
#      transport), back to back, -k times;
#   7. medians over the repetitions, a summary (targets met or not),
#      gnuplot PNGs, docs/performance.md.
#
# Raw logs: bench/results/<date>/raw/ (each starts with its command line and
# the load average before and after); bench/results/<date>/summary.md is the
# part meant to be kept (the results directory gets a .gitignore that ignores
# everything else). Runs that fail or time out are listed in the summary; the
# script goes on.
#
# NCCL_* and ANYCCL_* variables in the environment reach the anyccl runs.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
CMDLINE="bench/cpu_vs_mpi.sh${*:+ $*}"

# ---- options -----------------------------------------------------------------
RANKS="2 4 8"           # rank counts of the all-reduce sweep
COLL_RANKS="2 4"        # rank counts of the every-collective runs at COLL_SIZE ("" skips)
REPS=3                  # repetitions (median reported)
MINB=8 MAXB=32M FACTOR=4
SPLIT=2M                # sizes from here on use LARGE_ITERS
SMALL_ITERS=10 SMALL_WARMUP=2
LARGE_ITERS=5 LARGE_WARMUP=1
COLL_SIZE=32M COLL_ITERS=5
NET=1 NET_SECONDS=5     # iperf3 -t
INSTALL=1 DOCS=1
BUILD=build-bench
OUT=""
RUN_TIMEOUT=${RUN_TIMEOUT:-300} # seconds per launch
CHECK=1                 # 1: the tools check the data (-c 1) in the first repetition; 0: never

usage() {
  cat <<EOF
usage: bench/cpu_vs_mpi.sh [options]
  -r "2 4 8"   rank counts of the all-reduce sweep          (default: $RANKS)
  -C "2 4"     rank counts of the every-collective runs     (default: $COLL_RANKS; "" skips them)
  -k N         repetitions, the median is reported          (default: $REPS)
  -b 8 -e 32M -f 4   all-reduce sizes                       (default: $MINB .. $MAXB, factor $FACTOR)
  -s 32M       size of the every-collective runs            (default: $COLL_SIZE)
  -n N / -m N  iterations below 2 MB / from 2 MB on         (default: $SMALL_ITERS / $LARGE_ITERS)
  -c 0         no data check after the timing               (default: check in the first repetition)
  -N           skip the network part (iperf3, sendrecv across virtual hosts)
  -I           install nothing
  -D           leave docs/ alone (results directory only)
  -B DIR       anyccl build directory                       (default: $BUILD)
  -o DIR       results directory                            (default: bench/results/<date>)
  -q           quick check of the script: 2 ranks, 1 repetition, 2 iterations, 1 s of iperf3
  -A DIR       no runs: analyse DIR (an earlier results directory) again, rewrite its summary, plots, docs
  -h           this help
Environment: RUN_TIMEOUT (seconds per launch, default 300), NCCL_*/ANYCCL_* (passed to anyccl).
EOF
}

ANALYZE=""
while getopts "r:C:k:b:e:f:s:n:m:c:NIDB:o:A:qh" o; do
  case $o in
    r) RANKS=$OPTARG ;;
    C) COLL_RANKS=$OPTARG ;;
    k) REPS=$OPTARG ;;
    b) MINB=$OPTARG ;;
    e) MAXB=$OPTARG ;;
    f) FACTOR=$OPTARG ;;
    s) COLL_SIZE=$OPTARG ;;
    n) SMALL_ITERS=$OPTARG ;;
    m) LARGE_ITERS=$OPTARG ;;
    c) CHECK=$OPTARG ;;
    N) NET=0 ;;
    I) INSTALL=0 ;;
    D) DOCS=0 ;;
    B) BUILD=$OPTARG ;;
    o) OUT=$OPTARG ;;
    A) ANALYZE=$OPTARG OUT=$OPTARG ;;
    q) RANKS=2 COLL_RANKS=2 REPS=1 SMALL_ITERS=2 LARGE_ITERS=2 COLL_ITERS=2 NET_SECONDS=1 SMALL_WARMUP=1 ;;
    h) usage; exit 0 ;;
    *) usage; exit 1 ;;
  esac
done

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-bench/results/$STAMP}
mkdir -p "$OUT/raw" "$OUT/data" || exit 1
LOG="$OUT/cpu_vs_mpi.log"
log() { echo "[$(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)] $*" | tee -a "$LOG"; }
die() { log "error: $*"; exit 1; }
# Keep the summary, ignore the raw logs.
printf '*\n!.gitignore\n!summary.md\n' > "$OUT/.gitignore"

bytes() { # 32M -> 33554432 (binary K, M, G as the tools)
  local v=$1 m=1
  case $v in *[kK]) m=1024 v=${v%?} ;; *[mM]) m=$((1 << 20)) v=${v%?} ;; *[gG]) m=$((1 << 30)) v=${v%?} ;; esac
  echo $((v * m))
}
MINB_B=$(bytes "$MINB") MAXB_B=$(bytes "$MAXB") SPLIT_B=$(bytes "$SPLIT") COLL_B=$(bytes "$COLL_SIZE")

LIBS="anyccl-proc anyccl-thr openmpi mpich"
lib_label() {
  case $1 in
    anyccl-proc) echo "anyccl, processes" ;; anyccl-thr) echo "anyccl, threads (-g N)" ;;
    openmpi) echo "Open MPI $OMPI_VER" ;; mpich) echo "MPICH $MPICH_VER" ;; *) echo "$1" ;;
  esac
}

if [ -z "$ANALYZE" ]; then # the runs (sections 1 to 6)

# ---- 1. install what is missing ------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
install_missing() {
  local pkgs=()
  { have mpicc.openmpi && have mpirun.openmpi; } || pkgs+=(openmpi-bin libopenmpi-dev)
  { have mpicc.mpich && have mpirun.mpich; } || pkgs+=(mpich libmpich-dev)
  have gnuplot || pkgs+=(gnuplot-nox)
  have iperf3 || pkgs+=(iperf3)
  have cmake || pkgs+=(cmake)
  { have cc && have make; } || pkgs+=(build-essential)
  have pkg-config || pkgs+=(pkg-config)
  [ -e /usr/include/expat.h ] || pkgs+=(libexpat1-dev)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  [ "$INSTALL" = 1 ] || die "missing: ${pkgs[*]} (and -I given)"
  have apt-get || die "missing: ${pkgs[*]}; no apt-get here, install them by hand"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    have sudo || die "missing: ${pkgs[*]}; not root and no sudo"
    sudo=sudo
  fi
  log "installing: ${pkgs[*]}"
  $sudo apt-get update >>"$LOG" 2>&1 || die "apt-get update failed (see $LOG)"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >>"$LOG" 2>&1 ||
    die "apt-get install failed (see $LOG)"
}
install_missing
for c in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich gnuplot cmake cc; do have $c || die "$c not found"; done
[ "$NET" = 0 ] || have iperf3 || die "iperf3 not found"
# Open MPI refuses root unless told.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export ANYCCL_PERF_NO_PROGRESS=1

# ---- 2. build ------------------------------------------------------------------------
PERF_TOOLS="all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf reduce_perf alltoall_perf gather_perf scatter_perf sendrecv_perf"
build() {
  log "building anyccl (Release, perf tools with Open MPI) in $BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DANYCCL_PERF_MPI=ON \
    -DMPI_C_COMPILER="$(command -v mpicc.openmpi)" >>"$LOG" 2>&1 || return 1
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "$(nproc)" --target $PERF_TOOLS >>"$LOG" 2>&1 || return 1
  grep -q '^ANYCCL_PERF_WITH_MPI:INTERNAL=ON' "$BUILD/CMakeCache.txt" || { log "perf tools built without MPI"; return 1; }
}
# The tree may be mid-edit by someone else: one more try after a pause.
build || { log "build failed, trying again in 30 s"; sleep 30; build; } || die "anyccl build failed (see $LOG)"
BIN="$BUILD/bench"
mkdir -p "$BIN"
mpicc.openmpi -O3 -o "$BIN/mpi_coll_bench_openmpi" bench/mpi_coll_bench.c >>"$LOG" 2>&1 || die "mpicc.openmpi failed"
mpicc.mpich -O3 -o "$BIN/mpi_coll_bench_mpich" bench/mpi_coll_bench.c >>"$LOG" 2>&1 || die "mpicc.mpich failed"
cc -O3 -o "$BIN/memcpy_bound" bench/memcpy_bound.c -lpthread >>"$LOG" 2>&1 || die "memcpy_bound build failed"

# ---- the machine --------------------------------------------------------------------
NPROC=$(nproc)
MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo | tr -d "'\"")
MEMG=$(awk '/^MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
KERNEL=$(uname -r)
L3=$(lscpu 2>/dev/null | awk -F: '/^L3/ {gsub(/^ +/, "", $2); print $2; exit}')
OMPI_VER=$(mpirun.openmpi --version 2>/dev/null | awk 'NR == 1 {print $NF}')
MPICH_VER=$(mpirun.mpich --version 2>/dev/null | awk '/Version:/ {print $NF; exit}')
GCC_VER=$(cc -dumpfullversion 2>/dev/null || cc -dumpversion)
ANYCCL_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src cpu-runtime perf include 2>/dev/null || ANYCCL_REV="$ANYCCL_REV + local changes"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
log "machine: $NPROC cpus, $MODEL, ${MEMG} GiB, L3 $L3; Open MPI $OMPI_VER, MPICH $MPICH_VER; anyccl $ANYCCL_REV"

# ---- running one launch ---------------------------------------------------------------
FAILED="$OUT/data/failed.txt"
: >"$FAILED"
XENV=()
for v in $(env | grep -oE '^(NCCL|ANYCCL)_[A-Za-z0-9_]+' | sort -u); do XENV+=(-x "$v"); done

# run LOG CMD...: the command line and the load before/after go into LOG.
run() {
  local out=$1 rc
  shift
  {
    echo "# cmd: $*"
    echo "# start: $(date '+%F %T') loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$out"
  timeout -k 10 "$RUN_TIMEOUT" "$@" >>"$out" 2>&1
  rc=$?
  echo "# end: $(date '+%F %T') loadavg: $(cut -d' ' -f1-3 /proc/loadavg) rc: $rc" >>"$out"
  if [ $rc -ne 0 ]; then
    echo "$(basename "$out") rc=$rc$([ $rc -eq 124 ] && echo ' (timed out)')" >>"$FAILED"
    log "  FAILED (rc $rc): $(basename "$out")"
  fi
  return 0
}

perf_tool() { # allreduce -> all_reduce_perf
  case $1 in
    allreduce) echo all_reduce_perf ;; allgather) echo all_gather_perf ;; reducescatter) echo reduce_scatter_perf ;;
    broadcast) echo broadcast_perf ;; reduce) echo reduce_perf ;; alltoall) echo alltoall_perf ;;
    gather) echo gather_perf ;; scatter) echo scatter_perf ;; sendrecv) echo sendrecv_perf ;;
  esac
}
# launch LIB NP COLLS LOGPREFIX ARGS...: one launch per collective for anyccl, one for all of them for MPI.
launch() {
  local lib=$1 np=$2 colls=$3 prefix=$4 c
  shift 4
  case $lib in
    anyccl-proc)
      for c in ${colls//,/ }; do
        run "${prefix}_$c.log" mpirun.openmpi -np "$np" --oversubscribe --bind-to none "${XENV[@]}" \
          "$BUILD/perf/$(perf_tool "$c")" -c "$CK" "$@"
      done ;;
    anyccl-thr)
      for c in ${colls//,/ }; do
        run "${prefix}_$c.log" "$BUILD/perf/$(perf_tool "$c")" -g "$np" -c "$CK" "$@"
      done ;;
    openmpi) run "${prefix}.log" mpirun.openmpi -np "$np" --oversubscribe "$BIN/mpi_coll_bench_openmpi" -c "$colls" -c "$CK" "$@" ;;
    mpich) run "${prefix}.log" mpirun.mpich -np "$np" "$BIN/mpi_coll_bench_mpich" -c "$colls" -c "$CK" "$@" ;;
  esac
}

# ---- 3. memory bandwidth ----------------------------------------------------------------
log "memory bandwidth (memcpy_bound)"
run "$OUT/raw/memcpy_start.log" "$BIN/memcpy_bound" -t "1,$((NPROC < 2 ? 1 : 2))"

# ---- 4. all-reduce sweep ---------------------------------------------------------------
# small part: MINB .. the last size below SPLIT; large part: the first size from SPLIT on .. MAXB
SMALL_E=0 LARGE_B=0
s=$MINB_B
while [ "$s" -le "$MAXB_B" ]; do
  if [ "$s" -lt "$SPLIT_B" ]; then SMALL_E=$s; elif [ "$LARGE_B" = 0 ]; then LARGE_B=$s; fi
  [ "$s" = 0 ] && s=1 || s=$((s * FACTOR))
done
for np in $RANKS; do
  for rep in $(seq 1 "$REPS"); do
    log "all-reduce, $np ranks, repetition $rep/$REPS"
    CK=$([ "$CHECK" = 1 ] && [ "$rep" = 1 ] && echo 1 || echo 0)
    for lib in $LIBS; do
      if [ "$SMALL_E" -gt 0 ]; then
        launch "$lib" "$np" allreduce "$OUT/raw/sweep_${lib}_np${np}_rep${rep}_small" \
          -b "$MINB_B" -e "$SMALL_E" -f "$FACTOR" -n "$SMALL_ITERS" -w "$SMALL_WARMUP"
      fi
      if [ "$LARGE_B" -gt 0 ]; then
        launch "$lib" "$np" allreduce "$OUT/raw/sweep_${lib}_np${np}_rep${rep}_large" \
          -b "$LARGE_B" -e "$MAXB_B" -f "$FACTOR" -n "$LARGE_ITERS" -w "$LARGE_WARMUP"
      fi
    done
  done
done

# ---- 5. every other collective at COLL_SIZE ----------------------------------------------
COLLS="allgather,reducescatter,broadcast,reduce,alltoall,gather,scatter,sendrecv"
for np in $COLL_RANKS; do
  for rep in $(seq 1 "$REPS"); do
    log "collectives at $COLL_SIZE, $np ranks, repetition $rep/$REPS"
    CK=$([ "$CHECK" = 1 ] && [ "$rep" = 1 ] && echo 1 || echo 0)
    for lib in $LIBS; do
      launch "$lib" "$np" "$COLLS" "$OUT/raw/coll_${lib}_np${np}_rep${rep}" \
        -b "$COLL_B" -e "$COLL_B" -n "$COLL_ITERS" -w 1
    done
  done
done

# ---- 6. network: iperf3 -P 4 vs sendrecv across 2 virtual hosts ---------------------------
iperf_pair() { # LOG [extra iperf3 client flags]: a one-off server, then the client
  local out=$1 port spid
  shift
  port=$((20000 + RANDOM % 20000))
  iperf3 -s -1 -p "$port" >"$out.server" 2>&1 &
  spid=$!
  sleep 1
  run "$out" iperf3 -c 127.0.0.1 -p "$port" -P 4 -t "$NET_SECONDS" -f m "$@"
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  rm -f "$out.server"
}
if [ "$NET" = 1 ]; then
  for rep in $(seq 1 "$REPS"); do
    log "network: iperf3 -P 4 and sendrecv_perf across 2 virtual hosts, repetition $rep/$REPS"
    CK=$([ "$CHECK" = 1 ] && [ "$rep" = 1 ] && echo 1 || echo 0)
    iperf_pair "$OUT/raw/net_iperf3_rep${rep}.log"
    iperf_pair "$OUT/raw/net_iperf3bidir_rep${rep}.log" --bidir
    # shellcheck disable=SC2016
    run "$OUT/raw/net_anyccl-net_np2_rep${rep}_sendrecv.log" mpirun.openmpi -np 2 --oversubscribe --bind-to none \
      "${XENV[@]}" -x NCCL_SOCKET_IFNAME==lo \
      sh -c 'NCCL_HOSTID=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$BUILD/perf/sendrecv_perf" -c "$CK" \
      -b "$COLL_B" -e "$COLL_B" -n "$COLL_ITERS" -w 1
  done
fi

log "memory bandwidth again"
run "$OUT/raw/memcpy_end.log" "$BIN/memcpy_bound" -t "1,$((NPROC < 2 ? 1 : 2))"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
T_END=$(date +%s)
# what -A needs to analyse this directory again
declare -p RANKS COLL_RANKS COLLS REPS NET COLL_B COLL_SIZE NPROC MODEL MEMG KERNEL L3 OMPI_VER MPICH_VER GCC_VER \
  ANYCCL_REV LOAD_START LOAD_END T_START T_END CMDLINE FAILED >"$OUT/data/params.sh"
else
  [ -f "$OUT/data/params.sh" ] || die "$OUT/data/params.sh not found: not a results directory"
  # shellcheck disable=SC1091
  . "$OUT/data/params.sh"
  log "analysing $OUT again"
fi

# ---- 7. analysis -----------------------------------------------------------------------
D="$OUT/data"
log "analysis"
# Every table row of every log: section lib np coll rep size time busbw wrong time_ip busbw_ip wrong_ip
for f in "$OUT"/raw/sweep_*.log "$OUT"/raw/coll_*.log "$OUT"/raw/net_anyccl*.log; do
  [ -e "$f" ] || continue
  b=$(basename "$f" .log)
  awk -v name="$b" '
    BEGIN {
      n = split(name, p, "_"); sec = p[1]; lib = p[2]; np = substr(p[3], 3); rep = 0; coll = ""
      for (i = 4; i <= n; i++) {
        if (p[i] ~ /^rep[0-9]+$/) rep = substr(p[i], 4)
        else if (p[i] != "small" && p[i] != "large") coll = p[i]
      }
    }
    /^# Collective test starting: mpi_coll_bench -c / { coll = $7 }
    /^# Collective test starting: .*_perf/ { t = $5; sub(/_perf$/, "", t); gsub(/_/, "", t); if (t == "allreduce" || coll == "") coll = t }
    $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 == "float" && NF >= 13 {
      print sec "\t" lib "\t" np "\t" coll "\t" rep "\t" $1 "\t" $6 "\t" $8 "\t" $9 "\t" $10 "\t" $12 "\t" $13
    }' "$f"
done >"$D/rows.tsv"

# Medians over the repetitions (by out-of-place time; busbw from the same run):
# section lib np coll size reps time busbw time_min time_max wrong
awk -F'\t' '
  { k = $1 FS $2 FS $3 FS $4 FS $6; if (!(k in n)) order[++nk] = k
    i = ++n[k]; t[k, i] = $7 + 0; b[k, i] = $8 + 0
    if ($9 ~ /^[0-9]+$/) w[k] += $9; if ($12 ~ /^[0-9]+$/) w[k] += $12 }
  END {
    for (j = 1; j <= nk; j++) {
      k = order[j]; m = n[k]
      for (x = 1; x <= m; x++) idx[x] = x
      for (x = 2; x <= m; x++) for (y = x; y > 1 && t[k, idx[y]] < t[k, idx[y - 1]]; y--) { z = idx[y]; idx[y] = idx[y - 1]; idx[y - 1] = z }
      med = idx[int((m + 1) / 2)]
      printf "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", k, m, t[k, med], b[k, med], t[k, idx[1]], t[k, idx[m]], w[k] + 0
    }
  }' "$D/rows.tsv" | sort -t"$(printf '\t')" -k1,1 -k2,2 -k3,3n -k4,4 -k5,5n >"$D/medians.tsv"

# get SECTION LIB NP COLL SIZE FIELD(time|busbw|wrong|reps): one number, or empty
get() {
  awk -F'\t' -v s="$1" -v l="$2" -v n="$3" -v c="$4" -v z="$5" -v f="$6" '
    $1 == s && $2 == l && $3 == n && $4 == c && $5 == z {
      print (f == "time" ? $7 : f == "busbw" ? $8 : f == "wrong" ? $11 : f == "reps" ? $6 : "") ; exit }' "$D/medians.tsv"
}
# memory bandwidth: the best of both memcpy_bound runs. mem KERNEL THREADS COLUMN(moved|traffic)
mem() {
  cat "$OUT"/raw/memcpy_*.log 2>/dev/null | awk -v k="$1" -v t="$2" -v c="$3" '
    $1 == k && $2 == t { v = (c == "moved" ? $4 : $5) + 0; if (v > best) best = v }
    END { if (best > 0) printf "%.2f", best }'
}
MEMT=$((NPROC < 2 ? 1 : 2))
M_MEMCPY=$(mem memcpy $MEMT traffic)
M_NT=$(mem copy_nt $MEMT traffic)
M=$(awk -v a="${M_MEMCPY:-0}" -v b="${M_NT:-0}" 'BEGIN { printf "%.2f", (a > b ? a : b) }')
M_ISSUE=25.8
# iperf3: GB/s received (sum of the 4 streams), per repetition; median
iperf_gbs() { # LOG [bidir]
  awk -v bidir="${2:-0}" '
    /\[SUM\]/ && /receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") v += $(i - 1) / 8000 }
    END { if (v > 0) printf "%.3f", v }' "$1"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
IPERF="" IPERF_BIDIR=""
if [ "$NET" = 1 ]; then
  IPERF=$(for f in "$OUT"/raw/net_iperf3_rep*.log; do iperf_gbs "$f"; echo; done | median)
  IPERF_BIDIR=$(for f in "$OUT"/raw/net_iperf3bidir_rep*.log; do iperf_gbs "$f"; echo; done | median)
fi

# Bounds (docs/performance.md): machine traffic per byte of size S, and the busbw factor.
# bound = factor * M / traffic; "fifo" = the same with a ring/FIFO algorithm's traffic.
bound() { # COLL NP MODEL(min|fifo) -> GB/s
  awk -v c="$1" -v n="$2" -v model="$3" -v M="$M" 'BEGIN {
    F["allreduce"] = 2 * (n - 1) / n; F["allgather"] = (n - 1) / n; F["reducescatter"] = (n - 1) / n
    F["broadcast"] = 1; F["reduce"] = 1; F["alltoall"] = (n - 1) / n; F["gather"] = (n - 1) / n
    F["scatter"] = (n - 1) / n; F["sendrecv"] = 1
    if (model == "min") {
      T["allreduce"] = 2 * n; T["allgather"] = n + 1; T["reducescatter"] = n + 1; T["broadcast"] = n + 1
      T["reduce"] = n + 1; T["alltoall"] = 2 * n; T["gather"] = 2; T["scatter"] = 2; T["sendrecv"] = 2 * n
    } else {
      T["allreduce"] = 6 * n - 4; T["allgather"] = 3 * n - 1; T["reducescatter"] = 3 * n - 1
      T["broadcast"] = 3 * n - 1; T["reduce"] = 3 * n - 1; T["alltoall"] = 4 * n - 2
      T["gather"] = (4 * n - 2) / n; T["scatter"] = (4 * n - 2) / n; T["sendrecv"] = 4 * n
    }
    if (c in T) printf "%.2f", F[c] * M / T[c] }'
}

f3() { # a number for a table: 3 significant digits or so
  [ -z "${1:-}" ] && { echo "n/a"; return; }
  awk -v v="$1" 'BEGIN { a = v < 0 ? -v : v
    if (a >= 1000) printf "%.0f", v; else if (a >= 100) printf "%.0f", v; else if (a >= 10) printf "%.1f", v
    else if (a >= 0.1) printf "%.2f", v; else if (a == 0) printf "0"; else printf "%.3f", v }'
}
ratio() { # A B -> A/B, or empty
  [ -z "${1:-}" ] || [ -z "${2:-}" ] && return
  awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b }'
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; } # A >= B
verdict() { # RATIO OP NEED -> met / not met
  [ -z "${1:-}" ] && { echo "no data"; return; }
  if [ "$2" = ">=" ]; then ge "$1" "$3" && echo "**met**" || echo "not met"
  else ge "$3" "$1" && echo "**met**" || echo "not met"; fi
}

sizes_of() { # SECTION NP COLL: the sizes measured
  awk -F'\t' -v s="$1" -v n="$2" -v c="$3" '$1 == s && $3 == n && $4 == c { print $5 }' "$D/medians.tsv" | sort -un
}
hsize() { awk -v b="$1" 'BEGIN { if (b >= 1048576 && b % 1048576 == 0) printf "%d MB", b / 1048576
  else if (b >= 1024 && b % 1024 == 0) printf "%d KB", b / 1024; else printf "%d B", b }'; }

# Issue's Open MPI reference numbers (when the issue was written): 8 B time (us), 2 MB, 32 MB busbw
issue_ref() { # NP WHAT
  case "$1:$2" in
    2:t8) echo 0.19 ;; 2:b2M) echo 8.6 ;; 2:b32M) echo 1.9 ;;
    4:t8) echo 4.5 ;; 4:b2M) echo 1.7 ;; 4:b32M) echo 1.2 ;;
  esac
}

S8=8 S2M=$((2 << 20)) S32M=$((32 << 20))
SUM="$OUT/summary.md"
{
  echo "Generated by \`$CMDLINE\` at anyccl $ANYCCL_REV, $(( (T_END - T_START) / 60 )) min of runs."
  echo
  echo "Machine: $NPROC CPUs ($MODEL), ${MEMG} GiB, L3 ${L3:-?}, Linux $KERNEL; gcc $GCC_VER; Open MPI $OMPI_VER, MPICH $MPICH_VER."
  echo "Load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $LOAD_END"
  awk '/^# (start|end):/ { for (i = 1; i <= NF; i++) if ($i == "loadavg:") { v = $(i + 1) + 0; if (n == 0 || v < lo) lo = v; if (v > hi) hi = v; n++ } }
    END { if (n) printf "(1-minute load over the %d launch boundaries: %.2f to %.2f).", n / 2, lo, hi }' "$OUT"/raw/*.log
  echo " Every number is the median of $REPS back-to-back repetitions (out-of-place column; time averaged over ranks)."
  echo
  echo "Memory bandwidth ($MEMT threads, 64 MiB buffers, best of the runs at the start and the end): memcpy ${M_MEMCPY:-?} GB/s read+write,"
  echo "non-temporal copy ${M_NT:-?} GB/s; the bounds below use **M = $M GB/s** (a quiet machine of this kind: ~$M_ISSUE GB/s)."
  echo
  echo "### Targets"
  echo
  echo "| target | anyccl | reference | ratio | needed | |"
  echo "|---|---:|---:|---:|---:|---|"
  for np in $RANKS; do
    pr=anyccl-proc
    a=$(get sweep $pr "$np" allreduce $S32M busbw) r=$(get sweep openmpi "$np" allreduce $S32M busbw) x=$(ratio "$a" "$r")
    iss=$(issue_ref "$np" b32M)
    echo "| $np ranks (processes): all-reduce busbw at 32 MB, GB/s | $(f3 "$a") | Open MPI $(f3 "$r")${iss:+ (quiet machine: $iss)} | ${x:-n/a} | ≥ 3 | $(verdict "$x" ">=" 3) |"
    if [ "$np" = 2 ]; then
      a=$(get sweep $pr "$np" allreduce $S2M busbw) r=$(get sweep openmpi "$np" allreduce $S2M busbw) x=$(ratio "$a" "$r")
      iss=$(issue_ref "$np" b2M)
      echo "| $np ranks (processes): all-reduce busbw at 2 MB, GB/s | $(f3 "$a") | Open MPI $(f3 "$r")${iss:+ (quiet machine: $iss)} | ${x:-n/a} | ≥ 1 | $(verdict "$x" ">=" 1) |"
    fi
    a=$(get sweep $pr "$np" allreduce $S8 time) r=$(get sweep openmpi "$np" allreduce $S8 time) x=$(ratio "$a" "$r")
    iss=$(issue_ref "$np" t8)
    echo "| $np ranks (processes): all-reduce time at 8 B, us | $(f3 "$a") | Open MPI $(f3 "$r")${iss:+ (quiet machine: $iss)} | ${x:-n/a} | ≤ 1 | $(verdict "$x" "<=" 1) |"
  done
  for np in $RANKS; do
    a=$(get sweep anyccl-thr "$np" allreduce $S8 time) r=$(get sweep anyccl-proc "$np" allreduce $S8 time) x=$(ratio "$a" "$r")
    echo "| $np ranks as threads (-g $np): all-reduce time at 8 B, us | $(f3 "$a") | processes $(f3 "$r") | ${x:-n/a} | ≤ 1 | $(verdict "$x" "<=" 1) |"
    for z in $S2M $S32M; do
      a=$(get sweep anyccl-thr "$np" allreduce $z busbw) r=$(get sweep anyccl-proc "$np" allreduce $z busbw) x=$(ratio "$a" "$r")
      echo "| $np ranks as threads (-g $np): all-reduce busbw at $(hsize $z), GB/s | $(f3 "$a") | processes $(f3 "$r") | ${x:-n/a} | ≥ 1 | $(verdict "$x" ">=" 1) |"
    done
  done
  for np in $COLL_RANKS; do
    worst="" nok=0 ntot=0
    for c in ${COLLS//,/ }; do
      a=$(get coll anyccl-thr "$np" "$c" "$(sizes_of coll "$np" "$c" | tail -1)" busbw)
      r=$(get coll anyccl-proc "$np" "$c" "$(sizes_of coll "$np" "$c" | tail -1)" busbw)
      x=$(ratio "$a" "$r")
      [ -z "$x" ] && continue
      ntot=$((ntot + 1))
      ge "$x" 1 && nok=$((nok + 1))
      if [ -z "$worst" ] || ge "$worst" "$x"; then worst=$x wc=$c; fi
    done
    [ $ntot -gt 0 ] && echo "| $np ranks as threads: busbw of the other collectives at $(hsize "$COLL_B") ≥ processes | $nok of $ntot | processes | worst ${worst} ($wc) | ≥ 1 | $(verdict "$worst" ">=" 1) |"
  done
  if [ "$NET" = 1 ]; then
    a=$(get net anyccl-net 2 sendrecv "$COLL_B" busbw) x=$(ratio "$a" "$IPERF")
    echo "| 2 virtual hosts over loopback: sendrecv_perf busbw at $(hsize "$COLL_B"), GB/s | $(f3 "$a") | iperf3 -P 4: $(f3 "$IPERF") | ${x:-n/a} | ≥ 0.9 | $(verdict "$x" ">=" 0.9) |"
  fi
  echo
  if [ "$NET" = 1 ]; then
    echo "sendrecv_perf with 2 ranks sends both ways at once (busbw is per direction); iperf3 -P 4 sends one way."
    [ -n "$IPERF_BIDIR" ] && echo "iperf3 -P 4 --bidir moved $(f3 "$IPERF_BIDIR") GB/s in both directions together."
  fi
  echo
  if [ -n "$COLL_RANKS" ]; then
    echo "### Every other collective at $(hsize "$COLL_B") (busbw, GB/s)"
    echo
    echo "Bound: the memory-bandwidth bound derived above (minimal traffic) with M = $M GB/s; FIFO: the same for a ring/FIFO algorithm."
    echo "Met: anyccl (processes) ≥ 80% of the bound and ahead of Open MPI."
    echo
    echo "| ranks | collective | anyccl processes | anyccl threads | Open MPI | MPICH | bound | FIFO | % of bound | × Open MPI | |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for np in $COLL_RANKS; do
      for c in ${COLLS//,/ }; do
        z=$(sizes_of coll "$np" "$c" | tail -1)
        [ -z "$z" ] && { echo "| $np | $c | n/a | | | | | | | | no data |"; continue; }
        a=$(get coll anyccl-proc "$np" "$c" "$z" busbw) th=$(get coll anyccl-thr "$np" "$c" "$z" busbw)
        o=$(get coll openmpi "$np" "$c" "$z" busbw) m=$(get coll mpich "$np" "$c" "$z" busbw)
        bd=$(bound "$c" "$np" min) ff=$(bound "$c" "$np" fifo)
        xb=$(ratio "$a" "$bd") xo=$(ratio "$a" "$o")
        if [ -z "$xb" ] || [ -z "$xo" ]; then v="no data"
        elif ge "$xb" 0.8 && ! ge 1 "$xo"; then v="**met**"
        else v="not met"; fi
        pct=$([ -n "$xb" ] && awk -v x="$xb" 'BEGIN { printf "%.0f%%", 100 * x }')
        echo "| $np | $c | $(f3 "$a") | $(f3 "$th") | $(f3 "$o") | $(f3 "$m") | $bd | $ff | ${pct:-n/a} | ${xo:-n/a} | $v |"
      done
      a=$(get sweep anyccl-proc "$np" allreduce $S32M busbw)
      if [ -n "$a" ]; then
        bd=$(bound allreduce "$np" min) ff=$(bound allreduce "$np" fifo) xb=$(ratio "$a" "$bd")
        echo "| $np | allreduce (sweep) | $(f3 "$a") | $(f3 "$(get sweep anyccl-thr "$np" allreduce $S32M busbw)") | $(f3 "$(get sweep openmpi "$np" allreduce $S32M busbw)") | $(f3 "$(get sweep mpich "$np" allreduce $S32M busbw)") | $bd | $ff | $(awk -v x="${xb:-0}" 'BEGIN { printf "%.0f%%", 100 * x }') | $(ratio "$a" "$(get sweep openmpi "$np" allreduce $S32M busbw)") | (3× target above) |"
      fi
    done
    echo
  fi
  echo "### All-reduce, float32 sum (median time in us / busbw in GB/s)"
  for np in $RANKS; do
    echo
    echo "$np ranks:"
    echo
    printf "| size |"; for lib in $LIBS; do printf " %s |" "$(lib_label "$lib")"; done; echo
    printf "|---:|"; for lib in $LIBS; do printf -- "---:|"; done; echo
    for z in $(sizes_of sweep "$np" allreduce); do
      printf "| %s |" "$(hsize "$z")"
      for lib in $LIBS; do
        t=$(get sweep "$lib" "$np" allreduce "$z" time) b=$(get sweep "$lib" "$np" allreduce "$z" busbw)
        if [ -n "$t" ]; then printf " %s / %s |" "$(f3 "$t")" "$(f3 "$b")"; else printf " n/a |"; fi
      done
      echo
    done
  done
  echo
  wrong=$(awk -F'\t' '$11 > 0 { print $2 " " $3 " ranks " $4 " " $5 " B: " $11 " wrong" }' "$D/medians.tsv")
  if [ -n "$wrong" ]; then
    echo "**Wrong data** (the tools' check after the timing):"
    echo "$wrong" | sed 's/^/- /'
    echo
  fi
  if [ -s "$FAILED" ]; then
    echo "**Launches that failed** (logs in \`$OUT/raw/\`):"
    sed 's/^/- /' "$FAILED"
    echo
  fi
  echo "The script keeps the raw logs of its run in \`bench/results/<run>/raw/\` (each with its command line and the load average before and after; not part of the repository)."
} >"$SUM"

# ---- plots ---------------------------------------------------------------------------------
PLOTDIR=docs/perf
[ "$DOCS" = 1 ] || PLOTDIR="$OUT/plots"
mkdir -p "$PLOTDIR"
for np in $RANKS; do
  for lib in $LIBS; do
    awk -F'\t' -v l="$lib" -v n="$np" '$1 == "sweep" && $2 == l && $3 == n && $4 == "allreduce" && $5 > 0 { print $5, $7, $8 }' \
      "$D/medians.tsv" | sort -n >"$D/allreduce_${lib}_np${np}.dat"
  done
done
NR_=$(echo "$RANKS" | wc -w)
TERM_=pngcairo
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || TERM_=png
for what in busbw time; do
  {
    echo "set terminal $TERM_ size $((NR_ > 1 ? 500 * NR_ : 640)),520 noenhanced"
    echo "set output '$PLOTDIR/allreduce_$what.png'"
    echo "set multiplot layout 1,$NR_ title \"float32 sum all-reduce, $NPROC cores ($MODEL), median of $REPS\\nload average $LOAD_START (start), $LOAD_END (end)\""
    echo "set logscale x 2; set format x '%.0b%B'; set xlabel 'size (bytes)'; set grid; set key below"
    if [ "$what" = time ]; then echo "set logscale y 10; set format y '%g'; set ylabel 'time (us)'"; else echo "set ylabel 'busbw (GB/s)'; set yrange [0:*]"; fi
    for np in $RANKS; do
      echo "set title '$np ranks'"
      col=$([ "$what" = time ] && echo 2 || echo 3)
      sep="plot"
      for lib in $LIBS; do
        f="$D/allreduce_${lib}_np${np}.dat"
        [ -s "$f" ] || continue
        printf "%s '%s' using 1:%s with linespoints lw 2 title '%s'" "$sep" "$f" "$col" "$(lib_label "$lib")"
        sep=","
      done
      echo
    done
    echo "unset multiplot"
  } >"$D/allreduce_$what.gp"
  gnuplot "$D/allreduce_$what.gp" >>"$LOG" 2>&1 || log "gnuplot failed for $what (see $LOG)"
done

# ---- docs/performance.md ----------------------------------------------------------------------
if [ "$DOCS" = 1 ]; then
  DOC=docs/performance.md
  SECTION="$D/section.md"
  {
    echo "<!-- cpu_vs_mpi:begin -->"
    echo "## Measured: anyccl vs Open MPI vs MPICH"
    echo
    echo "Made by (from the repository root):"
    echo
    echo '```sh'
    echo "$CMDLINE"
    echo '```'
    echo
    cat "$SUM"
    echo
    echo "![all-reduce busbw against size](perf/allreduce_busbw.png)"
    echo
    echo "![all-reduce time against size](perf/allreduce_time.png)"
    echo "<!-- cpu_vs_mpi:end -->"
  } >"$SECTION"
  if [ -f "$DOC" ] && grep -q '<!-- cpu_vs_mpi:begin -->' "$DOC" && grep -q '<!-- cpu_vs_mpi:end -->' "$DOC"; then
    awk -v sec="$SECTION" '
      /<!-- cpu_vs_mpi:begin -->/ { while ((getline l < sec) > 0) print l; skip = 1; next }
      /<!-- cpu_vs_mpi:end -->/ { skip = 0; next }
      !skip { print }' "$DOC" >"$DOC.tmp" && mv "$DOC.tmp" "$DOC"
  else
    { [ -f "$DOC" ] && echo; cat "$SECTION"; } >>"$DOC"
  fi
  log "wrote $DOC and $PLOTDIR/allreduce_{busbw,time}.png"
fi
log "summary: $SUM"
cat "$SUM"
