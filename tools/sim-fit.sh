#!/usr/bin/env bash
# Fit a sim calibration file (docs/simulation.md) to perf-tool runs of
# anyccl's cuda backend on a GPU host (tests/gpu/sim_validate.sh's raw
# outputs): the parameters whose modelled sweeps best match the measured
# times, all collectives and sizes at once.
#
#   tools/sim-fit.sh DIR [DIR...] > my.calib      (e.g. gpu_results/2g gpu_results/4g)
#
# Uses DIR/<coll>.anyccl.G0.txt (eager: launch_us), <coll>.anyccl.G1.txt
# (CUDA graphs: graph_launch_us) and calib.*.1ch.txt (one lane: block_GBps);
# NCCL's files are not used (the model runs anyccl's plans).
# Method: coordinate descent on the logs of launch_us, ll_step_us,
# simple_step_us, nvlink_GBps, nvlink_latency_us, ll_efficiency,
# recv_copy_GBps and idle_launch_us (when START sets them above 0), and
# block_GBps (only with one-lane runs) and graph_launch_us (and
# graph_idle_launch_us when START sets it; only with -G runs), from START
# (default: topologies/sim_h200.calib), minimising the mean over files of
# the mean squared log ratio predicted/measured (every size counts alike);
# steps STEPS (x1.5, x1.2, x1.07, x1.02); at most MAX_EVALS (400)
# evaluations. START's other keys (symm_*, net_channels) are kept as they
# are. Each evaluation runs every file's sweep on the sim backend (a few ms
# each). Progress goes to stderr.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/sim-lib.sh"
[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
START=${START:-$SIMLIB_ROOT/topologies/sim_h200.calib}
MAX_EVALS=${MAX_EVALS:-400}
STEPS=${STEPS:-1.5 1.2 1.07 1.02}
simlib_tools

files=()
for d in "$@"; do
  for f in "$d"/*.anyccl.G*.txt "$d"/calib.*.1ch.txt; do
    [ -f "$f" ] && [ -n "$(simlib_rows "$f" | head -1)" ] && files+=("$f")
  done
done
[ ${#files[@]} -gt 0 ] || { echo "sim-fit: no <coll>.anyccl.G*.txt with result rows under $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in "${!files[@]}"; do simlib_rows "${files[$i]}" > "$work/meas.$i"; done

keys=(launch_us ll_step_us simple_step_us nvlink_GBps nvlink_latency_us ll_efficiency)
fixed=""
# what the data cannot tell stays at START: a lane's rate without one-lane runs, graph launches without -G runs
if printf '%s\n' "${files[@]}" | grep -q '/calib\..*\.1ch\.txt$'; then keys+=(block_GBps); else fixed+=" block_GBps"; fi
if printf '%s\n' "${files[@]}" | grep -q '\.G[1-9][0-9]*\.txt$'; then keys+=(graph_launch_us); else fixed+=" graph_launch_us"; fi
[ -z "$fixed" ] || echo "sim-fit: kept from ${START##*/} (no data for them):$fixed" >&2
declare -A val lo hi
lo=([launch_us]=0.2 [graph_launch_us]=0.1 [ll_step_us]=0.02 [simple_step_us]=0.05 [block_GBps]=2 [nvlink_GBps]=20
    [nvlink_latency_us]=0.01 [ll_efficiency]=0.1 [recv_copy_GBps]=2 [idle_launch_us]=0.1 [graph_idle_launch_us]=0.1)
hi=([launch_us]=50 [graph_launch_us]=50 [ll_step_us]=20 [simple_step_us]=40 [block_GBps]=400 [nvlink_GBps]=2000
    [nvlink_latency_us]=10 [ll_efficiency]=1 [recv_copy_GBps]=2000 [idle_launch_us]=500 [graph_idle_launch_us]=500)
