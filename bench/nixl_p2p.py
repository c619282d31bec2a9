#!/usr/bin/env python3
"""NIXL (pip: nixl) with its UCX backend over TCP (UCX_TLS=tcp), host
memory: one-sided writes of each size from a client agent to a server
agent over loopback, GB/s per size; the peer-engine row of
bench/peer_engines.sh, next to anyccl-p2p-bench in the same run.

  nixl_p2p.py server DIR            registers 64 MB, publishes its metadata in DIR, waits
  nixl_p2p.py client DIR SIZES...   writes each size ITERS times (env ITERS, default 20)
"""
import os, sys, time
import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

MAX = 64 << 20


def wait_file(p):
    while not os.path.exists(p):
        time.sleep(0.05)
    return open(p, "rb").read()


def publish(p, data):
    open(p + ".tmp", "wb").write(data)
    os.rename(p + ".tmp", p)


def main():
    role, d = sys.argv[1], sys.argv[2]
    agent = nixl_agent(role, nixl_agent_config(backends=["UCX"]))
    buf = np.ones(MAX, dtype=np.uint8)
    addr = buf.ctypes.data
    if not agent.register_memory([(addr, MAX, 0, "")], "DRAM"):
        sys.exit("nixl: register_memory failed")
    publish(os.path.join(d, role + ".meta"), agent.get_agent_metadata())
    if role == "server":
        publish(os.path.join(d, "server.addr"), str(addr).encode())
        agent.add_remote_agent(wait_file(os.path.join(d, "client.meta")))
        wait_file(os.path.join(d, "done"))
        return
    peer = agent.add_remote_agent(wait_file(os.path.join(d, "server.meta")))
    raddr = int(wait_file(os.path.join(d, "server.addr")))
    iters = int(os.environ.get("ITERS", "20"))
    for s in [int(x) for x in sys.argv[3:]]:
        local = agent.get_xfer_descs([(addr, s, 0)], "DRAM")
        remote = agent.get_xfer_descs([(raddr, s, 0)], "DRAM")
        h = agent.initialize_xfer("WRITE", local, remote, peer, b"")

        def once():
            st = agent.transfer(h)
            while st != "DONE":
                if st == "ERR":
                    sys.exit("nixl: transfer failed")
                st = agent.check_xfer_state(h)

        once()  # warm-up, connects
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        dt = time.perf_counter() - t0
        print("%12d %10.3f %10.1f" % (s, s * iters / dt / 1e9, dt / iters * 1e6), flush=True)
        agent.release_xfer_handle(h)
    publish(os.path.join(d, "done"), b"1")

if __name__ == "__main__":
    main()
