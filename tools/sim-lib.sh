# Shared by tools/sim-fit.sh and tools/sim-compare.sh (sourced, not run):
# reading nccl-tests outputs of tests/gpu/sim_validate.sh and running the
# same sweeps on the sim backend.
#
# A raw file is <coll>.<lib>.G<g>.txt (a perf tool's output as printed) or
# calib.<coll>.1ch.txt (one lane). Its header gives the sweep ("nGpus 4
# minBytes 8 maxBytes 536870912 step: 2(factor)"); its rows the out-of-place
# time (column 6) and busbw (column 8).

SIMLIB_ROOT=${SIMLIB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
SIMLIB_BUILD=${SIMLIB_BUILD:-$SIMLIB_ROOT/build}
SIMLIB_TOOLS=${SIMLIB_TOOLS:-$SIMLIB_BUILD/sim-tools}

# The perf tools without MPI (an MPI singleton start costs 0.3 s a run; the
# fit runs thousands): cc against the build's libnccl and anyccl-cpu.
simlib_tools() {
  local lib=$SIMLIB_BUILD/libnccl.so.2
  [ -f "$lib" ] || { echo "sim: no $lib: build anyccl first (cmake -S . -B build -DANYCCL_CUDA=OFF && cmake --build build)" >&2; return 1; }
  mkdir -p "$SIMLIB_TOOLS"
  local c exe
  for c in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
    exe=$SIMLIB_TOOLS/${c}_perf
    if [ ! -x "$exe" ] || [ "$lib" -nt "$exe" ] || [ -n "$(find "$SIMLIB_ROOT/perf" -newer "$exe" -name '*.[ch]' | head -1)" ]; then
      # built beside and renamed over: tests running at once may build the
      # same tool, and none may run another's half-written file
      cc -O2 -std=gnu11 -o "$exe.$$" "$SIMLIB_ROOT/perf/$c.c" "$SIMLIB_ROOT"/perf/{common,options,data,report}.c \
        -I"$SIMLIB_ROOT/cpu-runtime/include" -I"$SIMLIB_ROOT/include" -L"$SIMLIB_BUILD" -lnccl -lanyccl-cpu \
        -lpthread -lm -ldl -Wl,-rpath,"$SIMLIB_BUILD" && mv -f "$exe.$$" "$exe" || { rm -f "$exe.$$"; return 1; }
    fi
  done
}

# FILE -> the collective (all_reduce...) it measured
simlib_coll() { local b; b=$(basename "$1" .txt); b=${b#calib.}; echo "${b%%.*}"; }

# FILE -> "-g N -b MIN -e MAX -f F -n ITERS -w WARMUP" (or -i STEP) from its
# header; N counts the "#  Rank r ..." lines when there are more (one rank
# per MPI process). The iterations matter: a timed loop pays its first
# launches onto idle streams once (idle_launch_us), and under the dataflow
# model a chain's fill once (a rank starts the next launch when it is done
# with this one), as on the measured run. A -G N run (graph: N) times N
# launches of a graph of the iterations: N x the iterations.
simlib_args() {
  awk '/^# +Rank +[0-9]+ / { nr++ }
    /^# nThread/ && !h {
    for (i = 1; i <= NF; i++) {
      if ($i == "nGpus") g = $(i + 1) * ($(i - 2) == "nThread" ? $(i - 1) : 1)
      if ($i == "minBytes") b = $(i + 1)
      if ($i == "maxBytes") e = $(i + 1)
      if ($i == "step:") { s = $(i + 1); f = s ~ /factor/ }
      if ($i == "iters:" && $(i - 1) == "warmup") wu = $(i + 1)
      if ($i == "iters:" && $(i - 1) != "warmup" && $(i - 1) != "agg") it = $(i + 1)
      if ($i == "graph:") gl = $(i + 1)
    }
    sub(/\(.*/, "", s); h = 1 }
    END { if (h) printf "-g %d -b %s -e %s %s %s -n %d -w %d\n", (nr > g ? nr : g), b, e, f ? "-f" : "-i", s,
                        (it > 0 ? it : 1) * (gl > 1 ? gl : 1), (wu > 0 ? wu : 0) }' "$1"
}

# FILE -> environment its sim run needs (one lane; CUDA graphs; and the
# lines of sim.env beside it: what the measured build did differently, e.g.
# ANYCCL_CUDA_SYMM=0 for runs that predate the one-host kernels)
simlib_env() {
  local b; b=$(basename "$1")
  [ -f "$(dirname "$1")/sim.env" ] && grep -E '^[A-Z_0-9]+=[^ ]*$' "$(dirname "$1")/sim.env" | tr '\n' ' '
  case "$b" in
    calib.all_reduce.1ch.txt) echo "NCCL_MAX_NCHANNELS=1" ;;
    calib.sendrecv.1ch.txt) echo "ANYCCL_CUDA_P2P_CHANNELS=1" ;;
    *.G0.txt | calib.*) echo "ANYCCL_SIM_GRAPH=0" ;;
    *.G*.txt) echo "ANYCCL_SIM_GRAPH=1" ;;
  esac
}

# FILE -> "bytes time_us busbw" rows (out-of-place), measured
simlib_rows() { awk 'NF >= 13 && $1 ~ /^[0-9]+$/ && $6 ~ /^[0-9.]+$/ && $6 > 0 { print $1, $6, $8 }' "$1"; }

# FILE CALIB [FABRIC] -> the same sweep on the sim backend: "bytes time_us
# busbw" rows. The fabric: FABRIC, else one host of the run's GPUs
# (NVSwitch); the calibration: CALIB, else (empty) the fabric's.
simlib_predict() {
  local f=$1 calib=$2 fab=${3:-} c args env n
  c=$(simlib_coll "$f")
  args=$(simlib_args "$f")
  env=$(simlib_env "$f")
  n=$(echo "$args" | awk '{print $2}')
  if [ -z "$fab" ]; then
    fab=$SIMLIB_TOOLS/host$n.fabric
    [ -f "$fab" ] || printf 'hosts 1\ngpus_per_host %d\nnics_per_host %d\n' "$n" "$n" > "$fab"
  fi
  # shellcheck disable=SC2086
  env $env ANYCCL_BACKEND=sim ANYCCL_SIM_FABRIC="$fab" ${calib:+ANYCCL_SIM_CALIB="$calib"} ANYCCL_PERF_NO_PROGRESS=1 \
    NCCL_DEBUG=WARN "$SIMLIB_TOOLS/${c}_perf" $args -c 0 2>&1 | simlib_rows /dev/stdin
}

# The built-in calibration as a file (every key), for a starting point.
simlib_default_calib() {
  grep -E '^[a-z_A-Z]+ ' "$SIMLIB_ROOT/topologies/sim_h200.calib" | awk '{print $1, $2}'
}

# DAT NGPU -> a raw file on stdout: tests/gpu/plot.sh's .dat files (bytes
# time_us busbw, docs/data/cuda-h200/) in the perf tools' layout, so that
# the measurements committed there can be fitted and compared.
simlib_from_dat() {
  awk -v n="$2" 'NR == FNR { b[++k] = $1; next }
    FNR == 1 { f = k > 1 ? b[2] / b[1] : 2
      printf "# nThread 1 nGpus %d minBytes %s maxBytes %s step: %d(factor) warmup iters: 5 iters: 20\n", n, b[1], b[k], f }
    { printf "%12s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", $1, $1 / 4, "float", "sum", -1, $2, 0, $3, 0, $2, 0, $3, 0 }' "$1" "$1"
}
