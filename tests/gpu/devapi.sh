#!/bin/bash
# The NCCL 2.28 device API on GPUs: nccl-tests 2.19.x (unmodified) built
# against anyccl's nccl.h + nccl_device.h with NVIDIA's NCCL headers hidden,
# its device-API kernels run against anyccl's libnccl, and `import torch`
# with anyccl's libnccl in place of the nvidia-nccl wheel's.
#
#   NCCL_TESTS_SRC=/path/to/nccl-tests (tag v2.19.6)  bash tests/gpu/devapi.sh
#
# Steps (each logged to $OUT/devapi.log, a PASS/FAIL line per step in $OUT/devapi-summary.txt):
#  1. anyccl: cmake -S . -B $BUILD_DIR (CUDA on), build, install into $PREFIX
#     (SKIP_BUILD=1: $PREFIX already holds an install).
#  2. nccl-tests: all_reduce_perf and alltoall_perf, `make NCCL_HOME=$PREFIX`, for
#     sm_90 (NVCC_GENCODE to change), inside a private mount namespace where
#     every other nccl.h / nccl_device.h (CUDA toolkit, /usr/include, the
#     nvidia-nccl wheel) is hidden; `nvcc -M` shows which headers were read
#     and the step fails if any NCCL header came from outside $PREFIX/include.
#     (SKIP_NT_BUILD=1: use the binaries already in $NT_BUILD.)
#  3. runs, each under `timeout`, with LD_LIBRARY_PATH=$PREFIX/lib (ldd checked):
#     all_reduce_perf -R 2 -D 1 and -D 2; alltoall_perf -R 2 -D 1, 2, 3, 4;
#     each with -c 1 -b 8 -e $MAXBYTES -f 4 -g G for G in 2 and 4 (those the host has).
#     A run FAILs on a non-zero exit (nccl-tests exits 1 on wrong data), a timeout,
#     'Out of bounds values : N FAILED' or no result lines.
#     Then tests/gpu/devapi_procs.cu, one process per GPU (windows mapped from
#     the peers' file descriptors): LSA all-reduce, GIN puts with signals and counters, world
#     barrier, LL all-to-all, 20 iterations checked against a host reference; and
#     the same on 2 virtual hosts (NCCL_HOSTID): GIN through the proxy.
#     (SKIP_RUNS=1 skips step 3; SKIP_TORCH=1 step 4.)
#  4. torch: the nccl symbols libtorch_cuda.so imports are all exported; `import
#     torch` with LD_PRELOAD=$PREFIX/lib/libnccl.so.2 (the wheel's lib dir behind
#     ours on LD_LIBRARY_PATH) and LD_DEBUG=bindings shows every nccl symbol of
#     libtorch_cuda.so bound to anyccl's library (torch also maps the wheel's
#     copy, by path, but binds nothing to it); then a torch.distributed
#     all_reduce/all_gather/barrier on 2 GPUs, backend "nccl" = anyccl.
# Exit status 0 when every step passed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
PREFIX=${PREFIX:-$BUILD_DIR/prefix}
NCCL_TESTS_SRC=${NCCL_TESTS_SRC:-$ROOT/third_party/nccl-tests}
NT_BUILD=${NT_BUILD:-$BUILD_DIR/nt-devapi}
NVCC_GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
MAXBYTES=${MAXBYTES:-32M}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
LOG=$OUT/devapi.log
SUM=$OUT/devapi-summary.txt
: >"$LOG"
: >"$SUM"
fails=0
say() { echo "$*" | tee -a "$LOG"; }
result() { # name status detail
  printf '%-40s %s %s\n' "$1" "$2" "${3:-}" | tee -a "$SUM" "$LOG"
  [ "$2" = PASS ] || [ "$2" = SKIP ] || fails=$((fails + 1))
}

