#!/usr/bin/env bash
# session 7, call 2: branch s7 (timeline + lean-ops + launch threads; lib in gpupack/s7) --
# correctness (coll_gpu, nccl-tests -c 1 -d all [-o all], -g 4/2, -G, -t 4), small sizes vs main and NCCL,
# launch threads on/off, reductions other than sums (lean-ops) vs main, a timeline of small all_reduces
. "$(dirname "$0")/common.sh"
S7=$P/s7
export LD_LIBRARY_PATH=$S7:/usr/local/cuda/lib64
timeout 200 $P/coll_gpu threads 4 2>&1 | tail -1
timeout 200 $P/coll_gpu procs 4 2>&1 | tail -1
chk() { local tag=$1; shift; timeout 120 "$@" -c 1 -n 2 -w 1 2>&1 | grep -E "Out of bounds|#wrong|rror" | tail -1 | sed "s/^/check $tag /"; }
for b in reduce_scatter all_reduce reduce; do
  for g in 4 2; do for G in 0 1; do chk "g$g G$G $b" $NT/${b}_perf -b 8 -e 64M -f 8 -g $g -G $G -d all -o all; done; done
  chk "t4 $b" $NT/${b}_perf -b 8 -e 8M -f 8 -t 4 -g 1 -d all -o all
done
for b in all_gather broadcast alltoall sendrecv; do
  chk "g4 $b" $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -d all
  chk "g4 G1 $b" $NT/${b}_perf -b 8 -e 64M -f 64 -g 4 -G 1
done
echo "=== small sizes: NCCL, main, s7, s7 without launch threads (time us, -n 200)"
export TIMEOUT=60
for b in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  $S $NT $REAL $b "-b 8 -e 128K -f 16 -g 4 -n 200 -w 20" nccl | grep -v "#"
  $S $NT $NEW $b "-b 8 -e 128K -f 16 -g 4 -n 200 -w 20" main | grep -v "#"
  $S $NT $S7 $b "-b 8 -e 128K -f 16 -g 4 -n 200 -w 20" s7 s7serial:ANYCCL_LAUNCH_THREADS=0 | grep -v "#"
done
echo "=== reductions other than sums, reduce_scatter busbw (main vs s7)"
for o in max prod; do for d in float int8 bfloat16; do
  $S $NT $NEW reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 10 -w 3 -o $o -d $d" "main-$o-$d" | grep -v "#"
  $S $NT $S7 reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 10 -w 3 -o $o -d $d" "s7-$o-$d" | grep -v "#"
done; done
$S $NT $S7 all_reduce "-b 32M -e 512M -f 4 -g 4 -n 10 -w 3" s7-sum | grep -v "#"
echo "=== timeline: all_reduce 8 B and 32 KB, 50 iterations (span = first block start to last end; gap = to next launch)"
for s in 8 32K; do
  rm -f /tmp/tl.*; ANYCCL_CUDA_TIMELINE=/tmp/tl timeout 60 $NT/all_reduce_perf -b $s -e $s -g 4 -n 50 -w 5 > /dev/null 2>&1
  awk -f $P/calls/timeline.awk /tmp/tl.0 | tail -5
  awk '!/^#/ {s=$1; if(!(s in a)||$5<a[s])a[s]=$5; if(!(s in b)||$5>b[s])b[s]=$5} END {n=0; for (s in a) if ((s+1) in a) {g+=a[s+1]-b[s]; sp+=b[s]-a[s]; n++} if (n) printf "size '$s' rank0: mean span %.1f us, mean gap to next %.1f us, period %.1f us (%d)\n", sp/n/1e3, g/n/1e3, (sp+g)/n/1e3, n}' /tmp/tl.0
done
echo "=== small-size table (time us)"
awk '$1=="sweep" && $4 ~ /^[0-9]+$/ && $3 ~ /^(nccl|main|s7|s7serial)$/ {k=$2" "$4; v[k]=v[k]" "$3"="$5} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort -k1,1 -k2n
echo "=== other ops (busbw)"
awk '$1=="sweep" && $4 ~ /^[0-9]+$/ && $3 ~ /-/ {k=$3; v[k]=v[k]" "$6} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort
grep "^check" $OUT/log.txt | grep -v " 0 OK\|#wrong 0" ; echo "checks: $(grep -c '^check' $OUT/log.txt) lines"
