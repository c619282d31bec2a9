#!/usr/bin/env python3
"""PyTorch's ProcessGroupNCCL on whichever libnccl the process loaded.

Run it twice on a GPU host, once as is (NCCL from the nvidia-nccl wheel) and
once with anyccl's library preloaded, and compare (tests/gpu/torch_check.sh
does both and prints one table):

    python3 tests/gpu/torch_check.py --nproc 4 --out nccl.json
    LD_PRELOAD=<anyccl>/lib/libnccl.so.2 python3 tests/gpu/torch_check.py --nproc 4 --out anyccl.json

Checks (every result against a reference computed on the host, in float64
where the type allows): all_reduce with every op over six dtypes, broadcast,
reduce, all_gather (tensor and list), reduce_scatter, all_to_all_single,
gather, scatter, batched send/recv in a ring, barrier, the same on a
sub-group of the even ranks and on groups from split, then DDP training of
a small MLP (losses written to --out), then bf16 all_reduce timings eager
and captured in a CUDA graph (the tensor-parallel pattern).

Diagnostics (environment): TORCH_CHECK_ONLY_TIMINGS=1 runs the timings alone;
TORCH_CHECK_EAGER_EACH=1 times each eager call on the host;
TORCH_CHECK_REPLAYS=1 times each graph replay alone; TORCH_CHECK_STAMPS=1
prints, per rank and loop, the host's time in each call and the GPU's time
between the ends of consecutive calls (a slow loop's first calls in full), so
that a slow stretch shows whether a host or the GPUs waited;
TORCH_CHECK_DUMP_S=N dumps every thread's stack after N seconds;
TORCH_CHECK_SIZES=B,B,... times those sizes (bytes) instead of 8 KB-16 MB.
"""
import argparse
import faulthandler
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
       "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}


def fill(rank, n, dtype, salt):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype.is_floating_point:
        t = torch.randint(-8, 9, (n,), generator=g).to(torch.float64) / 4
    else:
        t = torch.randint(-50, 51, (n,), generator=g).to(torch.float64)
    return t


def reduce_ref(parts, op):
    r = parts[0].clone()
    for p in parts[1:]:
        if op == "sum" or op == "avg":
            r = r + p
        elif op == "max":
            r = torch.maximum(r, p)
        elif op == "min":
            r = torch.minimum(r, p)
        else:
            r = r * p
    if op == "avg":
        r = r / len(parts)
    return r


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.fails = []
        self.count = 0

    def check(self, name, got, ref, dtype):
        self.count += 1
        got = got.detach().to("cpu", torch.float64)
        ref = ref.to(torch.float64)
        if dtype in (torch.float16, torch.bfloat16):
            tol = 2e-2 * (1 + ref.abs())
        elif dtype.is_floating_point:
            tol = 1e-5 * (1 + ref.abs())
        else:
            tol = torch.zeros_like(ref)
        bad = ((got - ref).abs() > tol).nonzero()
        if got.shape != ref.shape or len(bad):
            i = int(bad[0][0]) if len(bad) else -1
            self.fails.append(f"{name}: element {i} got {got.flatten()[i].item() if i >= 0 else got.shape} "
                              f"want {ref.flatten()[i].item() if i >= 0 else ref.shape}")