# ---- 1. anyccl ---------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "== building anyccl into $PREFIX"
  if cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
       -DANYCCL_CUDA_ARCHS="90-real" >>"$LOG" 2>&1 &&
     cmake --build "$BUILD_DIR" -j"$(nproc)" --target nccl anyccl-cpu >>"$LOG" 2>&1 &&
     cmake --install "$BUILD_DIR" >>"$LOG" 2>&1; then
    result build-anyccl PASS
  else
    result build-anyccl FAIL "(see $LOG)"
  fi
fi
LIB=$PREFIX/lib/libnccl.so.2
[ -e "$LIB" ] || LIB=$(ls "$PREFIX"/lib*/libnccl.so.2 2>/dev/null | head -1)
if [ ! -e "$LIB" ] || [ ! -e "$PREFIX/include/nccl_device.h" ]; then
  result install FAIL "no libnccl.so.2 or nccl_device.h under $PREFIX"
  exit 1
fi
LIBDIR=$(dirname "$LIB")
[ -e "$PREFIX/lib/libnccl.so" ] || ln -sf "$LIB" "$PREFIX/lib/libnccl.so" 2>/dev/null

# ---- 2. nccl-tests against anyccl's headers only -------------------------------
# Every NCCL header outside $PREFIX that a compiler could find.
nvidia_headers() {
  local dirs="/usr/include /usr/local/include $CUDA_HOME/include $CUDA_HOME/targets/*/include /usr/local/cuda*/include"
  local wheel
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null)
  [ -n "$wheel" ] && dirs="$dirs $wheel"
  for d in $dirs; do
    [ -d "$d" ] || continue
    find "$d" -maxdepth 1 \( -name nccl.h -o -name nccl_device.h -o -name nccl_net.h -o -name nccl_device \) 2>/dev/null
  done | sort -u
}
HIDE=$OUT/hide-nccl-headers.sh
cat >"$HIDE" <<'EOS'
#!/bin/sh
# hide-nccl-headers.sh LIST CMD...: bind /dev/null over each header and an
# empty directory over each nccl_device/ named in LIST, then run CMD (call
# it inside `unshare -m`, so the mounts are this command's alone).
list=$1; shift
empty=$(mktemp -d)
while read -r p; do
  [ -n "$p" ] || continue
  if [ -d "$p" ]; then mount --bind "$empty" "$p"; else mount --bind /dev/null "$p"; fi || exit 97
done <"$list"
exec "$@"
EOS
chmod +x "$HIDE"
nvidia_headers >"$OUT/nvidia-headers.txt"
say "== NVIDIA NCCL headers on this host (hidden while nccl-tests builds):"
cat "$OUT/nvidia-headers.txt" | tee -a "$LOG"
isolated() { # run "$@" with those headers hidden
  if [ ! -s "$OUT/nvidia-headers.txt" ]; then "$@"
  elif [ "$(id -u)" = 0 ]; then unshare -m "$HIDE" "$OUT/nvidia-headers.txt" "$@"
  else unshare -m --map-root-user "$HIDE" "$OUT/nvidia-headers.txt" "$@"
  fi
}

