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

# port: 0 = triggers, 1 = network messages, 2 = encode/decode round trip.
# Service: nMems - 1, per memory (flags: bits 0-1 kind, bit 2 big; size/17), nChans, (sem, dst, src) each,
# nSems, peer+1 each.
PUT, SIGNAL, FLUSH, CUSTOM = 1, 2, 4, 8
def trig(typ, chan, dst, src, n):
    w0 = (src & ((1 << 37) - 1)) | ((n & ((1 << 27) - 1)) << 37)
    w1 = (dst & ((1 << 37) - 1)) | ((n >> 27) << 37) | ((typ & 0xf) << 43) | ((chan & 0xffff) << 47)
    return struct.pack("<QQ", w0 & (2**64 - 1), w1 & (2**64 - 1))
svc = bytes([2, 0, 4, 0, 8, 4, 0]) + bytes([2, 0, 0, 1, 1, 2, 0]) + bytes([2, 2, 0])
write("port", "triggers", b"\0" + svc + trig(PUT, 0, 0, 0, 68) + trig(PUT | SIGNAL, 1, 10, 0, 58) +
      trig(SIGNAL, 1, 0, 0, 0) + trig(FLUSH, 0, 0, 0, 0) + trig(CUSTOM, 7, 1, 2, 3))
write("port", "triggers-bad", b"\0" + svc + trig(PUT, 0, 1, 0, 68) + trig(PUT, 0, 0, 1, 68) + trig(PUT, 2, 0, 0, 1) +
      trig(0, 0, 0, 0, 0) + trig(PUT, 0, (1 << 37) - 1, 0, 1 << 32) + trig(PUT, 1, 0, 0, (1 << 33) - 1))
big = bytes([1, 4, 0, 4, 0]) + bytes([1, 0, 0, 1]) + bytes([0])
write("port", "triggers-big", b"\0" + big + trig(PUT, 0, (1 << 37) - 1, 0, 1 << 32) + trig(PUT, 0, 0, 0, 1 << 32) +
      trig(PUT, 0, (1 << 37) - 4096, (1 << 37) - 4096, 4096))
portmsg = lambda typ, i, off, size: bytes([0]) + struct.pack("<IIQQQ", typ, i, off, size, 0)
svc2 = bytes([2, 0, 4, 1, 4, 4, 0]) + bytes([0]) + bytes([3, 2, 1, 2])
write("port", "messages", b"\1" + svc2 + b"\1" + portmsg(PUT, 0, 0, 68) + portmsg(PUT, 0, 60, 8) +
      portmsg(SIGNAL, 0, 0, 0) + portmsg(SIGNAL, 1, 0, 0) + portmsg(PUT, 2, 0, 16) + portmsg(PUT, 1, 0, 1))
write("port", "messages-bad", b"\1" + svc2 + b"\1" + portmsg(PUT, 0, 60, 9) + portmsg(PUT, 0, 2**64 - 1, 2) +
      portmsg(SIGNAL, 2, 0, 0) + portmsg(PUT, 3, 0, 1 << 33) + portmsg(9, 0, 0, 0))
write("port", "messages-short", b"\1" + svc2 + b"\1" + bytes([210]) + portmsg(SIGNAL, 0, 0, 0)[1:])
write("port", "roundtrip", b"\2" + b"\0" + struct.pack("<QQQQ", 65535, (1 << 37) - 1, 12345, 1 << 32))

# p2p: 0 = handle, 1 = hellos, 2 = chunk headers, 3 = a connection (flags: bit 0 two channels,
# bits 1-2 receives, bit 3 a write, bit 4 a read; then per receive tag, room/33; read room/33;
# then records [channel][header][payload]; header keys 0 and 1 are the endpoint's regions).
P2P_HANDLE_MAGIC, P2P_MAGIC, P2P_COOKIE = 0x616e79703270683a, 0x61703270, 0x636f6f6b69653270
MSG, WRITE, READREQ, READRESP, ACK, BYE = 1, 2, 3, 4, 5, 6
def p2ph(op, tag=0, id=0, key=0, off=0, ln=0, total=None, notify=0, flags=0, magic=P2P_MAGIC):
    return struct.pack("<IHHiIQQQQQQ", magic, op, flags, tag, 0, id, key, off, ln, ln if total is None else total, notify)
