#!/bin/sh
# Every function libnccl.so of NCCL 2.28 exports (nccl* and their pnccl*
# profiling twins; nccl228_exports.txt, read off NCCL 2.28.9's libnccl.so.2)
# must be exported by ours: a program or framework linked against NCCL
# (PyTorch's libtorch_cuda.so imports 38 of them) then loads with anyccl.
#   symbols_test.sh <nm> <libnccl.so.2> <nccl228_exports.txt>
nm=$1 lib=$2 list=$3
[ -r "$lib" ] || { echo "FAIL: no library at $lib"; exit 1; }
ours=$("$nm" -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" || $2 == "i" {print $3}' | sort -u)
missing=0
for s in $(grep -v '^#' "$list"); do
  if ! printf '%s\n' "$ours" | grep -qx "$s"; then
    echo "FAIL: $lib does not export $s (NCCL 2.28 does)"
    missing=$((missing + 1))
  fi
done
n=$(grep -vc '^#' "$list")
[ $missing -eq 0 ] || { echo "$missing of $n NCCL 2.28 functions missing"; exit 1; }
echo "ok: all $n functions NCCL 2.28 exports are exported"
