#!/usr/bin/env bash
# tests/gpu/plot.sh -- turn run.sh's per-run logs into data files and one plot:
# busbw and time against message size, NCCL and anyccl, one panel per collective.
#
#   tests/gpu/plot.sh <logs dir (run.sh's runs/logs/all, or logs.tgz unpacked)> <out dir> <title>
#
# Writes <out dir>/<collective>.<lib>.dat (bytes time_us busbw, out-of-place)
# and <out dir>/busbw.png, <out dir>/time.png (gnuplot, pngcairo or png).
set -eu
[ $# -eq 3 ] || { sed -n '2,9p' "$0"; exit 2; }
logs=$1 out=$2 title=$3
mkdir -p "$out"
colls=""
for f in "$logs"/perf.*.plain.*.log; do
  b=$(basename "$f" .log); c=$(echo "$b" | cut -d. -f2); lib=$(echo "$b" | cut -d. -f4)
  awk '$1 ~ /^[0-9]+$/ && NF >= 12 && $1 > 0 { print $1, $6, $8 }' "$f" > "$out/$c.$lib.dat"
  [ -s "$out/$c.$lib.dat" ] || { rm -f "$out/$c.$lib.dat"; continue; }
  case " $colls " in *" $c "*) ;; *) colls="$colls $c" ;; esac
done
term="pngcairo noenhanced size 1500,900 font ',10'"
gnuplot -e "set terminal $term" >/dev/null 2>&1 || term="png noenhanced size 1500,900"
for what in busbw time; do
  col=3; ylab="busbw (GB/s)"; logy=""
  [ $what = time ] && { col=2; ylab="time (us)"; logy="set logscale y"; }
  {
    echo "set terminal $term; set output '$out/$what.png'"
    echo "set multiplot layout 2,4 title '$title: $ylab vs message size (nccl-tests, out-of-place)'"
    echo "set logscale x 2; $logy; set grid; set key top left; set format x '%.0s%cB'; set xlabel 'bytes'"
    for c in $colls; do
      [ -f "$out/$c.nccl.dat" ] && [ -f "$out/$c.anyccl.dat" ] || continue
      echo "set title '$c'; plot '$out/$c.nccl.dat' using 1:$col with linespoints title 'NCCL 2.28.9', '$out/$c.anyccl.dat' using 1:$col with linespoints title 'anyccl'"
    done
    echo "unset multiplot"
  } | gnuplot
done
echo "wrote $out/busbw.png $out/time.png"
