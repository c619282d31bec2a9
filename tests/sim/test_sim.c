/* The sim backend (docs/simulation.md): the flow engine and the fabric
 * against times computed by hand, then whole collectives through the NCCL
 * API on the sim backend (ctest sets ANYCCL_BACKEND=sim). One case per run:
 *   flows_one flows_share spine bad_fabric ring_slow p2p_cuts net_chain chain_fill symm_ll symm_a2a symm_p2p
 *   idle_launch conservation reserve flowfile PATH
 *   trace PATH timeline PATH rails */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cuda_runtime.h"
#include "nccl.h"
#include "comm.h"
#include "plan.h"
#include "sim/sim.h"
#include "topo.h"
#include "trace.h"

#include "sim_check.h"
static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

/* One flow on one link: bytes / bandwidth; a route's latency is its links'. */
static void flowsOne(void) {
  double bps[1] = {100e9};
  struct simFlow f = {.bytes = 1e6, .cap = 0, .nlinks = 1, .links = {0}};
  CHECK(simFlowsRun(&f, 1, bps, 1) == ncclSuccess, "run");
  CHECK(near(f.end, 1e6 / 100e9), "one flow: end %g, want %g", f.end, 1e6 / 100e9);
  f.cap = 40e9; /* a lane's cap below the link */
  simFlowsRun(&f, 1, bps, 1);
  CHECK(near(f.end, 1e6 / 40e9), "capped flow: end %g, want %g", f.end, 1e6 / 40e9);
  struct simFabric fab;
  char err[512];
  CHECK(simFabricLoad(NULL, 16, &fab, err, sizeof(err)) == ncclSuccess, "default fabric: %s", err);
  int links[8];
  double lat;
  int n = simRoute(&fab, 0, 1, links, &lat);
  CHECK(n == 2 && near(lat, fab.calib.nvlinkLatUs * 1e-6), "same host: %d links, latency %g", n, lat);
  n = simRoute(&fab, 0, 8, links, &lat); /* next host, same rail, same leaf */
  CHECK(n == 4 && near(lat, 2 * fab.hopLatUs * 1e-6), "next host: %d links, latency %g", n, lat);
  simFabricFree(&fab);
}

/* Two flows on one link get half each; when one ends the other gets all. */
static void flowsShare(void) {
  double bps[2] = {100e9, 100e9};
  struct simFlow f[2] = {{.bytes = 1e6, .nlinks = 1, .links = {0}}, {.bytes = 1e6, .nlinks = 1, .links = {0}}};
  simFlowsRun(f, 2, bps, 2);
  CHECK(near(f[0].end, 2e6 / 100e9) && near(f[1].end, 2e6 / 100e9), "equal flows end at %g %g, want %g", f[0].end,
        f[1].end, 2e6 / 100e9);
  f[1].bytes = 2e6; /* shares until 2e6 bytes went (1e6 each), then alone */
  simFlowsRun(f, 2, bps, 2);
  CHECK(near(f[0].end, 2e-5) && near(f[1].end, 3e-5), "unequal flows end at %g %g, want 2e-5 3e-5", f[0].end,
        f[1].end);
  /* max-min: a flow capped at 20 leaves 80 to the other */
  f[0] = (struct simFlow){.bytes = 1e6, .cap = 20e9, .nlinks = 1, .links = {0}};
  f[1] = (struct simFlow){.bytes = 8e6, .nlinks = 2, .links = {0, 1}};
  simFlowsRun(f, 2, bps, 2);
  CHECK(near(f[0].end, 1e6 / 20e9) && near(f[1].end, 1e6 / 20e9 + (8e6 - 80e9 * 5e-5) / 100e9),
        "capped + uncapped: %g %g", f[0].end, f[1].end);
}

