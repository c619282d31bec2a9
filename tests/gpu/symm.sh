#!/bin/bash
# Symmetric-window collectives (nccl-tests -R 2) on one GPU host: anyccl and
# NCCL side by side, each with and without registered windows, under CUDA
# graphs, with -c 1 checks. Prints one table last (time in us per size).
#
#   NT=<nccl-tests built against anyccl's headers> ANYCCL_LIB=<dir of anyccl's libnccl.so.2> \
#   NGPUS="2 4" COLLS="all_reduce all_gather reduce_scatter" bash tests/gpu/symm.sh
#
# One nccl-tests build serves both libraries (LD_LIBRARY_PATH picks one).
# Exit status 1 when a run fails, prints no rows, or reports a wrong value.
set -u
NT=${NT:?set NT to the nccl-tests build}
LIB=${ANYCCL_LIB:?set ANYCCL_LIB to anyccl\'s lib dir}
NCCL_LIB=${NCCL_LIB:-$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))')}
NGPUS=${NGPUS:-"2 4"}
COLLS=${COLLS:-"all_reduce all_gather reduce_scatter"}
ARGS=${ARGS:-"-b 8 -e 8M -f 4 -c 1 -n 50 -w 10 -G 10"}
OUT=${OUT:-/tmp/symm-out}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
rc=0
for g in $NGPUS; do
  for c in $COLLS; do
    for lib in nccl anyccl; do
      L=$NCCL_LIB; [ $lib = anyccl ] && L=$LIB
      for r in 0 2; do
        f=$OUT/$c-g$g-$lib-R$r.log
        LD_LIBRARY_PATH=$L timeout 120 "$NT/${c}_perf" $ARGS -g "$g" -R $r >"$f" 2>&1 || { echo "FAIL $f (exit $?)"; rc=1; }
        grep -q "Out of bounds values : 0 OK" "$f" || { echo "FAIL $f: no clean out-of-bounds line"; rc=1; }
        awk '/^ +[0-9]+ +[0-9]+ /{ if ($9 != 0 || $13 != 0) bad = 1 } END { exit bad }' "$f" || { echo "FAIL $f: #wrong"; rc=1; }
      done
    done
    echo "== $c, $g GPUs: out-of-place time (us), $ARGS"
    printf "%10s %9s %9s %9s %9s\n" bytes NCCL-R0 NCCL-R2 anyccl-R0 anyccl-R2
    paste <(awk '/^ +[0-9]+ +[0-9]+ /{print $1, $6}' "$OUT/$c-g$g-nccl-R0.log") \
          <(awk '/^ +[0-9]+ +[0-9]+ /{print $6}' "$OUT/$c-g$g-nccl-R2.log") \
          <(awk '/^ +[0-9]+ +[0-9]+ /{print $6}' "$OUT/$c-g$g-anyccl-R0.log") \
          <(awk '/^ +[0-9]+ +[0-9]+ /{print $6}' "$OUT/$c-g$g-anyccl-R2.log") |
      awk '{printf "%10s %9s %9s %9s %9s\n", $1, $2, $3, $4, $5}'
  done
done
exit $rc
