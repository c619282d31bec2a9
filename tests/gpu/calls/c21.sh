#!/usr/bin/env bash
# session 7, call 5: kernel per parameter size class (prefix; old = c19's lib) -- correctness across the classes,
# graphed busbw before/after, then the final run.sh tables (4 GPUs with graphs, 2 GPUs)
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$OURS:/usr/local/cuda/lib64 TIMEOUT=60
timeout 200 $P/coll_gpu threads 4 2>&1 | tail -1
chk() { local tag=$1; shift; timeout 120 "$@" -c 1 -n 2 -w 1 2>&1 | grep -E "Out of bounds|#wrong|rror" | tail -1 | sed "s/^/check $tag /"; }
for G in 0 1; do
  for b in all_reduce reduce_scatter reduce; do chk "g4 G$G $b" $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -G $G -d all -o all; done
  for b in all_gather broadcast alltoall sendrecv; do chk "g4 G$G $b" $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -G $G -d all; done
  for b in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do chk "g4 G$G big $b" $NT/${b}_perf -b 128M -e 1G -f 8 -g 4 -G $G; done
done
chk "g2 G1 all_reduce" $NT/all_reduce_perf -b 8 -e 64M -f 8 -g 2 -G 1 -d all -o all
chk "t4 all_reduce" $NT/all_reduce_perf -b 8 -e 64M -f 8 -t 4 -g 1 -d all -o all
echo "=== graphs: old (one 32 KB kernel) vs new (size classes), busbw"
for G in 1 0; do
  ab alltoall "-b 32M -e 128M -f 4 -g 4 -n 20 -w 5 -G $G" 1 | sed "s/^ab 1/ab G$G/"
  ab all_reduce "-b 128M -e 128M -g 4 -n 20 -w 5 -G $G" 1 | sed "s/^ab 1/ab G$G/"
  ab all_gather "-b 128M -e 128M -g 4 -n 20 -w 5 -G $G" 1 | sed "s/^ab 1/ab G$G/"
  ab all_reduce "-b 64K -e 64K -g 4 -n 100 -w 5 -G $G" 1 | sed "s/^ab 1/ab G$G/"
done
tables 230 150
grep "^ab G" $OUT/log.txt
tables_print
grep "^check" $OUT/log.txt | grep -v " 0 OK" ; echo "checks: $(grep -c '^check' $OUT/log.txt) lines (want 30), $(grep '^check' $OUT/log.txt | grep -c ' 0 OK') OK"