static char tmpDir[200];
static void tmpDirRemove(void) { /* with whatever files a case left */
  DIR* d = opendir(tmpDir);
  for (struct dirent* e; d && (e = readdir(d)) != NULL;) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmpDir, e->d_name);
    if (e->d_name[0] != '.') unlink(p);
  }
  if (d) closedir(d);
  rmdir(tmpDir);
}
static const char* writeFile(const char* name, const char* text) {
  static char path[4][256];
  static int k;
  char* p = path[k++ % 4];
  /* a folder per process: ctest runs cases side by side, each writing and
   * unlinking its own files (a fabric names its calibration file relative
   * to itself) */
  if (!tmpDir[0]) {
    snprintf(tmpDir, sizeof(tmpDir), "%s/anyccl-test-sim-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    mkdir(tmpDir, 0700);
    atexit(tmpDirRemove);
  }
  snprintf(p, 256, "%s/%s", tmpDir, name);
  FILE* f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
  return p;
}

/* Two hosts on different leaves: the spine link decides. */
static double crossSpine(const char* oversub) {
  char text[512];
  snprintf(text, sizeof(text),
           "hosts 2\ngpus_per_host 1\nnics_per_host 1\nnic_gbps 400\nhosts_per_leaf 1\noversubscription %s\n", oversub);
  char name[64];
  snprintf(name, sizeof(name), "sim_spine_%d.fabric", (int)getpid());
  const char* p = writeFile(name, text);
  struct simFabric fab;
  char err[512];
  if (simFabricLoad(p, 2, &fab, err, sizeof(err)) != ncclSuccess) {
    CHECK(0, "%s", err);
    return 0;
  }
  struct simFlow f = {.bytes = 1e8};
  double lat;
  f.nlinks = simRoute(&fab, 0, 1, f.links, &lat);
  CHECK(f.nlinks == 6, "cross-spine route has %d links, want 6", f.nlinks);
  simFlowsRun(&f, 1, fab.linkBps, fab.nLinks);
  simFabricFree(&fab);
  unlink(p);
  return f.end;
}

static void spine(void) {
  double full = crossSpine("1"), half = crossSpine("2:1");
  CHECK(near(full, 1e8 / 50e9), "non-blocking: %g s, want %g (400 Gb/s)", full, 1e8 / 50e9);
  CHECK(near(half, 2 * full), "2:1 oversubscribed: %g s, want twice %g", half, full);
}

static void badOne(const char* name, const char* text, const char* want) {
  const char* p = writeFile(name, text);
  struct simFabric fab;
  char err[1024] = "";
  ncclResult_t r = simFabricLoad(p, 8, &fab, err, sizeof(err));
  char expect[512];
  snprintf(expect, sizeof(expect), "%s%s", strstr(want, "%s") ? "" : "", want);
  char full[600];
  snprintf(full, sizeof(full), want, p);
  CHECK(r == ncclInvalidUsage && strstr(err, full), "%s: got %d '%s', want '%s'", name, r, err, full);
  if (r == ncclSuccess) simFabricFree(&fab);
  unlink(p);
}

static void badFabric(void) {
  badOne("bad1.fabric", "hosts 2\nnic_speed 400\n", "%s:2: nic_speed: unknown field");
  badOne("bad2.fabric", "# two hosts\nhosts two\n", "%s:2: hosts: 'two' is not an integer");
  badOne("bad3.fabric", "hosts 1\n\ngpus_per_host\n", "%s:3: gpus_per_host: no value");
  badOne("bad4.fabric", "oversubscription 0.5\n", "%s:1: oversubscription: '0.5' is not a number >= 1");
  badOne("bad5.fabric", "fabric torus\n", "%s:1: fabric: 'torus' is neither rail nor fattree");
  badOne("bad6.fabric", "hosts 1\ngpus_per_host 4\nnics_per_host 4\n", "%s:1: hosts: 1 hosts x 4 GPUs is fewer than");
  badOne("bad9.fabric", "# 4 GPUs\n\ngpus_per_host 4\n", "%s:3: nics_per_host: 8, the default does not divide");
  badOne("bad10.fabric", "nics_per_host 3\ngpus_per_host 8\n", "%s:2: nics_per_host: 3 does not divide");
  badOne("bad11.fabric", "hosts 1\ndevice b200\n", "%s:2: device: 'b200' is not a built-in kind");
  badOne("bad12.fabric", "hosts 1\n\nhost_xml no_such.xml\n", "%s:3: host_xml: cannot read");
  badOne("bad13.fabric", "hosts 1\nlink_latency_us -2\n", "%s:2: link_latency_us: '-2' is not a number >= 0");
  /* a calibration named by the fabric: the calibration file's own line */
  const char* c14 = writeFile("bad14.calib", "# H100\nblock_GBps 40\nll_efficiency 1.5\n");
  badOne("bad14.fabric", "hosts 1\ncalibration bad14.calib\n", "bad14.calib:3: ll_efficiency: 1.5 is more than 1");
  unlink(c14);
  badOne("bad7.fabric", "hosts 1\ndegrade host0/gpu9/nvlink-out=10\n", "%s:2: degrade: no link named");
  badOne("bad8.fabric", "hosts 1\nnic_gbps 400 800\n", "%s:2: nic_gbps: more than one value");
  /* found while readying fabric.c for fuzz/fuzz_fabric.c: an integer past INT_MAX was converted anyway (undefined), a fabric of
   * 2^31 GPUs overflowed the link count, and /dev/zero as a file read zeros forever */
  badOne("bad9.fabric", "hosts 3000000000\n", "%s:1: hosts: '3000000000' is not an integer >= 1 and <= 16777216");
  badOne("bad9b.fabric", "hosts 2\nnic_gbps 1e300\n", "%s:2: nic_gbps: '1e300' is not a number >= 0.001 and <= 1000000000000");
  badOne("bad9c.fabric", "hosts 2\ndegrade host1/nic1/in=11e305\n", "%s:2: degrade: write 'degrade <link name>=<GB/s>' with");
  badOne("bad10.fabric", "hosts 1000000\ngpus_per_host 64\n", "%s:1: hosts: 1000000 hosts x 64 GPUs, 8 NICs make");
  char longLine[1200];
  snprintf(longLine, sizeof(longLine), "hosts 1\ndevice %01100d\n", 7);
  badOne("bad11.fabric", longLine, "%s:2: line: longer than 1023 bytes or holds a NUL");
  badOne("bad11z.fabric", "calibration /dev/zero\n", "/dev/zero:1: line: longer than 1023 bytes or holds a NUL");
  badOne("bad12.fabric", "gpus_per_host 4\n", "%s:1: nics_per_host: 8, the default does not divide gpus_per_host (4)");
  badOne("bad13.fabric", "device\tb300\n", "%s:1: device: 'b300' is not a built-in kind");
  badOne("bad14.fabric", "hosts 2\ndegrade host00/gpu3/nvlink-out=10\n", "%s:2: degrade: no link named 'host00/");
  {
    struct simFabric fab;
    char err[1024] = "";
    const char* p = writeFile("sim:colon.fabric", "hosts 2\n\ndegrade leaf7/down-from-spine=7\n");
    CHECK(simFabricLoad(p, 8, &fab, err, sizeof(err)) == ncclSuccess, "a file name with ':': %s", err);
    CHECK(fab.linkBps[fab.nLinks - 1] == 7e9, "degrade of the last link: %g", fab.linkBps[fab.nLinks - 1]);
    simFabricFree(&fab);
    unlink(p);
  }
  struct simCalib c;
  simCalibDefaults(&c);
  static const char* calibs[][2] = {
      {"block_GBps 44\nlaunch_us -1\n", ":2: launch_us: '-1' is not a number >= 0"},
      {"block_GBps 44\n\nblock_gbps_x 3\n", ":3: block_gbps_x: unknown field; known: block_GBps"},
      {"nvlink_GBps fast\n", ":1: nvlink_GBps: 'fast' is not a number"},
      {"launch_us 5\nll_efficiency 2\n", ":2: ll_efficiency: 2 is more than 1"},
      {"simple_step_us\n", ":1: simple_step_us: no value"},
      {"launch_us 5\nmodel pipelined\n", ":2: model: not lockstep or dataflow"},
      {"symm_launch_us 3\nsymm_ll_block_GBps 0\n", ":2: symm_ll_block_GBps: '0' is not a number >= 0.001"},
      {"symm_barrier_us -2\n", ":1: symm_barrier_us: '-2' is not a number >= 0"},
  };
  for (size_t i = 0; i < sizeof(calibs) / sizeof(calibs[0]); i++) {
    const char* p = writeFile("bad.calib", calibs[i][0]);
    char err[1024] = "";
    simCalibDefaults(&c);
    CHECK(simCalibLoad(p, &c, err, sizeof(err)) == ncclInvalidUsage && strstr(err, p) && strstr(err, calibs[i][1]),
          "calib %zu: '%s', want '%s'", i, err, calibs[i][1]);
    unlink(p);
  }
}

/* ---- whole collectives on the sim backend ---------------------------------------- */
#define N 8
static ncclComm_t comms[N];
static cudaStream_t streams[N];
static void* bufs[N];

static void initComms(void) {
  int devs[N];
  for (int i = 0; i < N; i++) devs[i] = i;
  CHECK(ncclCommInitAll(comms, N, devs) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(NULL));
  for (int i = 0; i < N; i++) {
    cudaSetDevice(i);
    cudaStreamCreate(&streams[i]);
    cudaMalloc(&bufs[i], 64 << 20);
  }
}

static void freeComms(void) {
  for (int i = 0; i < N; i++) {
    ncclCommDestroy(comms[i]);
    cudaSetDevice(i);
    cudaFree(bufs[i]);
    cudaStreamDestroy(streams[i]);
  }
}

/* Opens a group of one call per rank (the caller ends it): an all-reduce
 * of `bytes` (float sum, in place; what 0), a broadcast of `bytes` from
 * rank 0 (what 1), or a send/receive ring (what 2: each rank sends `bytes`
 * to the next and receives them from the previous, 32 MB further on). */
enum { CALL_ALLREDUCE, CALL_BCAST, CALL_SENDRECV };
static void groupCall(int what, size_t bytes) {
  ncclGroupStart();
  for (int i = 0; i < N; i++) {
    if (what == CALL_BCAST) ncclBroadcast(bufs[i], bufs[i], bytes, ncclChar, 0, comms[i], streams[i]);
    else if (what == CALL_ALLREDUCE) ncclAllReduce(bufs[i], bufs[i], bytes / 4, ncclFloat, ncclSum, comms[i], streams[i]);
    else {
      ncclSend(bufs[i], bytes, ncclChar, (i + 1) % N, comms[i], streams[i]);
      ncclRecv((char*)bufs[i] + (32 << 20), bytes, ncclChar, (i + N - 1) % N, comms[i], streams[i]);
    }
  }
}

/* Its modelled time (us): estimated (nothing launched), then run and timed
 * with events on rank 0's stream (the virtual clock). */
static void groupTime(int what, size_t bytes, float* estimate, float* measured) {
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  groupCall(what, bytes);
  CHECK(ncclGroupSimulateEnd(&info) == ncclSuccess, "ncclGroupSimulateEnd");
  *estimate = info.estimatedTime;
  cudaEvent_t a, b;
  cudaSetDevice(0);
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, streams[0]);
  groupCall(what, bytes);
  ncclGroupEnd();
  cudaSetDevice(0);
  cudaEventRecord(b, streams[0]);
  cudaEventSynchronize(b);
  float ms = -1;
  cudaEventElapsedTime(&ms, a, b);
  *measured = ms * 1000;
  cudaEventDestroy(a), cudaEventDestroy(b);
}
static void allReduceTime(size_t bytes, float* estimate, float* measured) {
  groupTime(CALL_ALLREDUCE, bytes, estimate, measured);
}

