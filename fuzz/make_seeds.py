#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/seed-* (valid and
near-valid examples of each input, in the layouts of src/include/wire.h,
x86-64). Regression inputs (crash-*, found by fuzzing) are added by hand and
are not touched here. Run from the repository root: python3 fuzz/make_seeds.py"""
import os, socket, struct

BS_MAGIC = 0x3130646c63796e61   # fuzz_bootstrap.c FUZZ_BS_MAGIC
NET_MAGIC = 0x616e796e65744e31  # wire.h
NET_COOKIE = 0x6b6f6f6365697a7a # fuzz_net.c FUZZ_NET_COOKIE
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def v4(ip, port):
    return (struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_pton(socket.AF_INET, ip)).ljust(28, b"\0")

def v6(ip, port, scope=0):
    return struct.pack("<H", socket.AF_INET6) + struct.pack(">H", port) + b"\0" * 4 + socket.inet_pton(socket.AF_INET6, ip) + struct.pack("<I", scope)

def hdr(rank, kind, tag, size, magic=BS_MAGIC):
    return struct.pack("<Qiiii", magic, rank, kind, tag, size)

def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)

# bootstrap: mode, nranks-1, then bytes
HELLO, P2P, AG, BAR = 1, 2, 3, 4
write("bootstrap", "root-hello-v4", bytes([0, 3]) + hdr(2, HELLO, 4, 28) + v4("10.0.0.2", 40000))
write("bootstrap", "root-hello-v6", bytes([0, 1]) + hdr(0, HELLO, 2, 28) + v6("fd00::2", 40001))
write("bootstrap", "root-hello-badaddr", bytes([0, 1]) + hdr(1, HELLO, 2, 28) + b"\x07" * 28)
write("bootstrap", "root-wrong-magic", bytes([0, 1]) + hdr(0, HELLO, 2, 28, magic=1) + v4("10.0.0.1", 1))
write("bootstrap", "rank-stream", bytes([1, 3]) + hdr(1, AG, 0, 28) + v4("10.0.0.3", 40002) +
      hdr(1, P2P, 77, 5) + b"hello" + hdr(1, BAR, 9, 1) + b"\1" + hdr(1, P2P, 78, 0))
write("bootstrap", "rank-other-rank", bytes([1, 3]) + hdr(1, P2P, 0, 1) + b"x" + hdr(2, P2P, 0, 1) + b"y")
write("bootstrap", "rank-big", bytes([1, 7]) + hdr(5, P2P, 3, 1 << 30))
write("bootstrap", "rank-partial", bytes([1, 1]) + hdr(0, AG, 1, 28) + b"\x02\x00")
reply = struct.pack("<Qii", BS_MAGIC, 0, 4) + v4("10.0.0.9", 40009) + b"\0" * 200
write("bootstrap", "reply-ok", bytes([2, 3]) + reply.ljust(248, b"\0"))
refuse = struct.pack("<Qii", BS_MAGIC, 5, 4) + b"\0" * 28 + b"rank 1 joined twice".ljust(200, b"\0")
write("bootstrap", "reply-refused", bytes([2, 3]) + refuse.ljust(248, b"\0"))
write("bootstrap", "reply-unterminated", bytes([2, 3]) + (struct.pack("<Qii", BS_MAGIC, 3, 4) + b"\0" * 28 + b"A" * 200).ljust(248, b"B"))
write("bootstrap", "allgather", bytes([3, 3]) + v4("10.0.0.1", 1) + v6("::1", 2) + v4("127.0.0.1", 0) + b"\xff" * 28)

# bootstrap 4: rank info (struct anycclPeerInfo, 248 bytes on x86-64): rank, cudaDev, pid, pad,
# hostHash, processToken, busId[32], hostId[64], maxChannels, nslots, slotBytes, segFd, pad, segSize,
# segLocal, devSeg, devSegSize, devIpc[64]
def peer(rank, bus, nslots=8, buff=1 << 20):
    b = struct.pack("<iiiiQQ", rank, rank, 1000 + rank, 0, 0x1234, 0x99) + bus.ljust(32, b"\0") + b"".ljust(64, b"\0")
    b += struct.pack("<iiQiiQQQQ", 2, nslots, buff, 3, 0, 1 << 24, 0, 0, 0) + b"\0" * 64
    return b
write("bootstrap", "rankinfo", bytes([4, 1]) + peer(0, b"0000:17:00.0") + peer(1, b"0000:18:00.0"))
write("bootstrap", "rankinfo-huge-buff", bytes([4, 0]) + peer(0, b"0000:17:00.0", 64, (1 << 64) - 1))
write("bootstrap", "rankinfo-unterminated", bytes([4, 0]) + peer(0, b"X" * 32))

# uniqueid: 0 = id bytes, 1 = NCCL_COMM_ID text
write("uniqueid", "id-v4", b"\0" + (struct.pack("<Q", 0x1234) + v4("192.168.1.5", 29500)).ljust(128, b"\0"))
write("uniqueid", "id-v6", b"\0" + (struct.pack("<Q", 0x1234) + v6("fe80::1", 29501, 2)).ljust(128, b"\0"))
write("uniqueid", "id-zero", b"\0" + b"\0" * 128)
for i, s in enumerate(["127.0.0.1:29500", "[::1]:29500", "[fd00::5]:1", "10.1.2.3:65535", "10.1.2.3:65536",
                       "1.2.3.4:0", "::1:80", "[::1]80", "localhost:29500", "0x7f.1:22", ":80", "a:", "[]:1"]):
    write("uniqueid", "commid-%d" % i, b"\1" + s.encode())

# net: 0 = handle, 1 = hellos, 2 = message headers
handle = struct.pack("<QQ", NET_MAGIC, 99) + v4("10.0.0.7", 45000) + struct.pack("<i", 2)
write("net", "handle", b"\0" + handle.ljust(128, b"\0"))
write("net", "handle-v6", b"\0" + (struct.pack("<QQ", NET_MAGIC, 99) + v6("fd00::7", 45001) + struct.pack("<i", 64)).ljust(128, b"\0"))
write("net", "handle-bad-nsocks", b"\0" + (struct.pack("<QQ", NET_MAGIC, 99) + v4("10.0.0.7", 45000) + struct.pack("<i", 65)).ljust(128, b"\0"))
hello = lambda i, n, cookie=NET_COOKIE: struct.pack("<QQii", NET_MAGIC, cookie, i, n)
write("net", "hellos", b"\1\2" + hello(0, 3) + hello(2, 3) + hello(2, 3) + hello(1, 3) + hello(3, 3))
write("net", "hellos-bad", b"\1\1" + hello(0, 2, 5) + hello(-1, 2) + hello(3, 2) + hello(0, 3))
msg = lambda size, tag: struct.pack("<Qii", size, tag, 0)
write("net", "headers", b"\2" + struct.pack("<I", 65536) + msg(100, 0) + msg(65536, 1) + msg(0, 2) + msg(0, -0x4259))
write("net", "header-too-big", b"\2" + struct.pack("<I", 4096) + msg(4097, 0))

# topo: flags, NCCL_HOSTID, NUL, XML
here = os.path.dirname(os.path.abspath(__file__))
for name, flags, host in [("detected_h200x2.xml", 0, b""), ("nccl_dump_vm.xml", 2, b"3"), ("nccl_dump_dgxh100.xml", 6, b"")]:
    with open(os.path.join(here, "..", "tests", "topo", "data", name), "rb") as f:
        write("topo", name.replace(".xml", ""), bytes([flags]) + host + b"\0" + f.read())
cluster = b"""<cluster>
  <system version="1" hostid="a">
    <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143" affinity="ff">
      <pci busid="0000:17:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
        <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" link_speed="16.0 GT/s PCIe" link_width="16">
          <gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:19:00.0" count="12" tclass="0x030200"/></gpu>
        </pci>
        <pci busid="0000:19:00.0" class="0x030200" vendor="0x10de" link_speed="16.0 GT/s PCIe" link_width="16">
          <gpu dev="1" sm="80" rank="1" gdr="1"><nvlink target="0000:18:00.0" count="12" tclass="0x030200"/></gpu>
        </pci>
        <pci busid="0000:1a:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
          <nic><net name="ib0" dev="0" speed="200000" port="1" latency="0" guid="0x1" maxconn="65536" gdr="1"/></nic>
        </pci>
      </pci>
    </cpu>
  </system>
  <system version="1" hostid="b">
    <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1" affinity="ff">
      <pci busid="0000:21:00.0" class="0x030200" link_speed="" link_width="">
        <gpu dev="0" sm="90" rank="0" gdr="0"><c2c bw="40" count="2"/></gpu>
      </pci>
      <nic><net name="eth0" dev="0" speed="10000" port="0" latency="0" guid="0x2" maxconn="65536" gdr="0"/></nic>
    </cpu>
  </system>
