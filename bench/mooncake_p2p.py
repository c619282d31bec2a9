#!/usr/bin/env python3
"""Mooncake transfer engine (pip: mooncake-transfer-engine-non-cuda), TCP
protocol, host memory: one-sided writes of each size from a client to a
server over loopback, GB/s per size; the peer-engine row of
bench/peer_engines.sh, next to anyccl-p2p-bench in the same run.

  mooncake_p2p.py server PORTFILE            registers a buffer, writes "host:port addr" to PORTFILE, waits
  mooncake_p2p.py client PORTFILE SIZES...   writes each size ITERS times (env ITERS, default 20)
"""
import ctypes, os, sys, time
from mooncake.engine import TransferEngine

MAX = 64 << 20


def engine():
    e = TransferEngine()
    if e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        sys.exit("mooncake: initialize failed")
    buf = ctypes.create_string_buffer(MAX)
    addr = ctypes.addressof(buf)
    if e.register_memory(addr, MAX) != 0:
        sys.exit("mooncake: register_memory failed")
    return e, buf, addr


def main():
    role, pf = sys.argv[1], sys.argv[2]
    e, buf, addr = engine()
    if role == "server":
        with open(pf + ".tmp", "w") as f:
            f.write("127.0.0.1:%d %d\n" % (e.get_rpc_port(), addr))
        os.rename(pf + ".tmp", pf)
        while not os.path.exists(pf + ".done"):
            time.sleep(0.1)
        return
    while not os.path.exists(pf):
        time.sleep(0.05)
    peer, raddr = open(pf).read().split()
    iters = int(os.environ.get("ITERS", "20"))
    for s in [int(x) for x in sys.argv[3:]]:
        if e.transfer_sync_write(peer, addr, int(raddr), s) != 0:  # warm-up, connects
            sys.exit("mooncake: transfer_sync_write failed")
        t0 = time.perf_counter()
        for _ in range(iters):
            e.transfer_sync_write(peer, addr, int(raddr), s)
        dt = time.perf_counter() - t0
        print("%12d %10.3f %10.1f" % (s, s * iters / dt / 1e9, dt / iters * 1e6), flush=True)
    open(pf + ".done", "w").close()


if __name__ == "__main__":
    main()