/* Ring all-reduce on 8 ranks, one lane, Simple: 15 steps, 14 of which send
 * one 64 KB block (a step: step latency + route latency + transfer; the
 * last one receives only: step latency). A slow NVLink on GPU 3:
 *   lock-step: every round lasts as long as its slowest flow, the slow one;
 *   dataflow: a step's latency overlaps the wait for its input, so a step
 *   that waited costs only route latency + transfer. Rank 3 (the slow
 *   link's sender) ends last: 14 slow steps, then its last step's latency
 *   (its input came long before), as in lock-step; rank 0 (the events' stream) ends after
 *   its longest chain of waits: 10 slow steps on rank 3 (latency + route +
 *   transfer each), then a hop to each of ranks 4-7 (route + transfer) and
 *   its own last step (hidden). The FIFO's 8 slots never run out. */
static void ringSlow(void) {
  setenv("NCCL_MAX_NCHANNELS", "1", 1), setenv("NCCL_ALGO", "Ring", 1), setenv("NCCL_PROTO", "Simple", 1);
  const char* p = writeFile("sim_slow.fabric", "hosts 1\ngpus_per_host 8\ndegrade host0/gpu3/nvlink-out=10\n");
  for (int run = 0; run < 4; run++) {
    int slow = run & 1, dataflow = run >> 1;
    if (slow) setenv("ANYCCL_SIM_FABRIC", p, 1);
    else unsetenv("ANYCCL_SIM_FABRIC");
    setenv("ANYCCL_SIM_MODEL", dataflow ? "dataflow" : "lockstep", 1);
    initComms();
    size_t bytes = N * 65536;
    float est, got;
    allReduceTime(bytes, &est, &got);
    double fast = 2 + 0.5 + 65536 / 44e3, slowStep = 2 + 0.5 + 65536 / 10e3; /* us; 44 GB/s: one lane */
    double want = 5 + 14 * (slow ? slowStep : fast) + 2, want0 = want;
    if (slow && dataflow) want0 = 5 + 10 * slowStep + 4 * (fast - 2);
    const char* what = dataflow ? (slow ? "dataflow, slow" : "dataflow, fast") : (slow ? "slow" : "fast");
    CHECK(fabs(est - want) < 1e-3 * want, "%s: ncclGroupSimulateEnd %g us, want %g", what, est, want);
    CHECK(fabs(got - want0) < 1e-3 * want0, "%s: events %g us, want %g", what, got, want0);
    printf("ring all-reduce 8 x 64 KB, %s link, %s: estimated %.3f us, events (rank 0) %.3f us, by hand %.3f, %.3f us\n",
           slow ? "one 10 GB/s" : "no slow", dataflow ? "dataflow" : "lock-step", est, got, want, want0);
    freeComms();
  }
  unsetenv("ANYCCL_SIM_MODEL");
  unlink(p);
}

/* A p2p op runs as many GPU blocks as the cuda backend cuts it into
 * (anycclP2pCuts): send/receive around a ring of 8 ranks (each rank sends
 * to the next), Simple, the built-in calibration (44 GB/s a block, 360 GB/s
 * NVLink): 32 KB is one block, 1 MB eight (352 GB/s), 16 and 32 MB 32
 * blocks, the NVLink binding. Time: launch + step latency + route latency
 * + transfer. With recv_copy_GBps 50 each receiving block then copies its
 * piece (or, past a FIFO slot of 512 KB, the last slot) out at 50 GB/s:
 * 32 KB, 128 KB, 512 KB and 512 KB more. */
static void p2pCuts(void) {
  setenv("NCCL_PROTO", "Simple", 1), setenv("ANYCCL_CUDA_SYMM", "0", 1);
  unsetenv("ANYCCL_SIM_FABRIC"), unsetenv("ANYCCL_SIM_MODEL");
  static const struct { size_t bytes; double GBps, piece; } cases[] = {
      {32768, 44, 32768}, {1 << 20, 8 * 44, 131072}, {16 << 20, 360, 524288}, {32 << 20, 360, 524288}};
  for (int drain = 0; drain < 2; drain++) {
    if (drain) setenv("ANYCCL_SIM_CALIB", writeFile("sim_drain.calib", "recv_copy_GBps 50\n"), 1);
    else unsetenv("ANYCCL_SIM_CALIB");
    initComms();
    for (int c = 0; c < 4; c++) {
      size_t bytes = cases[c].bytes;
      float est, got;
      groupTime(CALL_SENDRECV, bytes, &est, &got);
      double want = 5 + 2 + 0.5 + bytes / (cases[c].GBps * 1e3) + (drain ? cases[c].piece / 50e3 : 0);
      CHECK(fabs(got - want) < 1e-3 * want && fabs(est - want) < 1e-3 * want,
            "send/recv %zu B%s: %g us (estimate %g), want %g", bytes, drain ? " with drain" : "", got, est, want);
      printf("send/recv ring of 8, %zu B%s: %.3f us, by hand %.3f us (%g GB/s)\n", bytes,
             drain ? ", recv_copy_GBps 50" : "", got, want, cases[c].GBps);
    }
    freeComms();
  }
  unsetenv("ANYCCL_CUDA_SYMM"), unsetenv("ANYCCL_SIM_CALIB");
  unlink("sim_drain.calib");
}

/* The round-number calibration of the one-host kernels' tests. */
static const char* symmCalib(const char* name) {
  const char* cal = writeFile(name, "symm_launch_us 4\nsymm_ll_block_GBps 2\nnvlink_GBps 100\n"
                                    "nvlink_latency_us 0.5\nsymm_barrier_us 1\nsymm_copy_GBps 1000\n"
                                    "symm_block_GBps 1\n");
  setenv("ANYCCL_SIM_CALIB", cal, 1);
  unsetenv("ANYCCL_SIM_FABRIC"), unsetenv("NCCL_ALGO"), unsetenv("NCCL_PROTO");
  return cal;
}
/* ncclGroupSimulateEnd's estimate (us) of an all-reduce of `bytes` floats'
 * bytes (what 0), an all-to-all of `bytes` per peer (1), or a send of
 * `bytes` from every rank to the next with the matching receives (2), on n
 * ranks of one host. */
