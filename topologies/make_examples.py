#!/usr/bin/env python3
"""Regenerates the example topologies in this directory (NCCL's XML format,
attributes in the order and format NCCL dumps them).

  dgx8_nvswitch.xml         DGX A100-like: 2 AMD sockets, 4 PCIe switches with
                            2 GPUs and 2 HDR NICs each, 8 GPUs on 6 NVSwitches
  a3high.xml                A3-high-like: 2 Sapphire Rapids sockets, 4 PCIe
                            switches with 2 H100 and 1 NIC each (2 GPUs per NIC),
                            NVSwitch hidden by the VM (NCCL's placeholder target)
  2node_16gpu.xml           two DGX-like hosts in one file (<cluster>), and
  2node_16gpu_node0.xml     the same hosts one per file (NCCL_HOSTID=H picks
  2node_16gpu_node1.xml     2node_16gpu_node<H>.xml)
  4node_32gpu.xml           four A3-high-like hosts in one file (<cluster>)

Host H's bus ids are in PCI domain H (0000:, 0001:, ...), as anyccl-cpu makes
them, so that they are unique across virtual hosts; host_hash is the hash
anyccl derives from NCCL_HOSTID=H.

Usage: python3 topologies/make_examples.py [OUTDIR]
"""
import os
import sys


