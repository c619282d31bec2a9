#!/usr/bin/env bash
# tests/gpu/sass_compare.sh -- compare the machine code of one kernel in two
# builds (for instance nccl-tests' device-API kernels built against anyccl's
# headers and against NVIDIA's): per build, the kernel's register count and
# a histogram of its SASS opcodes, side by side, largest differences first,
# then each loop's critical path in load latencies (sass_loops.py).
#
#   sass_compare.sh <binary A> <binary B> <kernel name pattern> [arch]
#
# The pattern is an extended regular expression matched against the mangled
# function names cuobjdump prints (the first match in each binary is taken;
# `cuobjdump -sass <binary> | grep Function` lists them). arch defaults to
# sm_90. Needs cuobjdump (CUDA toolkit; on the GPU hosts in
# /usr/local/cuda*/bin); binaries or cubins (nvcc -cubin) alike. Writes the
# two listings to $OUT (default: a temporary directory) as A.sass and B.sass.
set -u
[ $# -ge 3 ] || { sed -n '2,15p' "$0"; exit 2; }
A=$1 B=$2 PAT=$3 ARCH=${4:-sm_90}
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)}
[ -x "$CUOBJDUMP" ] || { echo "sass_compare: no cuobjdump (set CUOBJDUMP)"; exit 2; }
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
# one kernel's listing: from its "Function :" line to the next one
extract() { # binary name
  "$CUOBJDUMP" -sass -arch "$ARCH" "$1" 2>/dev/null |
    awk -v pat="$PAT" '/Function :/ { if (on) exit; on = ($3 ~ pat) } on' >"$OUT/$2.sass"
  [ -s "$OUT/$2.sass" ] || { echo "sass_compare: no function matching '$PAT' for $ARCH in $1"; exit 1; }
}
extract "$A" A
extract "$B" B
for x in A B; do
  printf "%s: %s\n" "$x" "$(head -1 "$OUT/$x.sass" | sed 's/.*Function : //')"
done
# registers: cuobjdump -res-usage names them per function
for x in A B; do
  bin=$A; [ $x = B ] && bin=$B
  f=$(head -1 "$OUT/$x.sass" | sed 's/.*Function : //')
  printf "%s registers: %s\n" "$x" "$("$CUOBJDUMP" -res-usage -arch "$ARCH" "$bin" 2>/dev/null |
    awk -v f="$f" 'index($0, f) { getline; if (match($0, /REG:[0-9]+/)) print substr($0, RSTART + 4, RLENGTH - 4); exit }')"
done
# opcode histograms (the mnemonic without its modifiers, predicates dropped)
hist() {
  awk '/^[ \t]*\/\*[0-9a-f]+\*\// { line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]+/, "", line); sub(/^@!?U?P[0-9T] +/, "", line);
         split(line, w, /[ .;]/); if (w[1] != "") n[w[1]]++ }
       END { for (k in n) print k, n[k] }' "$1" | sort
}
hist "$OUT/A.sass" >"$OUT/A.hist"
hist "$OUT/B.sass" >"$OUT/B.hist"
printf "%-10s %6s %6s %6s\n" opcode A B B-A
join -a1 -a2 -e0 -o 0,1.2,2.2 "$OUT/A.hist" "$OUT/B.hist" |
  awk '{ d = $3 - $2; printf "%-10s %6d %6d %6d\n", $1, $2, $3, d; ta += $2; tb += $3 }
       END { printf "%-10s %6d %6d %6d\n", "total", ta, tb, tb - ta }' |
  sort -k4,4nr -k1,1 | awk 'NR == 1 || $4 != 0 || $1 == "total"' | head -40
echo "listings: $OUT/A.sass $OUT/B.sass"
# the load latencies one pass of each loop waits for (sass_loops.py; 64-bit
# loads count as pointer-table reads unless SASS_LOOPS_OPTS says otherwise:
# set it empty for kernels that load 8-byte data)
command -v python3 >/dev/null && python3 "$(dirname "$0")/sass_loops.py" ${SASS_LOOPS_OPTS---cheap64} "$OUT/A.sass" "$OUT/B.sass"