static double symmEstimate(int n, int dataflow, int what, size_t bytes) {
  setenv("ANYCCL_SIM_MODEL", dataflow ? "dataflow" : "lockstep", 1);
  int devs[N];
  for (int i = 0; i < n; i++) devs[i] = i;
  CHECK(ncclCommInitAll(comms, n, devs) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(NULL));
  for (int i = 0; i < n; i++) cudaSetDevice(i), cudaStreamCreate(&streams[i]), cudaMalloc(&bufs[i], 32 << 20);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ncclGroupStart();
  for (int i = 0; i < n; i++) {
    char* out = (char*)bufs[i] + (16 << 20);
    if (what == 1) {
      ncclAlltoAll(bufs[i], out, bytes, ncclUint8, comms[i], streams[i]);
    } else if (what == 2) {
      ncclSend(bufs[i], bytes, ncclUint8, (i + 1) % n, comms[i], streams[i]);
      ncclRecv(out, bytes, ncclUint8, (i + n - 1) % n, comms[i], streams[i]);
    } else if (what == 3) {
      ncclBroadcast(bufs[i], out, bytes / 4, ncclFloat, 0, comms[i], streams[i]);
    } else if (what == 4) {
      ncclReduce(bufs[i], out, bytes / 4, ncclFloat, ncclSum, 0, comms[i], streams[i]);
    } else {
      ncclAllReduce(bufs[i], out, bytes / 4, ncclFloat, ncclSum, comms[i], streams[i]);
    }
  }
  CHECK(ncclGroupSimulateEnd(&info) == ncclSuccess, "ncclGroupSimulateEnd");
  for (int i = 0; i < n; i++) {
    ncclCommDestroy(comms[i]);
    cudaSetDevice(i), cudaFree(bufs[i]), cudaStreamDestroy(streams[i]);
  }
  return info.estimatedTime;
}

/* One host: all-reduces up to ANYCCL_CUDA_SYMM_LL take the cuda backend's
 * LL kernel (cuda_symm.c), not the ring plan. With a calibration of round
 * numbers (launch 4 us, route 0.5 us, NVLink 100 GB/s, an LL block 2 GB/s
 * of wire bytes), an all-reduce of B bytes on n ranks is one kernel: every
 * rank stores its vector as 16-byte lines of 8 bytes (2B wire bytes) into
 * each of its n - 1 peers, its blocks = min(128, B / 2 KB) sharing
 * blocks x 2 GB/s among its peers, and each NVLink shared by its n - 1
 * flows: 4 + 0.5 + 2B / rate. Above 1 MB on 2 ranks (up to the 4 MB
 * staging area) the staged kernel: launch + copy in (B at 1000 GB/s) +
 * barrier (1 us) + route + both halves (2 x B/2 each way, 128 blocks x
 * 1 GB/s, the link's 100 GB/s binding) + barrier + copy out. The limits
 * follow the rank count unless set (cuda_symm.c): on 4 ranks one-shot LL up
 * to 1/8 of the 1 MB default, two-shot LL up to 1 MB, staged up to 4/2 x
 * 4 MB. The staged kernel on n ranks:
 * each rank's n - 1 flows carry 2 shares of B/n, capped at blocks
 * (B/n / 8 KB, at most 128) x 1 GB/s / (n - 1) each, n - 1 of them on each
 * NVLink. The second ctest (symm_ll_env) sets both knobs to the 2-GPU
 * values: then 1 MB on 4 ranks is LL again and 8 MB not staged. */
static void symmLL(void) {
  const char* cal = symmCalib("sim_symm.calib");
  const int env = getenv("ANYCCL_CUDA_SYMM_LL") != NULL;
  /* Two-shot, unless ANYCCL_CUDA_SYMM_LL is set (sim.symm_ll_env): on 4
   * ranks the one-shot stops at 128 KB and the two-shot kernel takes 512 KB
   * and 1 MB (sim.symm_ll2 sets its limit to 4 MB: the same choices), in
   * LL128 lines (the sim's GPUs share NVLink; from 512 KB): 128 wire bytes
   * per 120, B/120/4 lines a chunk in blocks of 32 lines: two rounds of 3
   * flows of B x 128/120 / 4 from every rank, 3 on each NVLink. 512 KB:
   * 1093 lines a chunk, 35 blocks, 70 GB/s a rank over 3 flows binds; 1 MB:
   * 2185 lines, 69 blocks, the link's 33.3 GB/s a flow binds. */
  const double kb512 = env ? 4 + 0.5 + 1048576 / (100e3 / 3) : 4 + 2 * (0.5 + 524288.0 * 128 / 120 / 4 / (35 * 2e3 / 3));
  const double mb4 = env ? 4 + 0.5 + 2097152 / (100e3 / 3) : 4 + 2 * (0.5 + 1048576.0 * 128 / 120 / 4 / (100e3 / 3));
  struct {
    int n;
    size_t bytes;
    double want; /* us, by hand; < 0: must not be this time (a path the knobs rule out) */
    const char* why;
  } cases[] = {
      {4, 128 << 10, 4 + 0.5 + 262144 / (100e3 / 3), "4 ranks, one-shot LL: 3 flows share each NVLink"},
      {4, 512 << 10, kb512, env ? "4 ranks, ANYCCL_CUDA_SYMM_LL=1 MB: one-shot" : "4 ranks, 512 KB: two-shot LL128"},
      {4, 1 << 20, mb4, env ? "4 ranks, ANYCCL_CUDA_SYMM_LL=1 MB: one-shot" : "4 ranks, 1 MB: two-shot LL128"},
      {4, 8 << 20, (env ? -1 : 1) * (4 + 8.388608 + 1 + 0.5 + 4194304 / (100e3 / 3) + 1 + 8.388608),
       env ? "4 ranks, ANYCCL_CUDA_SYMM_STAGE=4 MB: 8 MB not staged" : "4 ranks, 8 MB: staged (the NVLinks bind)"},
      {2, 256 << 10, 4 + 0.5 + 524288 / 100e3, "2 ranks, 128 blocks: the link's 100 GB/s binds"},
      {8, 64 << 10, 4 + 0.5 + 131072 / (32 * 2e3 / 7), "8 ranks, 32 blocks: 64 GB/s over 7 peers binds"},
      {8, 256 << 10, 4 + 0.5 + 524288 / (100e3 / 7), "8 ranks, 128 blocks: 7 flows share each NVLink"},
      {2, 2 << 20, 4 + 2097152 / 1000e3 + 1 + 0.5 + 2097152 / 100e3 + 1 + 2097152 / 1000e3, "2 ranks, staged"},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    for (int dataflow = 0; dataflow < 2; dataflow++) {
      int n = cases[c].n;
      double want = fabs(cases[c].want), got = symmEstimate(n, dataflow, 0, cases[c].bytes);
      if (cases[c].want > 0)
        CHECK(fabs(got - want) < 1e-4 * want, "%s (%s): %g us, want %g", cases[c].why,
              dataflow ? "dataflow" : "lock-step", got, want);
      else
        CHECK(fabs(got - want) > 1e-4 * want, "%s (%s): %g us, the staged kernel's time", cases[c].why,
              dataflow ? "dataflow" : "lock-step", got);
      printf("all-reduce of %zu KB on %d ranks of one host, %s: %.4f us, by hand %.4f (%s)\n", cases[c].bytes >> 10,
             n, dataflow ? "dataflow" : "lock-step", got, want, cases[c].why);
    }
  }
  /* Broadcast and reduce on 4 ranks past their LL limits (341 KB, 256 KB),
   * in LL128 lines: broadcast 512 KB one-shot (the root's 3 flows of B x
   * 128/120, 128 blocks, the NVLink binds); broadcast 1 MB two-shot (the
   * root's chunks to the 3 others, then every chunk to every peer: two
   * rounds of 3 flows of B x 128/120 / 4 on each NVLink); reduce 2 MB
   * two-shot (chunks to their owners, then the sums to the root: 3 flows
   * into the root's NVLink). Unless ANYCCL_CUDA_SYMM_LL is set. */
  struct {
    int what;
    size_t bytes;
    double want;
    const char* why;
  } rooted[] = {
      {3, 512 << 10, 4 + 0.5 + 524288.0 * 128 / 120 / (100e3 / 3), "broadcast 512 KB: one-shot LL128"},
      {3, 1 << 20, 4 + 2 * (0.5 + 1048576.0 * 128 / 120 / 4 / (100e3 / 3)), "broadcast 1 MB: two-shot LL128"},
      {4, 2 << 20, 4 + 2 * (0.5 + 2097152.0 * 128 / 120 / 4 / (100e3 / 3)), "reduce 2 MB: two-shot LL128"},
  };
  for (size_t c = 0; !env && c < sizeof(rooted) / sizeof(rooted[0]); c++)
    for (int dataflow = 0; dataflow < 2; dataflow++) {
      double got = symmEstimate(4, dataflow, rooted[c].what, rooted[c].bytes);
      CHECK(fabs(got - rooted[c].want) < 1e-4 * rooted[c].want, "4 ranks, %s (%s): %g us, want %g", rooted[c].why,
            dataflow ? "dataflow" : "lock-step", got, rooted[c].want);
      printf("4 ranks of one host, %s, %s: %.4f us, by hand %.4f\n", rooted[c].why, dataflow ? "dataflow" : "lock-step",
             got, rooted[c].want);
    }
  unsetenv("ANYCCL_SIM_MODEL"), unsetenv("ANYCCL_SIM_CALIB");
  unlink(cal);
}

