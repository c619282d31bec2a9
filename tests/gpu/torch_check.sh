#!/bin/bash
# PyTorch's ProcessGroupNCCL on NCCL and on anyccl, back to back, on one GPU host:
# every collective, point-to-point and sub-group check, DDP losses compared
# step by step, and bf16 all_reduce times eager and under a CUDA graph.
#
#   ANYCCL_LIB=<prefix>/lib/libnccl.so.2 NPROC=4 bash tests/gpu/torch_check.sh
#
# Prints one table last; exit status 0 when both libraries pass every check
# and anyccl's DDP losses match NCCL's (relative difference <= 1e-4 each step).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
NPROC=${NPROC:-$(nvidia-smi -L | wc -l)}
LIB=${ANYCCL_LIB:?set ANYCCL_LIB to the libnccl.so.2 of anyccl}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
rc=0
timeout ${RUN_TIMEOUT:-900} python3 "$ROOT/tests/gpu/torch_check.py" --nproc "$NPROC" --out "$OUT/torch-nccl.json" --port 29611 \
  >"$OUT/torch-nccl.log" 2>&1 || rc=1
LD_PRELOAD=$LIB timeout ${RUN_TIMEOUT:-900} python3 "$ROOT/tests/gpu/torch_check.py" --nproc "$NPROC" --out "$OUT/torch-anyccl.json" \
  --port 29612 >"$OUT/torch-anyccl.log" 2>&1 || rc=1
tail -n 8 "$OUT/torch-nccl.log" "$OUT/torch-anyccl.log"
python3 - "$OUT/torch-nccl.json" "$OUT/torch-anyccl.json" <<'PY' || rc=1
import json, sys
try:
    a, b = (json.load(open(f)) for f in sys.argv[1:3])
except Exception as e:
    print("torch_check: missing result:", e); sys.exit(1)
print(f"{'':24s} {'NCCL':>12s} {'anyccl':>12s}")
print(f"{'checks (failed)':24s} {a['checks']:>7d} ({len(a['fails'])}) {b['checks']:>7d} ({len(b['fails'])})")
la, lb = a["losses"], b["losses"]
worst = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)), default=float("inf"))
ok = len(la) == len(lb) and len(la) > 0 and worst <= 1e-4
print(f"{'DDP loss first/last':24s} {la[0] if la else float('nan'):>12.6f} {lb[0] if lb else float('nan'):>12.6f}")
print(f"{'':24s} {la[-1] if la else float('nan'):>12.6f} {lb[-1] if lb else float('nan'):>12.6f}")
print(f"DDP losses: {len(la)} steps, worst relative difference {worst:.2e} -> {'MATCH' if ok else 'DIFFER'}")
print(f"{'bf16 all_reduce (us)':24s} {'eager':>6s} {'graph':>6s}   {'eager':>6s} {'graph':>6s}")
for k in a["timings_us"]:
    ea, ga = a["timings_us"][k]; eb, gb = b["timings_us"].get(k, (float('nan'),)*2)
    print(f"{int(k) >> 10:>10d} KB {'':11s} {ea:6.1f} {ga:6.1f}   {eb:6.1f} {gb:6.1f}")
sys.exit(0 if ok and not a["fails"] and not b["fails"] else 1)
PY
exit $rc