if [ "${SKIP_NT_BUILD:-0}" != 1 ]; then
  say "== building nccl-tests ($NCCL_TESTS_SRC) against $PREFIX"
  if [ ! -f "$NCCL_TESTS_SRC/src/alltoall.cu" ]; then
    result build-nccl-tests FAIL "no nccl-tests at $NCCL_TESTS_SRC (check out NVIDIA/nccl-tests v2.19.6 there)"
  else
    (cd "$NCCL_TESTS_SRC" && git describe --tags 2>/dev/null) | sed 's/^/nccl-tests version: /' | tee -a "$LOG"
    mkdir -p "$NT_BUILD"
    # Which headers does all_reduce.cu read? Only anyccl's may be NCCL's.
    isolated "$CUDA_HOME/bin/nvcc" -std=c++17 -DNCCL_OS_LINUX -I"$PREFIX/include" -I"$NCCL_TESTS_SRC/os" \
      -M "$NCCL_TESTS_SRC/src/all_reduce.cu" >"$OUT/nccl-tests-deps.txt" 2>>"$LOG"
    tr ' ' '\n' <"$OUT/nccl-tests-deps.txt" | grep -E '(^|/)nccl(_device)?(\.h|/)' >"$OUT/nccl-headers-read.txt"
    say "NCCL headers all_reduce.cu reads:"
    tee -a "$LOG" <"$OUT/nccl-headers-read.txt"
    foreign=$(grep -v "^$PREFIX/include/" "$OUT/nccl-headers-read.txt" | grep -v '^$' || true)
    if [ ! -s "$OUT/nccl-headers-read.txt" ] || [ -n "$foreign" ]; then
      result headers-are-anyccls FAIL "$foreign"
    else
      result headers-are-anyccls PASS "($(wc -l <"$OUT/nccl-headers-read.txt") headers, all under $PREFIX/include)"
    fi
    if isolated make -C "$NCCL_TESTS_SRC/src" -j"$(nproc)" MPI=0 NCCL_HOME="$PREFIX" CUDA_HOME="$CUDA_HOME" \
         NVCC_GENCODE="$NVCC_GENCODE" BUILDDIR="$NT_BUILD" os.build "$NT_BUILD/all_reduce_perf" \
         "$NT_BUILD/alltoall_perf" >>"$LOG" 2>&1; then
      result build-nccl-tests PASS
    else
      result build-nccl-tests FAIL "(see $LOG)"
    fi
  fi
fi

# ---- 3. runs -------------------------------------------------------------------
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
say "== $NGPU GPUs"
nvidia-smi topo -m >>"$LOG" 2>&1
run_one() { # name binary args...
  local name=$1 bin=$2
  shift 2
  local f=$OUT/run-$name.log
  if [ ! -x "$bin" ]; then
    result "$name" FAIL "no binary $bin"
    return
  fi
  if ! LD_LIBRARY_PATH="$LIBDIR" ldd "$bin" | grep -q "libnccl.so.2 => $LIBDIR/"; then
    result "$name" FAIL "ldd: libnccl.so.2 does not resolve to $LIBDIR"
    return
  fi
  LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=WARN \
    timeout -k 5 "$RUN_TIMEOUT" "$bin" "$@" >"$f" 2>&1
  local rc=$? lines bad
  lines=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$f")
  bad=$(grep -E "Out of bounds values : [1-9]" "$f" || true) # nccl-tests also exits 1 then
  {
    echo "---- $name: $bin $*  (rc $rc)"
    head -c 20000 "$f"
  } >>"$LOG"
  if [ $rc = 124 ] || [ $rc = 137 ]; then result "$name" FAIL "timeout ${RUN_TIMEOUT}s"
  elif [ $rc != 0 ]; then result "$name" FAIL "exit $rc: $(grep -m1 -iE 'warn|fail|error' "$f")"
  elif [ "$lines" = 0 ]; then result "$name" FAIL "no result lines"
  elif [ -n "$bad" ]; then result "$name" FAIL "$bad"
  else result "$name" PASS "($lines sizes; $(grep -m1 'Avg bus bandwidth' "$f" | sed 's/^# *//'))"
  fi
}
for g in 2 4; do
  [ "${SKIP_RUNS:-0}" = 1 ] && break
  if [ "$NGPU" -lt $g ]; then
    result "runs with -g $g" SKIP "(host has $NGPU GPUs)"
    continue
  fi
  common="-c 1 -b 8 -e $MAXBYTES -f 4 -n 5 -w 2 -g $g -R 2"
  for d in 1 2; do run_one "all_reduce_D$d-g$g" "$NT_BUILD/all_reduce_perf" $common -D $d; done
  for d in 1 2 3 4; do run_one "alltoall_D$d-g$g" "$NT_BUILD/alltoall_perf" $common -D $d; done
  run_one "all_reduce_D0-g$g" "$NT_BUILD/all_reduce_perf" $common -D 0