/* A launch onto an idle stream (idle_launch_us; graph_idle_launch_us with
 * ANYCCL_SIM_GRAPH=1): after the host synchronized, one thread launches a
 * 128 KB all-reduce (one-shot LL) on each of 4 ranks of one host, 3 times, and
 * synchronizes again (a timed loop of nccl-tests -g 4). Only the first
 * launch on each stream finds it idle; the thread is busy for each such
 * launch, so the last rank starts 4 idle launches after the loop began,
 * and the LL kernels (symm_ll's calibration: 4 us launch, 0.5 us route, 2B
 * wire bytes over 3 flows sharing each 100 GB/s NVLink) follow back to
 * back: 4 x idle + 3 x (4 + 0.5 + 262144 / 33.3 GB/s). The host's clock
 * (anycclCpuSimNow) reads the loop's time. */
double anycclCpuSimNow(void);
static double idleLoop(const char* graph) {
  setenv("ANYCCL_SIM_GRAPH", graph, 1);
  const int n = 4;
  int devs[4] = {0, 1, 2, 3};
  CHECK(ncclCommInitAll(comms, n, devs) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(NULL));
  for (int i = 0; i < n; i++) cudaSetDevice(i), cudaStreamCreate(&streams[i]), cudaMalloc(&bufs[i], 1 << 20);
  for (int i = 0; i < n; i++) cudaSetDevice(i), cudaStreamSynchronize(streams[i]);
  double t0 = anycclCpuSimNow();
  for (int k = 0; k < 3; k++) {
    ncclGroupStart();
    for (int i = 0; i < n; i++) ncclAllReduce(bufs[i], bufs[i], 32768, ncclFloat, ncclSum, comms[i], streams[i]);
    CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd: %s", ncclGetLastError(NULL));
  }
  for (int i = 0; i < n; i++) cudaSetDevice(i), cudaStreamSynchronize(streams[i]);
  double us = (anycclCpuSimNow() - t0) * 1e6;
  for (int i = 0; i < n; i++) {
    ncclCommDestroy(comms[i]);
    cudaSetDevice(i), cudaFree(bufs[i]), cudaStreamDestroy(streams[i]);
  }
  unsetenv("ANYCCL_SIM_GRAPH");
  return us;
}
static void idleLaunch(void) {
  const char* base = "symm_launch_us 4\nsymm_graph_launch_us 2\nsymm_ll_block_GBps 2\nnvlink_GBps 100\n"
                     "nvlink_latency_us 0.5\n";
  char text[512];
  const double xfer = 262144 / (100e3 / 3);
  struct {
    const char* keys;
    const char* graph;
    double want;
    const char* why;
  } cases[] = {
      {"", "0", 3 * (4 + 0.5 + xfer), "no idle_launch_us: the kernels alone"},
      {"idle_launch_us 10\ngraph_idle_launch_us 30\n", "0", 4 * 10 + 3 * (4 + 0.5 + xfer), "eager: 4 idle launches"},
      {"idle_launch_us 10\ngraph_idle_launch_us 30\n", "1", 4 * 30 + 3 * (2 + 0.5 + xfer), "graph: 4 idle launches"},
  };
  unsetenv("ANYCCL_SIM_FABRIC"), unsetenv("NCCL_ALGO"), unsetenv("NCCL_PROTO"), unsetenv("ANYCCL_SIM_MODEL");
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    snprintf(text, sizeof(text), "%s%s", base, cases[c].keys);
    const char* cal = writeFile("sim_idle.calib", text);
    setenv("ANYCCL_SIM_CALIB", cal, 1);
    for (int dataflow = 0; dataflow < 2; dataflow++) {
      setenv("ANYCCL_SIM_MODEL", dataflow ? "dataflow" : "lockstep", 1);
      double got = idleLoop(cases[c].graph), want = cases[c].want;
      CHECK(fabs(got - want) < 0.01, "%s (%s): %.4f us, want %.4f", cases[c].why, dataflow ? "dataflow" : "lock-step",
            got, want);
      printf("3 all-reduces of 128 KB on 4 ranks after a sync, %s: %.4f us, by hand %.4f (%s)\n",
             dataflow ? "dataflow" : "lock-step", got, want, cases[c].why);
    }
    unlink(cal);
  }
  unsetenv("ANYCCL_SIM_MODEL"), unsetenv("ANYCCL_SIM_CALIB");
}

/* One host: an all-to-all whose block for each peer is at most
 * ANYCCL_CUDA_SYMM_A2A takes the LL kernel: every rank stores its block for
 * peer q (B bytes, 2B wire bytes) into q's segment, as all-gather does, so
 * with symm_ll's calibration it takes 4 + 0.5 + 2B / rate. With the knob at
 * 0 (the second ctest) it takes the FIFO plan instead: the time must be
 * another (a path choice that ignored the knob, or missed all-to-all, fails
 * one of the two). */
struct symmCase {
  int n;
  size_t bytes; /* per peer */
  double want;  /* us, by hand (the kernel); < 0: not the kernel (the FIFO plan) */
  const char* why;
};
/* Each case's estimate against its time by hand; with the knob `knob` at 0
 * (the _off ctests) none may be the kernel's time. */
