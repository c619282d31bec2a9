#!/usr/bin/env bash
# Predicted against measured (docs/simulation.md, "Accuracy"): runs on the
# sim backend the sweeps that tests/gpu/sim_validate.sh measured on GPUs and
# prints, per collective and graph mode, the errors against anyccl's cuda
# backend and against NCCL:
#   geometric mean of |predicted - measured| / measured over sizes >= 1 MB
#   and < 1 MB (each error at least 0.1%), and the worst size.
#
#   tools/sim-compare.sh [-c CALIB] [-f FABRIC] [-o OUTDIR] DIR [DIR...]
#
# CALIB: the calibration (default topologies/sim_h200.calib, or with -f the
# fabric's own). FABRIC: the cluster (default one host of the run's GPUs;
# bench/sim_netns_validate.sh passes the namespaces' fabric). OUTDIR (default
# DIR/compare): per sweep <coll>.<lib>.G<g>.dat (bytes, measured us,
# predicted us, measured busbw, predicted busbw), table.txt, busbw.gp and,
# when gnuplot is installed, busbw.png (measured and predicted busbw per
# collective). Exit status 0 (it reports; it judges nothing).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/sim-lib.sh"
calib=
fabric=
out=
while getopts c:f:o: o; do
  case $o in
    c) calib=$OPTARG ;;
    f) fabric=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,19p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
[ -n "$calib$fabric" ] || calib=$SIMLIB_ROOT/topologies/sim_h200.calib
calibName=$(basename "${calib:-$fabric}")
simlib_tools

for d in "$@"; do
  o=${out:-$d/compare}
  [ $# -gt 1 ] && [ -n "$out" ] && o=$out/$(basename "$d")
  mkdir -p "$o"
  table=$o/table.txt
  n=$(for f in "$d"/*.txt; do simlib_args "$f"; done 2>/dev/null | awk 'NF {print $2; exit}')
  {
    echo "# $d: ${n:-?} GPUs; predicted with $calibName; |pred-meas|/meas, out-of-place times"
    printf '%-15s %-7s %-2s %9s %9s %8s %10s %6s\n' collective vs G 'geo>=1MB' 'geo<1MB' worst 'at(bytes)' sizes
  } > "$table"
  for c in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
    for g in 0 1; do
      for lib in anyccl nccl; do
        f=$d/$c.$lib.G$g.txt
        [ -f "$f" ] && [ -n "$(simlib_rows "$f" | head -1)" ] || continue
        simlib_predict "$f" "$calib" "$fabric" > "$o/pred.tmp" || true
        simlib_rows "$f" | awk 'FNR == NR { p[$1] = $2; pb[$1] = $3; next }
          ($1 in p) { print $1, $2, p[$1], $3, pb[$1] }' "$o/pred.tmp" - > "$o/$c.$lib.G$g.dat"
        awk -v c="$c" -v lib="$lib" -v g="$g" '
          { e = ($3 - $2) / $2; if (e < 0) e = -e; k = e < 1e-3 ? 1e-3 : e
            if ($1 >= 1048576) { sb += log(k); nb++ } else { ss += log(k); ns++ }
            if (e > w) { w = e; at = $1 } n++ }
          END { printf "%-15s %-7s %-2s %8.1f%% %8.1f%% %7.1f%% %10s %6d\n", c, lib, g,
                  nb ? 100 * exp(sb / nb) : 0, ns ? 100 * exp(ss / ns) : 0, 100 * w, at, n }' "$o/$c.$lib.G$g.dat" >> "$table"
      done
    done
  done
  rm -f "$o/pred.tmp"
  cat "$table"
  # the plot: busbw against size, per collective; measured (points) and predicted (lines)
  {
    echo "set terminal pngcairo size 1500,900 font ',9' noenhanced"
    echo "set output '$o/busbw.png'"
    echo "set multiplot layout 2,4 title 'sim vs measured busbw: $(basename "$d") (${n:-?} GPUs, $calibName)'"
    echo "set logscale x 2; set format x '%.0s%cB'; set xlabel 'bytes'; set ylabel 'busbw GB/s'; set key top left noenhanced"
    for c in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
      plots=()
      for g in 0 1; do
        for lib in anyccl nccl; do
          f=$o/$c.$lib.G$g.dat
          [ -f "$f" ] && plots+=("'$f' using 1:4 with points title '$lib -G $g'")
        done
        f=$o/$c.anyccl.G$g.dat
        [ -f "$f" ] || f=$o/$c.nccl.G$g.dat
        [ -f "$f" ] && plots+=("'$f' using 1:5 with lines dt $((g + 1)) lw 2 title 'sim -G $g'")
      done
      [ ${#plots[@]} -gt 0 ] || continue
      echo "set title '$c' noenhanced"
      (IFS=,; echo "plot ${plots[*]}")
    done
    echo "unset multiplot"
  } > "$o/busbw.gp"
  if command -v gnuplot > /dev/null; then gnuplot "$o/busbw.gp" && echo "plot: $o/busbw.png"; else echo "(no gnuplot: $o/busbw.gp not drawn)"; fi
done