done
if [ "${SKIP_RUNS:-0}" != 1 ] && [ "$NGPU" -ge 2 ]; then
  # multicast (-D 3: multimem kernels) is refused: a clear error, no hang
  LD_LIBRARY_PATH="$LIBDIR" NCCL_DEBUG=WARN timeout -k 5 "$RUN_TIMEOUT" "$NT_BUILD/all_reduce_perf" -c 1 -b 8 -e 1M \
    -g 2 -R 2 -D 3 >"$OUT/run-multimem.log" 2>&1
  rc=$?
  cat "$OUT/run-multimem.log" >>"$LOG"
  if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "lsaMultimem" "$OUT/run-multimem.log"; then
    result all_reduce_D3-refused PASS "(exit $rc: $(grep -m1 lsaMultimem "$OUT/run-multimem.log" | cut -c1-120))"
  else result all_reduce_D3-refused FAIL "exit $rc, no lsaMultimem WARN"
  fi
fi

# ---- 3b. across processes (windows mapped from the peers' file descriptors): tests/gpu/devapi_procs.cu ------------
PROCS_BIN=${PROCS_BIN:-$NT_BUILD/devapi_procs}
if [ "${SKIP_NT_BUILD:-0}" != 1 ]; then
  if isolated "$CUDA_HOME/bin/nvcc" -std=c++17 $NVCC_GENCODE -I"$PREFIX/include" "$ROOT/tests/gpu/devapi_procs.cu" \
       -L"$LIBDIR" -lnccl -o "$PROCS_BIN" >>"$LOG" 2>&1; then result build-devapi_procs PASS
  else result build-devapi_procs FAIL "(see $LOG)"
  fi
fi
for g in 2 4; do
  [ "$NGPU" -ge $g ] || continue
  LD_LIBRARY_PATH="$LIBDIR" NCCL_DEBUG=WARN timeout -k 5 "$RUN_TIMEOUT" "$PROCS_BIN" $g 20 >"$OUT/run-procs$g.log" 2>&1
  rc=$?
  cat "$OUT/run-procs$g.log" >>"$LOG"
  if [ $rc = 0 ]; then result "devapi_procs-$g" PASS "(windows through CUDA IPC, LSA/world barriers, GIN, LL)"
  else result "devapi_procs-$g" FAIL "rc $rc: $(grep -m2 -iE 'fail|warn|error' "$OUT/run-procs$g.log" | tr '\n' ' ')"
  fi
done
if [ "$NGPU" -ge 2 ]; then
  for mode in timeout abort hosts; do # a peer that never arrives: the waits come back; GIN across virtual hosts
    iters=0
    [ $mode = hosts ] && iters=20
    LD_LIBRARY_PATH="$LIBDIR" NCCL_DEBUG=WARN timeout -k 5 "$RUN_TIMEOUT" "$PROCS_BIN" 2 $iters $mode >"$OUT/run-$mode.log" 2>&1
    rc=$?
    cat "$OUT/run-$mode.log" >>"$LOG"
    if [ $rc = 0 ]; then result "devapi_procs-$mode" PASS "($(grep -m1 -E 'came back|hosts of one' "$OUT/run-$mode.log"))"
    else result "devapi_procs-$mode" FAIL "rc $rc: $(grep -m2 -iE 'fail|warn|error' "$OUT/run-$mode.log" | tr '\n' ' ')"
    fi
  done
fi

# ---- 4. import torch -------------------------------------------------------------
if [ "${SKIP_TORCH:-0}" = 1 ]; then # (tests/gpu/pack.sh: the builds alone, on a machine without GPUs)
  say "== summary"
  cat "$SUM"
  [ $fails = 0 ]
  exit
