#!/usr/bin/env bash
# check_perf.sh (tests/perf) on a sim-backend run, which must also say that
# its times are modelled.   check_sim_perf.sh [check_perf options] -- command...
out=$(bash "$(dirname "$0")/../perf/check_perf.sh" "$@" 2>&1)
rc=$?
echo "$out"
((rc == 0)) || exit $rc
grep -q '^# Simulated (ANYCCL_BACKEND=sim)' <<<"$out" || { echo "check_sim_perf: FAIL: no '# Simulated' line" >&2; exit 1; }