static void symmCases(const char* knob, int what, const char* name, const struct symmCase* cases, int ncases) {
  const char* cal = symmCalib("sim_knob.calib");
  const char* v = getenv(knob);
  const int on = !(v && atoll(v) == 0);
  for (int c = 0; c < ncases; c++) {
    for (int dataflow = 0; dataflow < 2; dataflow++) {
      int n = cases[c].n;
      double want = fabs(cases[c].want), got = symmEstimate(n, dataflow, what, cases[c].bytes);
      const char* how = dataflow ? "dataflow" : "lock-step";
      if (on && cases[c].want > 0)
        CHECK(fabs(got - want) < 1e-4 * want, "%s, %s (%s): %g us, want %g", name, cases[c].why, how, got, want);
      else
        CHECK(fabs(got - want) > 1e-2 * want, "%s, %s=%s, %s (%s): %g us, the kernel's time", name, knob, v ? v : "",
              cases[c].why, how, got);
      printf("%s of %zu bytes per peer on %d ranks of one host, %s, %s: %.4f us, kernel by hand %.4f (%s)\n", name,
             cases[c].bytes, n, how, on && cases[c].want > 0 ? "kernel" : "FIFO", got, want, cases[c].why);
    }
  }
  unsetenv("ANYCCL_SIM_MODEL"), unsetenv("ANYCCL_SIM_CALIB");
  unlink(cal);
}
static void symmA2A(void) {
  const struct symmCase cases[] = {
      {2, 256 << 10, 4 + 0.5 + 524288 / 100e3, "2 ranks, 128 blocks: the link's 100 GB/s binds"},
      {8, 64 << 10, 4 + 0.5 + 131072 / (32 * 2e3 / 7), "8 ranks, 32 blocks: 64 GB/s over 7 peers binds"},
      {4, 1000, 4 + 0.5 + 2000 / (1 * 2e3 / 3), "4 ranks, 1000 bytes: one block"},
  };
  symmCases("ANYCCL_CUDA_SYMM_A2A", 1, "all-to-all", cases, 3);
}
/* Send/recv on one host: a message up to ANYCCL_CUDA_SYMM_P2P takes the
 * p2p LL kernel: 2B + 16 wire bytes (the header line) from each rank to the
 * next, capped at the op's blocks (256 lines each, at most 32 in a kernel of
 * 2 ops) x 2 GB/s. Past 1 MB the FIFO plan (want < 0). */
static void symmP2p(void) {
  const struct symmCase cases[] = {
      {2, 1000, 4 + 0.5 + 2016 / 2e3, "2 ranks, 1000 bytes: one block"},
      {4, 64 << 10, 4 + 0.5 + 131088 / 64e3, "4 ranks, 64 KB: 32 blocks, 64 GB/s"},
      {8, 1 << 20, 4 + 0.5 + 2097168 / 64e3, "8 ranks, 1 MB: 32 blocks, 64 GB/s"},
      {2, 2 << 20, -(4 + 0.5 + 4194320 / 64e3), "2 ranks, 2 MB: past ANYCCL_CUDA_SYMM_P2P"},
  };
  symmCases("ANYCCL_CUDA_SYMM_P2P", 2, "send/recv", cases, 4);
}

/* Broadcast of 4 slices of 512 KB from rank 0 along the chain 0 -> 1 -> ...
 * -> 7 (one lane, Simple). A hop: step latency 2 + route 0.5 + 512 KB at
 * one lane's 44 GB/s.
 *   lock-step: 4 rounds of a hop (every rank moves slice k in round k);
 *   dataflow: the root sends its 4 slices back to back and ends then (the
 *   events on its stream); rank 1 forwards each slice as it arrives, its
 *   step latency hidden in the wait, so every further rank lags one route
 *   + transfer: the last rank has slice 3 (n - 2) = 6 such lags later
 *   (ncclGroupSimulateEnd: the slowest rank). */
static void chainFill(void) {
  setenv("NCCL_MAX_NCHANNELS", "1", 1), setenv("NCCL_PROTO", "Simple", 1);
  unsetenv("ANYCCL_SIM_FABRIC");
  for (int dataflow = 0; dataflow < 2; dataflow++) {
    setenv("ANYCCL_SIM_MODEL", dataflow ? "dataflow" : "lockstep", 1);
    initComms();
    size_t bytes = 4 << 19;
    float est, root;
    groupTime(CALL_BCAST, bytes, &est, &root);
    double lag = 0.5 + 524288 / 44e3, hop = 2 + lag; /* us */
    double want = 5 + 4 * hop + (dataflow ? (N - 2) * lag : 0), want0 = 5 + 4 * hop;
    const char* what = dataflow ? "dataflow" : "lock-step";
    CHECK(fabs(est - want) < 1e-3 * want, "%s: ncclGroupSimulateEnd %g us, want %g", what, est, want);
    CHECK(fabs(root - want0) < 1e-3 * want0, "%s: root's events %g us, want %g", what, root, want0);
    printf("broadcast 8 ranks x 2 MB, %s: estimated %.3f us, root %.3f us, by hand %.3f, %.3f us\n", what, est,
           root, want, want0);
    freeComms();
  }
  unsetenv("ANYCCL_SIM_MODEL");
}

/* A network connection dealt over net_channels channels (dataflow): a
 * broadcast of 4 slices of 512 KB along a chain of 8 hosts of one GPU
 * (0 -> 1 -> ... -> 7), one lane; every hop crosses a 1 GB/s NIC (8 Gb/s):
 * transfer T = 524.288 us, route R = 2 us (two hops of 1 us), step latency
 * L = 10 us, launch 5 us. The root posts all 4 slices at once: with 2
 * channels slices 0 and 1 share the link and arrive together when slice 1
 * would have alone (e1 = 5 + 2 (L + R + T)), slices 2 and 3 at e3 = 5 +
 * 4 (L + R + T). A relay sends a group's two slices back to back (the
 * second one posted while the first is in flight, so they arrive together
 * again): each relay adds L + 2 (R + T) to a group's arrival, and the last
 * rank takes the group's second slice one step latency after the first:
 *   end = e3 + 6 (L + 2 (R + T)) + L.
 * With one channel each hop lags R + T (chain_fill): e3 + 6 (R + T). The
 * root's stream ends at e3 either way. */
static void netChain(void) {
  setenv("NCCL_MAX_NCHANNELS", "1", 1), setenv("NCCL_PROTO", "Simple", 1);
  const char* fab = writeFile("sim_netchain.fabric", "hosts 8\ngpus_per_host 1\nnics_per_host 1\nnic_gbps 8\n"
                                                     "fabric fattree\nhosts_per_leaf 8\nlink_latency_us 1\n");
  setenv("ANYCCL_SIM_FABRIC", fab, 1);
  for (int k = 1; k <= 2; k++) {
    char text[256];
    snprintf(text, sizeof(text), "model dataflow\nnet_channels %d\nsimple_step_us 10\nlaunch_us 5\nblock_GBps 100\n"
             "pcie_GBps 100\n", k);
    setenv("ANYCCL_SIM_CALIB", writeFile("sim_netchain.calib", text), 1);
    initComms();
    float est, root;
    groupTime(CALL_BCAST, 4 << 19, &est, &root);
    double L = 10, R = 2, T = 524288 / 1e3, e3 = 5 + 4 * (L + R + T); /* us */
    double want = k == 1 ? e3 + 6 * (R + T) : e3 + 6 * (L + 2 * (R + T)) + L;
    CHECK(fabs(est - want) < 1e-3 * want, "net_channels %d: ncclGroupSimulateEnd %g us, want %g", k, est, want);
    CHECK(fabs(root - e3) < 1e-3 * e3, "net_channels %d: root's events %g us, want %g", k, root, e3);
    printf("broadcast across 8 hosts x 2 MB, net_channels %d: estimated %.3f us, root %.3f us, by hand %.3f, %.3f us\n",
           k, est, root, want, e3);
    freeComms();
  }
  unsetenv("ANYCCL_SIM_FABRIC"), unsetenv("ANYCCL_SIM_CALIB");
  unlink("sim_netchain.fabric"), unlink("sim_netchain.calib");
}