def host_hash(host_id):
    """FNV-1a 64 of "hostid:" + id, as anycclTopoHostHash()."""
    h = 0xCBF29CE484222325
    for ch in ("hostid:" + host_id).encode():
        h = ((h ^ ch) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "0x%x" % h


def cpumask(cpus, ncpus):
    """Linux cpumap format: 32-bit hex groups, most significant first."""
    bits = 0
    for c in cpus:
        bits |= 1 << c
    groups = (ncpus + 31) // 32
    return ",".join("%08x" % ((bits >> (32 * g)) & 0xFFFFFFFF) for g in reversed(range(groups)))


class Node:
    def __init__(self, tag, **attrs):
        self.name = tag
        self.attrs = list(attrs.items())
        self.subs = []

    def add(self, node):
        self.subs.append(node)
        return node

    def write(self, out, indent=0):
        attrs = "".join(' %s="%s"' % (k, v) for k, v in self.attrs)
        pad = " " * indent
        if not self.subs:
            out.append("%s<%s%s/>" % (pad, self.name, attrs))
            return
        out.append("%s<%s%s>" % (pad, self.name, attrs))
        for s in self.subs:
            s.write(out, indent + 2)
        out.append("%s</%s>" % (pad, self.name))


def pci(dom, bus, cls, vendor, device, svendor, sdevice, speed, width):
    return Node("pci", busid="%04x:%02x:00.0" % (dom, bus), **{"class": cls}, vendor=vendor, device=device,
                subsystem_vendor=svendor, subsystem_device=sdevice, link_speed=speed, link_width=str(width))


def net(name, dev, speed, guid, gdr=1):
    nic = Node("nic")
    nic.add(Node("net", name=name, dev=str(dev), speed=str(speed), port="1", latency="0.000000", guid=guid,
                 maxconn="131072", gdr=str(gdr)))
    return nic


def dgx_a100(host, hid, name_attr=None):
    """8 x A100-SXM4 on 6 NVSwitches (2 links each), 4 Broadcom PCIe switches,
    2 AMD EPYC 7742 sockets, 8 ConnectX-6 HDR NICs (2 per switch)."""
    attrs = {"version": "1"}
    if name_attr is not None:
        attrs["hostid"] = name_attr
    system = Node("system", **attrs)
    ncpu = 256
    gen4 = "16.0 GT/s PCIe"
    layout = [  # numa, switch bus, [(gpu bus, dev)], [(nic bus, dev)]
        (0, 0x02, [(0x07, 0), (0x0F, 1)], [(0x0C, 0), (0x12, 1)]),
        (0, 0x45, [(0x47, 2), (0x4E, 3)], [(0x4B, 2), (0x54, 3)]),
        (1, 0x85, [(0x87, 4), (0x90, 5)], [(0x8D, 4), (0x94, 5)]),
        (1, 0xB5, [(0xB7, 6), (0xBD, 7)], [(0xBA, 6), (0xCC, 7)]),
    ]
    cpus = {}
    for numa in (0, 1):
        cores = [c for c in range(ncpu) if (c // 64) % 2 == numa]
        cpus[numa] = system.add(Node("cpu", host_hash=hid, numaid=str(numa), affinity=cpumask(cores, ncpu),
                                     arch="x86_64", vendor="AuthenticAMD", familyid="23", modelid="49"))
    for numa, sw, gpus, nics in layout:
        switch = cpus[numa].add(pci(host, sw, "0x060400", "0x1000", "0xc010", "0x1000", "0xa064", gen4, 16))
        children = []
        for bus, dev in gpus:
            p = pci(host, bus, "0x030200", "0x10de", "0x20b0", "0x10de", "0x134f", gen4, 16)
            g = p.add(Node("gpu", dev=str(dev), sm="80", rank=str(dev), gdr="1"))
            for s in range(6):
                g.add(Node("nvlink", target="%04x:%02x:00.0" % (host, 0xC4 + s), count="2", tclass="0x068000"))
            children.append((bus, p))
        for bus, dev in nics:
            p = pci(host, bus, "0x020700", "0x15b3", "0x101b", "0x15b3", "0x0006", gen4, 16)
            p.add(net("mlx5_%d" % dev, dev, 200000, "0x%04x%02x0300c0ffee" % (0x1c34 + host, dev)))
            children.append((bus, p))
        for _, p in sorted(children, key=lambda t: t[0]):  # NCCL keeps PCI children in bus order
            switch.add(p)
    return system


def a3_high(host, hid, name_attr=None):
    """8 x H100-SXM5 (NVSwitch behind the VM: NCCL's placeholder target, 18
    links), 2 Sapphire Rapids sockets (8481C), 4 PCIe Gen5 switches with 2
    GPUs and one 200 Gb/s gVNIC each."""
    attrs = {"version": "1"}
    if name_attr is not None:
        attrs["hostid"] = name_attr
    system = Node("system", **attrs)
    ncpu = 208
    gen5 = "32.0 GT/s PCIe"
    layout = [  # numa, switch bus, [(gpu bus, dev)], (nic bus, dev)
        (0, 0x03, [(0x04, 0), (0x05, 1)], (0x06, 0)),
        (0, 0x09, [(0x0A, 2), (0x0B, 3)], (0x0C, 1)),
        (1, 0x83, [(0x84, 4), (0x85, 5)], (0x86, 2)),
        (1, 0x89, [(0x8A, 6), (0x8B, 7)], (0x8C, 3)),
    ]
    cpus = {}
    for numa in (0, 1):
        cores = [c for c in range(ncpu) if (c // 52) % 2 == numa]
        cpus[numa] = system.add(Node("cpu", host_hash=hid, numaid=str(numa), affinity=cpumask(cores, ncpu),
                                     arch="x86_64", vendor="GenuineIntel", familyid="6", modelid="143"))
    for numa, sw, gpus, (nbus, ndev) in layout:
        switch = cpus[numa].add(pci(host, sw, "0x060400", "0x1000", "0xc030", "0x1000", "0x100b", gen5, 16))
        for bus, dev in gpus:
            p = switch.add(pci(host, bus, "0x030200", "0x10de", "0x2330", "0x10de", "0x16c1", gen5, 16))
            g = p.add(Node("gpu", dev=str(dev), sm="90", rank=str(dev), gdr="1"))
            g.add(Node("nvlink", target="fffffff:ffff:ff", count="18", tclass="0x068000"))
        p = switch.add(pci(host, nbus, "0x020000", "0x1ae0", "0x0042", "0x1ae0", "0x0058", gen5, 16))
        p.add(net("eth%d" % (ndev + 1), ndev, 200000, "0x%x" % ndev, gdr=1))
    return system


def write(path, root, comment):
    out = ["<!-- %s -->" % comment]
    root.write(out)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    gen = "generated by topologies/make_examples.py"
    write(os.path.join(outdir, "dgx8_nvswitch.xml"), dgx_a100(0, host_hash("dgx8"), name_attr=None),
          "DGX A100-like host: 8 GPUs on NVSwitch, 4 PCIe switches, 2 CPUs, 8 NICs (%s)" % gen)
    write(os.path.join(outdir, "a3high.xml"), a3_high(0, host_hash("a3high")),
          "A3-high-like host: 8 H100 on NVSwitch, 4 NICs, 2 GPUs per NIC (%s)" % gen)
    cluster = Node("cluster", name="2node_16gpu")
    for h in range(2):
        system = dgx_a100(h, host_hash(str(h)), name_attr=None)
        write(os.path.join(outdir, "2node_16gpu_node%d.xml" % h), system,
              "host %d of 2node_16gpu: DGX A100-like, bus ids in PCI domain %04x (%s)" % (h, h, gen))
        cluster.add(system)
    write(os.path.join(outdir, "2node_16gpu.xml"), cluster,
          "2 DGX A100-like hosts, one <system> per host; the same hosts one per file: 2node_16gpu_node<H>.xml (%s)" % gen)
    cluster = Node("cluster", name="4node_32gpu")
    for h in range(4):
        cluster.add(a3_high(h, host_hash(str(h)), name_attr=str(h)))
    write(os.path.join(outdir, "4node_32gpu.xml"), cluster,
          "4 A3-high-like hosts in one file, one <system> per host (%s)" % gen)


if __name__ == "__main__":
    main()
