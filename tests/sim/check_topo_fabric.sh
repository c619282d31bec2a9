#!/usr/bin/env bash
# anyccl-topo on the sim backend's files: the shipped fabrics and calibration
# validate; a bad fabric and a bad calibration fail naming file, line and
# field; a drawing of 4 x 8 A3-high has its 4 rail leaves, the spine and
# every host's GPUs and NICs.
#   check_topo_fabric.sh ANYCCL_TOPO TOPOLOGIES_DIR
set -u
tool=$1 topo=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
"$tool" validate "$topo"/*.fabric "$topo"/*.calib > "$d/ok.txt" 2>&1 || fail "shipped files: $(cat "$d/ok.txt")"
[ "$(grep -c ': OK' "$d/ok.txt")" = "$(ls "$topo"/*.fabric "$topo"/*.calib | wc -l)" ] || fail "not every file OK"
printf 'hosts 2\ngpus_per_host 8\n# rails\nnics_per_host 3\n' > "$d/bad.fabric"
printf 'block_GBps 40\nlaunch_us soon\n' > "$d/bad.calib"
"$tool" validate "$d/bad.fabric" 2> "$d/err1.txt" && fail "a bad fabric validated"
grep -q "$d/bad.fabric:4: nics_per_host: 3 does not divide" "$d/err1.txt" || fail "fabric error: $(cat "$d/err1.txt")"
"$tool" validate "$d/bad.calib" 2> "$d/err2.txt" && fail "a bad calibration validated"
grep -q "$d/bad.calib:2: launch_us: 'soon' is not a number" "$d/err2.txt" || fail "calib error: $(cat "$d/err2.txt")"
"$tool" draw "$topo/sim_a3high_4x8.fabric" > "$d/a3.dot" || fail "draw exit"
for want in 'leaf3 -> spine' 'h3_g7 -> h3_nvs' 'h3_n3 -> leaf3' 'h0_n0 -> leaf0' 'h2_g6 -> h2_n3'; do
  grep -q "$want" "$d/a3.dot" || fail "drawing lacks '$want'"
done
"$tool" draw "$topo/sim_1024x8_h100.fabric" > "$d/big.dot" || fail "draw 1024 hosts"
grep -q '1020 more hosts' "$d/big.dot" || fail "a 1024-host drawing should note the hosts left out"
[ $fails = 0 ] && echo "anyccl-topo on fabric files: ok"
exit $((fails > 0))