</cluster>
"""
write("topo", "cluster", b"\2b\0" + cluster)
write("topo", "cluster-host1", b"\1" + b"1\0" + cluster)
write("topo", "bad-element", b"\0\0<system version=\"1\"><cpu numaid=\"0\"><gpux/></cpu></system>")
write("topo", "bad-syntax", b"\0\0<system version=\"1\"><cpu numaid=\"0\"></system>")

# params: 0 = integer, 1 = NCCL_SOCKET_IFNAME, 2 = NCCL_DEBUG_SUBSYS, 3 = NCCL_DEBUG_FILE
for i, s in enumerate([b"1048576", b"-1", b"0x10", b"010", b"12 ", b"9223372036854775808", b"1e3", b" 7", b""]):
    write("params", "int-%d" % i, b"\0" + s)
for i, (n, s) in enumerate([(b"eth0", b"eth,ib"), (b"ib0", b"^docker,lo"), (b"eth0", b"=eth0"), (b"eth01", b"^=eth0"), (b"lo", b",,")]):
    write("params", "ifname-%d" % i, b"\1" + n + b"\0" + s)
for i, s in enumerate([b"INIT,NET", b"^COLL", b"ALL", b"init,,bogus"]):
    write("params", "subsys-%d" % i, b"\2" + s)
write("params", "debugfile", b"\3" + b"node-7.cluster\0" + b"/tmp/nccl.%h.%p.log")
write("params", "fifo", b"\4" + b"8\0" + b"4194304")
write("params", "fifo-negative", b"\4" + b"-3\0" + b"-1")
write("params", "fifo-huge", b"\4" + b"0x100000010\0" + b"0x7fffffffffffffff")
write("params", "debugfile-pct", b"\3" + b"h\0" + b"%%h%p%")