/* Rows of a flow file: bytes sent by each rank. */
static void flowBytes(const char* path, double* sent, int n) {
  FILE* f = fopen(path, "r");
  CHECK(f != NULL, "no flow file %s", path);
  if (f == NULL) return;
  char line[1024];
  int rows = 0;
  while (fgets(line, sizeof(line), f)) {
    if (rows++ == 0) continue; /* header */
    char* col[12];
    int k = 0;
    for (char* s = line; k < 12 && s; k++) {
      col[k] = s;
      s = strchr(s, ',');
      if (s) *s++ = '\0';
    }
    if (k < 12) continue;
    int src = atoi(col[4]);
    if (src >= 0 && src < n) sent[src] += atof(col[6]);
  }
  fclose(f);
}

/* Ring all-reduce moves 2(n-1)/n of the buffer out of every rank. */
static void conservation(void) {
  char path[256];
  snprintf(path, sizeof(path), "%s/sim_flows_%d.csv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  setenv("ANYCCL_SIM_FLOWS", path, 1), setenv("NCCL_ALGO", "Ring", 1), setenv("NCCL_PROTO", "Simple", 1);
  initComms();
  size_t bytes = 8 << 20;
  float est, got;
  allReduceTime(bytes, &est, &got);
  freeComms(); /* closes the flow file */
  double sent[N] = {0};
  flowBytes(path, sent, N);
  for (int r = 0; r < N; r++)
    CHECK(sent[r] == 2.0 * (N - 1) / N * bytes, "rank %d sent %.0f bytes, want %.0f", r, sent[r],
          2.0 * (N - 1) / N * bytes);
  printf("ring all-reduce of %zu bytes on %d ranks: rank 0 sent %.0f bytes (2(n-1)/n x size)\n", bytes, N, sent[0]);
  unlink(path);
}

/* A flow file of a few collectives (the determinism test compares two). */
static void flowFile(const char* path) {
  setenv("ANYCCL_SIM_FLOWS", path, 1);
  initComms();
  float est, got;
  allReduceTime(1 << 20, &est, &got);
  ncclGroupStart();
  for (int i = 0; i < N; i++) ncclAllGather(bufs[i], bufs[i], 4096, ncclFloat, comms[i], streams[i]);
  ncclGroupEnd();
  for (int i = 0; i < N; i++) cudaStreamSynchronize(streams[i]);
  freeComms();
}

/* One ring all-reduce as in ring_slow (8 ranks, one lane, 8 x 64 KB) with
 * ANYCCL_TRACE set: check_trace.py ring8 checks the events and times. */
static void traceRun(const char* path) {
  setenv("ANYCCL_TRACE", path, 1);
  setenv("NCCL_MAX_NCHANNELS", "1", 1), setenv("NCCL_ALGO", "Ring", 1), setenv("NCCL_PROTO", "Simple", 1);
  initComms();
  ncclGroupStart();
  for (int i = 0; i < N; i++) ncclAllReduce(bufs[i], bufs[i], N * 65536 / 4, ncclFloat, ncclSum, comms[i], streams[i]);
  ncclGroupEnd();
  for (int i = 0; i < N; i++) cudaStreamSynchronize(streams[i]);
  freeComms();
}

/* The cuda backend's timeline -> trace records (trace.c), on a made-up
 * timeline of two ranks: launch 0 has two phases (an all-reduce lane of 3
 * steps: send; receive+send; receive; then an all-gather lane of one send). */
static const struct anycclTraceRec* findRec(const struct anycclTraceBuf* b, int kind, int step, double t0) {
  for (size_t i = 0; i < b->n; i++)
    if (b->rec[i].kind == kind && (step < 0 || b->rec[i].step == step) && fabs(b->rec[i].t0 - t0) < 1e-9)
      return &b->rec[i];
  return NULL;
}

static void timeline(const char* path) {
  setenv("ANYCCL_TRACE", path, 1);
  struct ncclComm* c[2];
  for (int r = 0; r < 2; r++) {
    c[r] = calloc(1, sizeof(struct ncclComm));
    c[r]->rank = r;
    CHECK(anycclTraceAlloc(c[r], 42) == ncclSuccess && c[r]->trace, "anycclTraceAlloc");
    int q = 1 - r;
    int32_t ar[6] = {q, -1, q, q, -1, q}, ag[2] = {q, -1};
    struct anycclTraceGpuLane l0 = {.seq = 0, .phase = 0, .lane = 0, .func = FUNC_ALLREDUCE, .kind = LANE_STEPS,
                                    .nsteps = 3, .peer = -1, .bytes = 4096, .stepBytes = 1024};
    struct anycclTraceGpuLane l1 = l0;
    l1.phase = 1, l1.func = FUNC_ALLGATHER, l1.nsteps = 1;
    anycclTraceGpuLaneAdd(c[r]->trace, &l1, ag); /* out of order: the converter sorts by phase */
    anycclTraceGpuLaneAdd(c[r]->trace, &l0, ar);
    struct anycclTraceTl tl[] = {
        {4000, 0, 0, 255, 0}, {4100, 0, 0, 0, 1}, {4200, 0, 0, 0, 2}, {4300, 0, 0, 255, 3}, /* phase 1 */
        {1000, 0, 0, 255, 0}, {1100, 0, 0, 0, 1}, {1500, 0, 0, 0, 2}, {2500, 0, 0, 1, 1},
        {3000, 0, 0, 1, 2},   {3200, 0, 0, 2, 1}, {3500, 0, 0, 2, 2}, {3600, 0, 0, 255, 3},
    };
    anycclTraceFromTimeline(c[r]->trace, tl, sizeof(tl) / sizeof(tl[0]));
    const struct anycclTraceBuf* b = c[r]->trace;
    const struct anycclTraceRec* e;
    CHECK((e = findRec(b, TR_SEND, 0, 1.1)) && e->peer == q && fabs(e->t1 - 1.5) < 1e-9, "Send-q-0 at 1.1-1.5 us");
    CHECK((e = findRec(b, TR_SEND, 1, 2.5)) && fabs(e->t1 - 3.0) < 1e-9, "Send-q-1 at 2.5-3.0 us");
    CHECK((e = findRec(b, TR_RECV, 0, 2.5)) && e->peer == q, "Recv-q-0 at 2.5 us");
    CHECK((e = findRec(b, TR_RECV, 1, 3.2)) && fabs(e->t1 - 3.5) < 1e-9, "Recv-q-1 at 3.2-3.5 us");
    CHECK((e = findRec(b, TR_BUFWAIT, -1, 1.5)) && fabs(e->t1 - 2.5) < 1e-9, "BufferWait 1.5-2.5 us");
    CHECK((e = findRec(b, TR_RECVWAIT, -1, 3.0)) && fabs(e->t1 - 3.2) < 1e-9, "RecvWait 3.0-3.2 us");
    CHECK((e = findRec(b, TR_COLL, -1, 1.0)) && e->func == FUNC_ALLREDUCE && fabs(e->t1 - 3.6) < 1e-9,
          "AllReduce 1.0-3.6 us");
    CHECK((e = findRec(b, TR_COLL, -1, 4.0)) && e->func == FUNC_ALLGATHER && fabs(e->t1 - 4.3) < 1e-9,
          "AllGather 4.0-4.3 us (the lane's second start is phase 1)");
    CHECK((e = findRec(b, TR_SEND, 0, 4.1)) && e->peer == q, "the all-gather's Send-q-0 at 4.1 us");
    CHECK(b->n == 13, "rank %d: %zu records, want 13", r, b->n);
  }
  for (int r = 0; r < 2; r++) {
    anycclTraceFlush(c[r]);
    free(c[r]);
  }
}

/* Rings follow rails without a topology (src/topo/rings.c): 2 hosts of 4
 * GPUs, 2 channels; by hand: channel 0 pairs GPUs a=0, b=1: host 0 enters
 * at 0 and leaves at 1, host 1 enters at 1 and leaves at 0: 0 2 3 1 | 5 6 7
 * 4; channel 1 pairs 2 and 3: 2 0 1 3 | 7 4 5 6. Every hop between hosts
 * joins GPUs of the same local index. 3 hosts: only the closing hop
 * crosses. Then an all-reduce on 2 hosts of 4 GPUs and 4 NICs under one
 * leaf per rail: nothing goes through the spine, and the four NICs that
 * channels leave hosts through (host 0: 1 and 3; host 1: 0 and 2) carry the
 * same bytes. */
static void rails(void) {
  struct anycclTopoRank ranks[12];
  const struct anycclTopoHost* hosts[3] = {NULL, NULL, NULL};
  for (int q = 0; q < 12; q++) ranks[q].host = q / 4, ranks[q].busId[0] = '\0';
  struct anycclTopoRings* r = NULL;
  CHECK(anycclTopoBuildRings(hosts, 2, ranks, 8, 2, &r) == ncclSuccess, "anycclTopoBuildRings");
  static const int want[2][8] = {{0, 2, 3, 1, 5, 6, 7, 4}, {2, 0, 1, 3, 7, 4, 5, 6}};
  for (int c = 0; r && c < 2; c++)
    for (int i = 0; i < 8; i++)
      CHECK(r->order[c * 8 + i] == want[c][i], "channel %d position %d: rank %d, want %d", c, i, r->order[c * 8 + i],
            want[c][i]);
  anycclTopoRingsFree(r);
  r = NULL;
  CHECK(anycclTopoBuildRings(hosts, 3, ranks, 12, 4, &r) == ncclSuccess, "3 hosts");
  for (int c = 0; r && c < 4; c++) {
    int cross = 0;
    for (int i = 0; i < 12; i++) {
      int x = r->order[c * 12 + i], y = r->order[c * 12 + (i + 1) % 12];
      if (x / 4 != y / 4 && x % 4 != y % 4) cross++;
    }
    CHECK(cross == 1, "3 hosts, channel %d: %d hops between hosts change rails, want 1 (the closing one)", c, cross);
  }
  anycclTopoRingsFree(r);

  const char* p = writeFile("sim_rails.fabric", "hosts 2\ngpus_per_host 4\nnics_per_host 4\nhosts_per_leaf 2\n");
  setenv("ANYCCL_SIM_FABRIC", p, 1), setenv("NCCL_MAX_NCHANNELS", "2", 1);
  setenv("NCCL_ALGO", "Ring", 1), setenv("NCCL_PROTO", "Simple", 1);
  ncclComm_t c8[8];
  int devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(ncclCommInitAll(c8, 8, devs) == ncclSuccess, "init 8");
  ncclGroupStart();
  for (int i = 0; i < 8; i++) {
    cudaSetDevice(i);
    static void* buf[8];
    if (!buf[i]) cudaMalloc(&buf[i], 64 << 20);
    ncclAllReduce(buf[i], buf[i], 16 << 20, ncclFloat, ncclSum, c8[i], 0);
  }
  ncclGroupEnd();
  for (int i = 0; i < 8; i++) cudaSetDevice(i), cudaDeviceSynchronize();
  struct anycclSimWorld* w = c8[0]->sim;
  const struct simFabric* f = &w->fabric;
  int leafBase = 4 * f->nGpus + 2 * f->nNics;
  double spine = 0, out[8];
  for (int l = leafBase; l < f->nLinks; l++) spine += w->linkBytes[l];
  for (int k = 0; k < 8; k++) out[k] = w->linkBytes[4 * f->nGpus + 2 * k]; /* NIC k's out link */
  CHECK(spine == 0, "%.0f bytes crossed the spine, want 0", spine);
  CHECK(out[1] > 0 && out[1] == out[3] && out[1] == out[4] && out[1] == out[6], "NIC out bytes %g %g %g %g", out[1],
        out[3], out[4], out[6]);
  CHECK(out[0] == 0 && out[2] == 0 && out[5] == 0 && out[7] == 0, "other NICs carried traffic out");
  printf("rails: ring all-reduce of 64 MB on 2 x 4: %.0f bytes out of each of 4 NICs, 0 through the spine\n", out[1]);
  for (int i = 0; i < 8; i++) ncclCommDestroy(c8[i]);
  unlink(p);
}

static long rssKB(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Device memory is reserved, never committed; copies and memsets of it do
 * nothing (docs/simulation.md). */
static void reserve(void) {
  long before = rssKB();
  void* p[16];
  size_t big = (size_t)16 << 30;
  for (int d = 0; d < 16; d++) {
    cudaSetDevice(d);
    CHECK(cudaMalloc(&p[d], big) == cudaSuccess, "cudaMalloc 16 GB on device %d", d);
    CHECK(cudaMemset(p[d], 0x5a, big) == cudaSuccess, "cudaMemset");
  }
  char host[4096];
  memset(host, 7, sizeof(host));
  CHECK(cudaMemcpy(p[0], host, sizeof(host), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy H2D");
  CHECK(cudaMemcpy(host, p[1], sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy D2H");
  CHECK(host[0] == 7 && host[4095] == 7, "a copy from device memory wrote the host buffer");
  long grew = rssKB() - before;
  CHECK(grew < 64 * 1024, "256 GB of device memory, set and copied, grew RSS by %ld KB", grew);
  printf("256 GB of device memory on 16 devices: RSS grew by %ld KB\n", grew);
  for (int d = 0; d < 16; d++) cudaFree(p[d]);
}

int main(int argc, char** argv) {
  const char* c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "flows_one")) flowsOne();
  else if (!strcmp(c, "flows_share")) flowsShare();
  else if (!strcmp(c, "spine")) spine();
  else if (!strcmp(c, "bad_fabric")) badFabric();
  else if (!strcmp(c, "ring_slow")) ringSlow();
  else if (!strcmp(c, "chain_fill")) chainFill();
  else if (!strcmp(c, "p2p_cuts")) p2pCuts();
  else if (!strcmp(c, "net_chain")) netChain();
  else if (!strcmp(c, "conservation")) conservation();
  else if (!strcmp(c, "reserve")) reserve();
  else if (!strcmp(c, "flowfile") && argc > 2) flowFile(argv[2]);
  else if (!strcmp(c, "trace") && argc > 2) traceRun(argv[2]);
  else if (!strcmp(c, "timeline") && argc > 2) timeline(argv[2]);
  else if (!strcmp(c, "rails")) rails();
  else if (!strcmp(c, "symm_ll")) symmLL();
  else if (!strcmp(c, "symm_a2a")) symmA2A();
  else if (!strcmp(c, "symm_p2p")) symmP2p();
  else if (!strcmp(c, "idle_launch")) idleLaunch();
  else {
    fprintf(stderr, "usage: %s flows_one|flows_share|spine|bad_fabric|ring_slow|p2p_cuts|net_chain|chain_fill|symm_ll|symm_a2a|symm_p2p|idle_launch|conservation|reserve|flowfile PATH|trace PATH|timeline PATH\n", argv[0]);
    return 2;
  }
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("%s: ok\n", c);
  return failures ? 1 : 0;
}