def collectives(ck, rank, world, group, ranks, dev, tag):
    """Every collective on `group` (whose members are `ranks`); `rank` is the global rank."""
    me = ranks.index(rank)
    n = len(ranks)
    root = n - 1
    for dtype in DTYPES:
        for opname, op in OPS.items():
            if opname == "avg" and not dtype.is_floating_point:
                continue
            if opname == "product":
                cnt = 33
            else:
                cnt = 1000 + 17
            parts = [fill(r, cnt, dtype, 1) for r in ranks]
            if opname == "product":
                parts = [torch.where(p.abs() > 2, torch.sign(p), p) for p in parts]
            x = parts[me].to(dtype).to(dev)
            dist.all_reduce(x, op=op, group=group)
            ref = reduce_ref(parts, opname)
            ck.check(f"{tag} all_reduce {dtype} {opname}", x, ref.to(dtype).to(torch.float64), dtype)
        cnt = 4099
        parts = [fill(r, cnt, dtype, 2) for r in ranks]
        x = parts[me].to(dtype).to(dev)
        dist.broadcast(x, src=ranks[root], group=group)
        ck.check(f"{tag} broadcast {dtype}", x, parts[root].to(dtype), dtype)
        x = parts[me].to(dtype).to(dev)
        dist.reduce(x, dst=ranks[0], op=dist.ReduceOp.SUM, group=group)
        if me == 0:
            ck.check(f"{tag} reduce {dtype}", x, reduce_ref(parts, "sum").to(dtype), dtype)
        x = parts[me].to(dtype).to(dev)
        out = torch.empty(n * cnt, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, x, group=group)
        ck.check(f"{tag} all_gather_into_tensor {dtype}", out, torch.cat(parts).to(dtype), dtype)
        outs = [torch.empty(cnt, dtype=dtype, device=dev) for _ in range(n)]
        dist.all_gather(outs, x, group=group)
        ck.check(f"{tag} all_gather list {dtype}", torch.cat(outs), torch.cat(parts).to(dtype), dtype)
        big = [fill(r, n * cnt, dtype, 3) for r in ranks]
        x = big[me].to(dtype).to(dev)
        out = torch.empty(cnt, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, x, group=group)
        ck.check(f"{tag} reduce_scatter {dtype}", out, reduce_ref(big, "sum")[me * cnt:(me + 1) * cnt].to(dtype), dtype)
        x = big[me].to(dtype).to(dev)
        out = torch.empty(n * cnt, dtype=dtype, device=dev)
        dist.all_to_all_single(out, x, group=group)
        ref = torch.cat([big[q][me * cnt:(me + 1) * cnt] for q in range(n)])
        ck.check(f"{tag} all_to_all_single {dtype}", out, ref.to(dtype), dtype)
    # gather / scatter (float32)
    cnt = 777
    parts = [fill(r, cnt, torch.float32, 4) for r in ranks]
    x = parts[me].to(torch.float32).to(dev)
    gl = [torch.empty(cnt, device=dev) for _ in range(n)] if me == root else None
    dist.gather(x, gather_list=gl, dst=ranks[root], group=group)
    if me == root:
        ck.check(f"{tag} gather", torch.cat(gl), torch.cat(parts), torch.float32)
    sl = [parts[q].to(torch.float32).to(dev) for q in range(n)] if me == 0 else None
    out = torch.empty(cnt, device=dev)
    dist.scatter(out, scatter_list=sl, src=ranks[0], group=group)
    ck.check(f"{tag} scatter", out, parts[me], torch.float32)
    # a ring of batched send/recv
    if n > 1:
        nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
        x = parts[me].to(torch.float32).to(dev)
        out = torch.empty(cnt, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt, group), dist.P2POp(dist.irecv, out, prv, group)])
        for r in reqs:
            r.wait()
        ck.check(f"{tag} send/recv ring", out, parts[(me - 1) % n], torch.float32)
    dist.barrier(group=group, device_ids=[dev.index])