def rec(ch, hdr, payload=b""):
    return bytes([ch]) + hdr + payload
wh = struct.pack("<QQii", P2P_HANDLE_MAGIC, 7, 1, 0) + v4("127.0.0.1", 40123) + b"\0" * 28 * 3
write("p2p", "handle", b"\0" + wh.ljust(256, b"\0"))
write("p2p", "handle-v6-4", b"\0" + (struct.pack("<QQii", P2P_HANDLE_MAGIC, 7, 4, 0) + v6("::1", 1) * 4).ljust(256, b"\0"))
write("p2p", "handle-noport", b"\0" + (struct.pack("<QQii", P2P_HANDLE_MAGIC, 7, 2, 0) + v4("10.0.0.1", 5) + v4("10.0.0.2", 0)).ljust(256, b"\0"))
p2phello = lambda i, n, chunk=1 << 19, win=16, cookie=P2P_COOKIE: b"\0" + struct.pack("<QQQiiQii", P2P_HANDLE_MAGIC, cookie, 5, i, n, chunk, win, 0)
write("p2p", "hellos", b"\1" + p2phello(0, 2) + p2phello(1, 2) + p2phello(2, 2) + p2phello(0, 64, 4096, 1024) +
      p2phello(0, 1, 4095) + p2phello(0, 1, 1 << 30, 1025) + p2phello(0, 1, cookie=1) + b"\xff" + p2phello(0, 1)[1:])
write("p2p", "headers", b"\2\0" + p2ph(MSG, ln=4096) + p2ph(MSG, ln=4097) + p2ph(READREQ, total=1 << 40) +
      p2ph(BYE) + p2ph(7) + p2ph(MSG, ln=10, total=5) + p2ph(ACK, magic=0))
write("p2p", "conn-msg", b"\3" + bytes([2, 0, 4]) + rec(0, p2ph(MSG, ln=100), b"m" * 100) + rec(0, p2ph(BYE)))
write("p2p", "conn-msg-long", b"\3" + bytes([2, 0, 1]) + rec(0, p2ph(MSG, ln=100), b"m" * 100))
write("p2p", "conn-unexpected", b"\3" + bytes([0]) + rec(0, p2ph(MSG, tag=2, ln=10), b"u" * 10) +
      rec(0, p2ph(MSG, tag=2, id=1, ln=3000, total=4000), b"v" * 3000) + rec(0, p2ph(BYE)))
write("p2p", "conn-2ch", b"\3" + bytes([3, 1, 6]) + rec(0, p2ph(MSG, tag=1, off=0, ln=100, total=198), b"a" * 100) +
      rec(1, p2ph(MSG, tag=1, off=100, ln=98, total=198), b"b" * 98) + rec(0, p2ph(BYE)) + rec(1, p2ph(BYE)))
write("p2p", "conn-write", b"\3" + bytes([8]) + rec(0, p2ph(WRITE, id=9, key=0, off=10, ln=50, notify=3), b"w" * 50) +
      rec(0, p2ph(WRITE, id=10, key=1, off=4000, ln=200, notify=4), b"x" * 200) + rec(0, p2ph(ACK, id=1)) + rec(0, p2ph(BYE)))
write("p2p", "conn-read", b"\3" + bytes([16, 2]) + rec(0, p2ph(READRESP, id=1, off=0, ln=66), b"r" * 66) +
      rec(0, p2ph(READREQ, id=4, key=1, off=0, total=100)) + rec(0, p2ph(READREQ, id=5, key=0, off=8000, total=400)))
write("p2p", "conn-refused", b"\3" + bytes([24, 2]) + rec(0, p2ph(ACK, id=1, flags=1)) + rec(0, p2ph(ACK, id=2, flags=1)))
# a read's response arrives in two pieces on channel 0; between them channel 1 refuses the read (ACK, flag 1)
# and the harness frees the finished read: the rest must not land in its buffer
write("p2p", "conn-overlap", b"\3" + bytes([17, 2]) + rec(0x20, p2ph(READRESP, id=1, off=0, ln=66)) +
      bytes([0x80, 10]) + b"r" * 10 + rec(0x41, p2ph(ACK, id=1, flags=1)) + bytes([0x80, 56]) + b"s" * 56)
