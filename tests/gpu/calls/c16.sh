#!/usr/bin/env bash
# session 6, call 9 (NOT RUN: no device time left): all_reduce and reduce_scatter 8 KB - 512 KB,
# session 5's library (e76a835, built into gpupack/old) vs the final one (new), interleaved
. "$(dirname "$0")/common.sh"
for b in all_reduce reduce_scatter; do ab $b "-b 8K -e 512K -f 2 -g 4 -n 200 -w 20" 3; done
LD_LIBRARY_PATH=$REAL timeout 60 $NT/all_reduce_perf -b 8K -e 512K -f 2 -g 4 -n 200 -w 20 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF>=12 {print "ab", 0, "all_reduce", "nccl", $1, $6, $8}'
echo "=== time us: size old1 new1 old2 new2 old3 new3"
awk '$1=="ab" && $4!="nccl" {v[$3" "$5]=v[$3" "$5]" "$6} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort -k1,1 -k2n
grep '^ab 0' $OUT/log.txt