fi
WHEEL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
say "== torch with $LIB (nvidia.nccl lib dir: ${WHEEL_LIB:-none})"
TORCH_CUDA=$(python3 -c 'import os, importlib.util as u; print(os.path.join(os.path.dirname(u.find_spec("torch").origin), "lib", "libtorch_cuda.so"))' 2>/dev/null)
if [ -n "$TORCH_CUDA" ] && [ -e "$TORCH_CUDA" ]; then
  nm -D --undefined-only "$TORCH_CUDA" | awk '{print $NF}' | grep -E '^p?nccl' | sed 's/@.*//' | sort -u >"$OUT/torch-nccl-imports.txt"
  nm -D --defined-only "$LIB" | awk '{print $NF}' | sort -u >"$OUT/anyccl-exports.txt"
  missing=$(comm -23 "$OUT/torch-nccl-imports.txt" "$OUT/anyccl-exports.txt" | tr '\n' ' ')
  if [ -z "$missing" ]; then result torch-nccl-symbols PASS "($(wc -l <"$OUT/torch-nccl-imports.txt") nccl symbols libtorch_cuda.so imports, all exported)"
  else result torch-nccl-symbols FAIL "missing: $missing"
  fi
else
  result torch-nccl-symbols FAIL "no libtorch_cuda.so found (python3 -c 'import torch' works?)"
fi
# Which libnccl do libtorch_cuda.so's nccl symbols bind to? (LD_PRELOAD puts
# anyccl first in the global scope; torch may still map the wheel's copy.)
cat >"$OUT/torch_import.py" <<'EOS'
import torch
print("torch", torch.__version__, "nccl version", torch.cuda.nccl.version())
EOS
# An all-reduce through torch.distributed (backend nccl = anyccl), 2 processes.
cat >"$OUT/torch_dist.py" <<'EOS'
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank, n, port):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            device_id=torch.device("cuda", rank))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = n * (n + 1) / 2
    ok = bool((x == want).all())
    y = [torch.zeros(4, device="cuda") for _ in range(n)]
    dist.all_gather(y, torch.full((4,), float(rank), device="cuda"))
    ok = ok and all(bool((y[r] == r).all()) for r in range(n))
    dist.barrier()
    dist.destroy_process_group()
    if not ok: sys.exit(1)
if __name__ == "__main__":
    n = int(sys.argv[1])
    mp.spawn(run, args=(n, 29531), nprocs=n)
    print("torch.distributed all_reduce/all_gather on", n, "GPUs: ok")
EOS
ENVT="LD_PRELOAD=$LIB LD_LIBRARY_PATH=$LIBDIR${WHEEL_LIB:+:$WHEEL_LIB}"
env $ENVT LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT="$OUT/ld" timeout 300 python3 "$OUT/torch_import.py" \
  >"$OUT/torch.log" 2>&1
rc=$?
cat "$OUT/torch.log" >>"$LOG"
cat "$OUT"/ld.* 2>/dev/null | grep 'libtorch_cuda.so' | grep -E "symbol \`p?nccl" >"$OUT/torch-bindings.txt"
rm -f "$OUT"/ld.*
nb=$(wc -l <"$OUT/torch-bindings.txt")
other=$(grep -v " to $LIB " "$OUT/torch-bindings.txt" | grep -v " to $(readlink -f "$LIB") " | head -3)
head -5 "$OUT/torch-bindings.txt" >>"$LOG"
if [ $rc != 0 ]; then result import-torch FAIL "$(tail -3 "$OUT/torch.log" | tr '\n' ' ')"
elif [ "$nb" = 0 ] || [ -n "$other" ]; then result import-torch FAIL "$nb bindings; not to anyccl: $other"
else result import-torch PASS "($(head -1 "$OUT/torch.log"); all $nb nccl bindings of libtorch_cuda.so go to anyccl)"
fi
if [ "$NGPU" -ge 2 ]; then
  env $ENVT NCCL_DEBUG=WARN timeout 300 python3 "$OUT/torch_dist.py" 2 >"$OUT/torch-dist.log" 2>&1
  rc=$?
  cat "$OUT/torch-dist.log" >>"$LOG"
  if [ $rc = 0 ]; then result torch-distributed-2 PASS "(all_reduce, all_gather, barrier)"
  else result torch-distributed-2 FAIL "$(grep -m3 -iE 'error|warn|fail' "$OUT/torch-dist.log" | tr '\n' ' ' | head -c 400)"
  fi
fi

say "== summary"
cat "$SUM"
[ $fails = 0 ]