def ddp_losses(rank, world, dev, steps=40):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(42 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=g).to(dev)
        y = torch.randint(0, 10, (32,), generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        losses.append(t.item())
    return losses


class Stamps:
    """Where a slow loop's time goes, per call: the host's time in the call and the GPU's time
    between the ends of consecutive calls (an event recorded after each). Host times are
    CLOCK_MONOTONIC, the same clock in every process, so ranks can be lined up."""

    def __init__(self, n):
        self.host = []
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        self.ev[0].record()

    def call(self, fn):
        t1 = time.perf_counter_ns()
        fn()
        self.host.append((t1, time.perf_counter_ns() - t1))
        self.ev[len(self.host)].record()

    def report(self, rank, what):
        torch.cuda.synchronize()
        gpu = [self.ev[i].elapsed_time(self.ev[i + 1]) * 1e3 for i in range(len(self.host))]
        h = [d / 1e3 for _, d in self.host]
        med = lambda v: sorted(v)[len(v) // 2]
        slow = [i for i, g in enumerate(gpu) if g > 3 * med(gpu) and g > 50]
        print(f"  stamps rank {rank} {what}: start {self.host[0][0] / 1e6:.3f} ms end {self.host[-1][0] / 1e6:.3f} ms, "
              f"host call median {med(h):.1f} max {max(h):.1f} us, GPU per call median {med(gpu):.1f} "
              f"max {max(gpu):.1f} us, {len(slow)} calls > 3x median", flush=True)
        if slow or med(gpu) > 100:
            i0 = slow[0] if slow else 0
            print(f"  stamps rank {rank} {what} from call {i0}: " + " ".join(
                f"{i}:{self.host[i][0] / 1e6:.3f}/{h[i]:.0f}/{gpu[i]:.0f}" for i in range(i0, min(i0 + 12, len(gpu)))),
                flush=True)


def timings(dev, sizes=(8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20), iters=200):
    if os.environ.get("TORCH_CHECK_SIZES"):  # e.g. 16777216,4194304
        sizes = tuple(int(v) for v in os.environ["TORCH_CHECK_SIZES"].split(","))
    res = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=dev)
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier(device_ids=[dev.index])
        each = [] if os.environ.get("TORCH_CHECK_EAGER_EACH") else None
        stamps = Stamps(iters) if os.environ.get("TORCH_CHECK_STAMPS") else None
        t0 = time.perf_counter()
        for _ in range(iters):
            if stamps is not None:
                stamps.call(lambda: dist.all_reduce(x))
                continue
            if each is None:
                dist.all_reduce(x)
                continue
            t1 = time.perf_counter()
            dist.all_reduce(x)
            each.append((time.perf_counter() - t1) * 1e6)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / iters * 1e6
        if stamps is not None:
            stamps.report(dev.index, f"{nbytes >> 10} KB eager")
        if each:  # where an eager loop's time goes: in the calls (host) or in the final wait (GPU)
            srt = sorted(each)
            print(f"  rank {dev.index} {nbytes >> 10} KB eager calls: min {srt[0]:.1f} median {srt[len(srt) // 2]:.1f} "
                  f"max {srt[-1]:.1f} us (call {each.index(srt[-1])}), calls {sum(each):.0f} us, "
                  f"final sync {(time.perf_counter() - t2) * 1e6:.0f} us, total {eager * iters:.0f} us", flush=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                dist.all_reduce(x)
        graph.replay()
        torch.cuda.synchronize()
        dist.barrier(device_ids=[dev.index])
        stamps = Stamps(iters // 10) if os.environ.get("TORCH_CHECK_STAMPS") else None
        t0 = time.perf_counter()
        for _ in range(iters // 10):
            if stamps is not None:
                stamps.call(graph.replay)
            else:
                graph.replay()
        torch.cuda.synchronize()
        graphed = (time.perf_counter() - t0) / iters * 1e6
        if stamps is not None:
            stamps.report(dev.index, f"{nbytes >> 10} KB graph (10 a replay)")
        if os.environ.get("TORCH_CHECK_REPLAYS"):  # each replay alone: an outlier shows in the max
            each = []
            for _ in range(iters // 10):
                t1 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                each.append((time.perf_counter() - t1) / 10 * 1e6)
            each.sort()
            print(f"  rank {dev.index} {nbytes >> 10} KB graph replays: min {each[0]:.1f} median "
                  f"{each[len(each) // 2]:.1f} max {each[-1]:.1f} us per all_reduce", flush=True)
        res[nbytes] = (eager, graphed)
    return res


def worker(rank, world, port, out, q):
    if os.environ.get("TORCH_CHECK_DUMP_S"):  # every thread's stack after that many seconds: where a hang is
        faulthandler.dump_traceback_later(int(os.environ["TORCH_CHECK_DUMP_S"]), exit=False)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    ck = Checker(rank)
    err = None
    t0 = time.time()

    def say(what):  # rank 0's progress: where a run that times out stopped
        if rank == 0:
            print(f"  [{time.time() - t0:6.1f} s] {what}", flush=True)
    try:
        say("process group up")
        if os.environ.get("TORCH_CHECK_ONLY_TIMINGS"):  # a quick performance loop: no checks, no DDP
            t = timings(dev)
            q.put((rank, 0, [], None, [0.0], t))
            dist.destroy_process_group()
            return
        collectives(ck, rank, world, None, list(range(world)), dev, "world")
        say("world collectives done")
        even = [r for r in range(world) if r % 2 == 0]
        odd = [r for r in range(world) if r % 2 == 1]
        ge = dist.new_group(even)
        go = dist.new_group(odd) if odd else None
        if rank in even:
            collectives(ck, rank, world, ge, even, dev, "even")
        elif go is not None:
            collectives(ck, rank, world, go, odd, dev, "odd")
        dist.barrier(device_ids=[dev.index])
        say("sub-group collectives done")
        losses = ddp_losses(rank, world, dev)
        say("DDP done")
        t = timings(dev)
        say("timings done")
    except Exception as e:  # reported, never hidden (and at once: the other ranks may now wait forever)
        err = f"rank {rank}: {type(e).__name__}: {e}"
        print("  FAIL", err, flush=True)
        losses, t = [], {}
    q.put((rank, ck.count, ck.fails, err, losses, t))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=min(4, torch.cuda.device_count()))
    ap.add_argument("--out", default="torch_check.json")
    ap.add_argument("--port", type=int, default=29611)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.nproc, a.port, a.out, q)) for r in range(a.nproc)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.time() + 600
    while len(results) < a.nproc and time.time() < deadline:
        try:
            r = q.get(timeout=5)
            results[r[0]] = r
        except Exception:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    checks = sum(r[1] for r in results.values())
    fails = [f for r in results.values() for f in r[2]] + [r[3] for r in results.values() if r[3]]
    if len(results) < a.nproc:
        fails.append(f"only {len(results)} of {a.nproc} ranks reported")
    r0 = results.get(0, (0, 0, [], None, [], {}))
    json.dump({"nproc": a.nproc, "checks": checks, "fails": fails, "losses": r0[4],
               "timings_us": {str(k): v for k, v in r0[5].items()}}, open(a.out, "w"))
    lib = [l for l in open("/proc/self/maps").read().split("\n") if "libnccl" in l]
    print(f"torch_check: {a.nproc} ranks, {checks} checks, {len(fails)} failed")
    for f in fails[:20]:
        print("  FAIL", f)
    for k, (e, g) in sorted(r0[5].items()):
        print(f"  bf16 all_reduce {k >> 10:6d} KB: eager {e:8.1f} us  graph {g:8.1f} us")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
