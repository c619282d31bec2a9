#!/bin/sh
# anyccl-topo end to end: errors name file:line, element, attribute; dump, draw, load --host, detect.
# usage: tool_test.sh ANYCCL_TOPO TOPOLOGIES_DIR
set -u
tool=$1
topos=$2
dir=$(mktemp -d /tmp/anyccl-topo-tool.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# validate: exit 1, the exact error on stderr, the good file still reported OK
printf '<system version="1">\n  <cpu numaid="0" arch="arm64">\n    <pci busid="0000:17:00.0" class="0x0302" link_speed="" link_width="x16"/>\n  </cpu>\n</system>\n' >"$dir/bad.xml"
"$tool" validate "$topos/a3high.xml" "$dir/bad.xml" >"$dir/out" 2>"$dir/err" && fail "validate accepted a bad file"
grep -qx "$dir/bad.xml:3: <pci> attribute \"link_width\": expected an integer in 0..64, got \"x16\"" "$dir/err" ||
  fail "validate error: $(cat "$dir/err")"
grep -q "a3high.xml: OK (1 host, 8 GPUs, 4 NICs)" "$dir/out" || fail "validate output: $(cat "$dir/out")"

# dump -> validate -> dump is stable
"$tool" dump "$topos/2node_16gpu.xml" -o "$dir/d1.xml" || fail "dump"
"$tool" dump "$dir/d1.xml" >"$dir/d2.xml" || fail "dump of the dump"
cmp -s "$dir/d1.xml" "$dir/d2.xml" || fail "dump is not stable"
"$tool" dump "$topos/4node_32gpu.xml" --host 3 | grep -q 'busid="0003:8b:00.0"' || fail "dump --host 3"

# load --host resolves the per-host file
"$tool" load "$topos/2node_16gpu.xml" --host 1 | grep -q "2node_16gpu_node1.xml: 1 host" || fail "load --host"

# draw: DOT always; SVG through dot when installed, else a clear message and the DOT file
"$tool" draw "$topos/a3high.xml" | grep -q "^digraph topology" || fail "draw to stdout"
if command -v dot >/dev/null 2>&1; then
  "$tool" draw "$topos/dgx8_nvswitch.xml" -o "$dir/t.svg" >/dev/null || fail "draw svg"
  grep -q "<svg" "$dir/t.svg" || fail "no svg"
else
  PATH=/nonexistent "$tool" draw "$topos/dgx8_nvswitch.xml" -o "$dir/t.svg" 2>"$dir/err" && fail "draw svg without dot"
  grep -q "Graphviz is not installed" "$dir/err" || fail "draw message: $(cat "$dir/err")"
  grep -q "^digraph topology" "$dir/t.dot" || fail "no DOT file next to the SVG"
fi

# detect prints a topology that validates
"$tool" detect -o "$dir/me.xml" || fail "detect"
"$tool" validate "$dir/me.xml" >/dev/null || fail "detected topology does not validate"

# usage errors
"$tool" rings "$topos/a3high.xml" --hosts 2 2>/dev/null && fail "rings without --gpus-per-host"
"$tool" frobnicate 2>/dev/null && fail "unknown command"
echo "tool: OK"