# the same for a receive: channel 1 brings a chunk that covers the whole message while channel 0 is halfway
write("p2p", "conn-overlap-msg", b"\3" + bytes([3, 0, 4]) + rec(0x20, p2ph(MSG, off=0, ln=100, total=100)) +
      bytes([0x80, 40]) + b"a" * 40 + rec(0x41, p2ph(MSG, off=0, ln=100, total=100), b"b" * 100) +
      bytes([0x80, 60]) + b"c" * 60)
write("p2p", "conn-bad", b"\3" + bytes([2, 0, 4]) + rec(0, p2ph(MSG, ln=10, magic=0x12345678), b"z" * 10))

# fabric: mode (bit 0: calibration file), then for a fabric nranks - 1 (two bytes, little end), then the text
topos = os.path.join(here, "..", "topologies")
for name in sorted(os.listdir(topos)):
    if name.endswith(".fabric") or name.endswith(".calib"):
        with open(os.path.join(topos, name), "rb") as f:
            text = f.read()
        n = 31 if "4x8" in name else 7
        write("fabric", name.replace(".", "-"), (b"\1" if name.endswith(".calib") else b"\0" + struct.pack("<H", n)) + text)
write("fabric", "fattree-degrade", b"\0\x0f\0" + b"hosts 4\ngpus_per_host 4\nnics_per_host 2\nfabric fat-tree\nhosts_per_leaf 2\n"
      b"oversubscription 2:1\ndegrade host1/nic1/in=10\ndegrade leaf1/up-to-spine=5 # slow\ndegrade host3/gpu3/pcie-from-nic=1\n")
write("fabric", "bad-lines", b"\0\7\0" + b"hosts = 2\nnic_gbps=400\n\n# c\nfabric torus\n")
write("fabric", "bad-int", b"\0\7\0" + b"hosts 2.5\n")
write("fabric", "int-over", b"\0\7\0" + b"gpus_per_host 8\nhosts 3000000000\n")
write("fabric", "big", b"\0\xff\x3f" + b"hosts 16777216\ngpus_per_host 16777216\n")
write("fabric", "nul", b"\0\7\0" + b"hosts 1\0\ngpus_per_host 8\n")
write("fabric", "calib-bad", b"\1" + b"ll_efficiency 1.5\nlaunch_us 4\n")

# netplugin: devices, flags (bit 0 name NULL, bit 1 pciPath NULL, bit 2 no size), name\0, pciPath\0,
# guid, speed, port, latency (float), maxComms, then (done, size) pairs
import math
def props(n, flags, name, pci, speed, port, lat, maxc):
    return struct.pack("<iB", n, flags) + name + b"\0" + pci + b"\0" + struct.pack("<Qiifi", 0x1234, speed, port, lat, maxc)
write("netplugin", "ib", props(2, 0, b"mlx5_0", b"/sys/devices/pci0000:00/0000:00:01.0", 200000, 1, 2.5, 65536) +
      struct.pack("<iiiiii", 0, 0, 1, 4096, 7, 100))
write("netplugin", "nulls", props(0, 3, b"", b"", 0, 0, 0.0, 1) + struct.pack("<ii", 1, 0))
write("netplugin", "bad", props(-1, 4, b"x" * 100, b"y" * 200, -5, -1, float("nan"), 0) + struct.pack("<ii", 1, -1))
write("netplugin", "latency-inf", props(5000, 0, b"eth", b"", 100, 0, float("inf"), 1))
write("netplugin", "latency-big", props(1, 0, b"eth", b"", 100, 0, 3e9, 1))
# port 3: memory descriptions (struct memWire: id, owner, size, ptr, off, ipcOk, pad, 64-byte IPC handle)
mw = lambda i, owner, size, off=0: b"\0" + struct.pack("<iiQQQii", i, owner, size, 0x7f0000001000, off, 1, 0) + b"\0" * 64
write("port", "memwires", b"\3\2" + mw(0, 2, 4096) + mw(3, 2, (1 << 37) - 1, (1 << 37) - 1) + mw(1, 1, 10) +
      mw(-1, 2, 10) + mw(2, 2, 0) + mw(2, 2, 1 << 37) + mw(2, 2, 5, 1 << 37) + bytes([255]) + mw(0, 2, 1)[1:])
