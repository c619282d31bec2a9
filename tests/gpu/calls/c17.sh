#!/usr/bin/env bash
# session 7, call 1: the host cost of launches (one thread round robin vs a thread per GPU, parameter
# sizes), then c16's small all_reduce/reduce_scatter A/B (session 5's lib vs main), and where the host time goes
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | head -4
echo "=== launch micro, 4 GPUs"; $P/micro/launch 4
echo "=== launch micro, 2 GPUs"; $P/micro/launch 2
for b in all_reduce reduce_scatter; do ab $b "-b 8K -e 512K -f 4 -g 4 -n 200 -w 20" 2; done
LD_LIBRARY_PATH=$REAL timeout 60 $NT/all_reduce_perf -b 8K -e 512K -f 4 -g 4 -n 200 -w 20 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF>=12 {print "ab", 0, "all_reduce", "nccl", $1, $6, $8}'
echo "=== profile host, all_reduce 8 B and 32 KB -g 4"
for s in 8 32K; do ANYCCL_PROFILE_HOST=1 timeout 60 $NT/all_reduce_perf -b $s -e $s -g 4 -n 2000 -w 50 2>&1 | grep -v "^#" | tail -12; done
echo "=== time us: size old1 new1 old2 new2"
awk '$1=="ab" && $4!="nccl" {v[$3" "$5]=v[$3" "$5]" "$6} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort -k1,1 -k2n
grep '^ab 0' $OUT/log.txt