while read -r k v; do val[$k]=$v; done < <(grep -E '^[a-zA-Z_]+[[:space:]]' "$START" | awk '{print $1, $2}')
for k in "${keys[@]}"; do [ -n "${val[$k]:-}" ] || { echo "sim-fit: $START has no $k" >&2; exit 1; }; done
# the receivers' FIFO drain of p2p ops: fitted when START models it
awk -v v="${val[recv_copy_GBps]:-0}" 'BEGIN { exit !(v > 0) }' && keys+=(recv_copy_GBps)
# the latency of a launch onto an idle stream (a timed loop's first): likewise
awk -v v="${val[idle_launch_us]:-0}" 'BEGIN { exit !(v > 0) }' && keys+=(idle_launch_us)
awk -v v="${val[graph_idle_launch_us]:-0}" 'BEGIN { exit !(v > 0) }' && [[ " ${keys[*]} " == *" graph_launch_us "* ]] &&
  keys+=(graph_idle_launch_us)

writeCalib() { # file
  { for k in "${!val[@]}"; do echo "$k ${val[$k]}"; done; } | sort > "$1"
}
evals=0
objective() { # -> mean over files of mean (ln pred/meas)^2 (in a subshell: the caller counts evals)
  writeCalib "$work/try.calib"
  local i
  for i in "${!files[@]}"; do
    simlib_predict "${files[$i]}" "$work/try.calib" > "$work/pred.$i" || true
  done
  for i in "${!files[@]}"; do
    awk -v i="$i" 'FNR == NR { p[$1] = $2; next } ($1 in p) && p[$1] > 0 { d = log(p[$1] / $2); s += d * d; n++ }
      END { printf "%s %.9g\n", i, n ? s / n : 1e9 }' "$work/pred.$i" "$work/meas.$i"
  done | awk '{ s += $2; n++ } END { printf "%.9g\n", s / n }'
}

best=$(objective)
echo "sim-fit: ${#files[@]} files; start (${START##*/}): objective $best" >&2
for step in $STEPS; do
  improved=1
  while [ $improved = 1 ] && [ $evals -lt "$MAX_EVALS" ]; do
    improved=0
    for k in "${keys[@]}"; do
      for dir in up down; do
        old=${val[$k]}
        new=$(awk -v v="$old" -v s="$step" -v d=$dir -v l="${lo[$k]}" -v h="${hi[$k]}" \
          'BEGIN { x = d == "up" ? v * s : v / s; if (x < l) x = l; if (x > h) x = h; printf "%.4g", x }')
        [ "$new" = "$old" ] && continue
        val[$k]=$new
        o=$(objective)
        evals=$((evals + 1))
        if awk -v a="$o" -v b="$best" 'BEGIN { exit !(a < b * 0.9999) }'; then
          best=$o
          improved=1
          echo "sim-fit: x$step $k $old -> $new: objective $best (eval $evals)" >&2
          break
        fi
        val[$k]=$old
      done
    done
  done
done
echo "sim-fit: done after $evals evaluations: objective $best (rms log error $(awk -v b="$best" 'BEGIN{printf "%.3f", sqrt(b)}'))" >&2

echo "# sim calibration fitted by tools/sim-fit.sh $(date -u +%F) from:"
for f in "${files[@]}"; do echo "#   $f"; done
echo "# mean squared log(predicted/measured) $best over ${#files[@]} sweeps; start: ${START##*/}"
[ -z "$fixed" ] || echo "# not fitted (no data for them):$fixed"
order=(model block_GBps nvlink_GBps pcie_GBps copy_GBps recv_copy_GBps launch_us graph_launch_us idle_launch_us
  graph_idle_launch_us ll_step_us simple_step_us ll_efficiency nvlink_latency_us)
for k in "${order[@]}"; do
  [ -n "${val[$k]:-}" ] && printf '%-20s %s\n' "$k" "${val[$k]}"
done
# START's other keys, as they were
for k in $(printf '%s\n' "${!val[@]}" | sort); do
  [[ " ${order[*]} " == *" $k "* ]] || printf '%-20s %s\n' "$k" "${val[$k]}"
done
