#!/usr/bin/env bash
# Build the libFuzzer harnesses (clang, address + undefined sanitizers) and run
# each for a bounded time, starting from the committed corpus in
# fuzz/corpus/<target> (and the dictionary fuzz/<target>.dict when there is one).
# New inputs go to a scratch directory, not the corpus.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     default: 60 s each, every target
#
# Environment: FUZZ_BUILD (build directory, default build-fuzz), FUZZ_WORK
# (where new inputs, crashes and logs go; default a temporary directory,
# removed unless a fuzzer failed), FUZZ_JOBS (parallel build jobs),
# FUZZ_ARGS (more libFuzzer flags).
# Prints "fuzz: TARGET passed (N executions ...)" or "fuzz: TARGET FAILED ..."
# per target (a failure prints the crashing input, hex and base64), then
# "fuzz: N passed, N failed"; exits 1 if any target failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(bootstrap uniqueid net topo params port p2p fabric netplugin)
fi
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
keep=0
if [[ -n ${FUZZ_WORK:-} ]]; then
  work=$FUZZ_WORK
  keep=1
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/anyccl-fuzz.XXXXXX)
fi

cc=${CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (Debian: apt-get install clang)" >&2
  exit 1
fi
echo "fuzz: building in $build with $cc"
if ! { cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DANYCCL_CUDA=OFF -DANYCCL_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
  cmake --build "$build" -j "$jobs" --target fuzzers; } >"$work/build.log" 2>&1; then
  tail -n 40 "$work/build.log"
  echo "fuzz: build FAILED (log above)"
  echo "fuzz: 0 passed, ${#targets[@]} failed"
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export NCCL_DEBUG=${NCCL_DEBUG:-NONE}
pass=0
fail=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/fuzz_$t
  if [[ ! -x $bin ]]; then
    echo "fuzz: $t FAILED (no harness $bin)"
    fail=$((fail + 1))
    continue
  fi
  mkdir -p "$work/$t/new" "$work/$t/crash"
  dict=()
  if [[ -f fuzz/$t.dict ]]; then dict=(-dict="fuzz/$t.dict"); fi
  # -max_len: the seeds' largest, at least 4 KB; -timeout: one input may take 10 s;
  # -rss_limit_mb: one input may hold 2 GB.
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t/crash/" "${dict[@]}" ${FUZZ_ARGS:-} "$work/$t/new" "fuzz/corpus/$t" >"$work/$t/log" 2>&1
  rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$work/$t/log" | tail -n 1)
  cov=$(grep -E '^#[0-9]+.*(cov|DONE)' "$work/$t/log" | tail -n 1 | sed -nE 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+).*/cov \1, ft \2, corpus \3/p')
  crashes=$(find "$work/$t/crash" -type f | head -n 5)
  if ((rc == 0)) && [[ -z $crashes ]]; then
    echo "fuzz: $t passed (${execs:-?} executions in ${secs} s; ${cov:-no stats}; $(ls "$work/$t/new" | wc -l) new inputs)"
    pass=$((pass + 1))
  else
    keep=1
    echo "fuzz: $t FAILED (exit $rc after ${execs:-?} executions); libFuzzer's report:"
    grep -E 'ERROR|SUMMARY|fuzz check failed|runtime error|==[0-9]+==|#[0-9]+ 0x' "$work/$t/log" | head -n 40
    for c in $crashes; do
      echo "--- crashing input $c ($(stat -c %s "$c") bytes), hex:"
      od -An -tx1 -v "$c" | head -n 64
      echo "--- base64 (save with: base64 -d > fuzz/corpus/$t/crash-NAME):"
      base64 -w 100 "$c" | head -n 40
    done
    fail=$((fail + 1))
  fi
done
echo "fuzz: ${pass} passed, ${fail} failed"
if ((keep)); then
  echo "fuzz: logs, new inputs and crashes are in $work"
else
  rm -rf "$work"
fi
((fail == 0))
