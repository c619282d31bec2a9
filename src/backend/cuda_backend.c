/* The cuda backend, host side: device segments and the device connection
 * table (transport), and plan launch (each phase encoded into a kernel
 * parameter blob, cuda_exec.h). The algorithms are the same schedules the
 * cpu executor runs (algo/schedule.c).
 *
 * Segment layout in device memory, the same on every rank (K = p2pChannels):
 *   heads [nChannels + K*nRanks] (64 bytes apart, 4 KB aligned)
 *   FIFO  [nChannels + K*nRanks]: ctrl (struct anycclFifoCtrl's tail and
 *         sizes; its head is unused here; 4 KB) + simple slots + LL slots
 * FIFO c (< nChannels) is the ring channel c receive FIFO; FIFO
 * nChannels + k*nRanks + q receives from rank q on p2p channel k. Head h of
 * a rank is the head of its send connection h (ring channel h, or
 * nChannels + k*nRanks + q: sends to rank q on p2p channel k).
 *
 * Point-to-point lanes and direct (one-shot) lanes use one connection per
 * peer in the schedule; here each is cut into up to K lanes, one GPU block
 * each, over K connections per peer pair: both ends cut the same way (the
 * cut depends only on the sizes, which the two ends agree on). Local copies
 * (sends to self) are cut the same way over up to K blocks.
 *
 * Ranks on other hosts (NCCL_HOSTID / host hash) are reached through the
 * network proxy (transport/net.c) with pinned host bounce FIFOs, no GPUDirect
 * RDMA: each end of such a connection has a FIFO of its own in pinned,
 * device-mapped host memory (tail, head, sizes and slots). The sending
 * kernel fills its FIFO and publishes tail; the proxy sends the slot and
 * frees it (head). The receiving proxy fills the receiver's FIFO and
 * publishes tail; the receiving kernel reads the slot across PCIe and frees
 * it (head). A communicator spanning hosts runs the simple protocol only
 * (the proxy moves whole slots, not LL lines) and at most
 * ANYCCL_CUDA_NET_CHANNELS ring channels and connections per peer pair. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "exec.h"
#include "net.h"
#include "param.h"
#include "plan.h"
#include "rt.h"
#include "trace.h"
#include "nccl_device/core.h"

#define ACUCHECK(call)                                                                         \
  do {                                                                                         \
    int e_ = (call);                                                                           \
    if (e_ != 0) {                                                                             \
      WARN("CUDA call %s failed: %s (%d)", #call, acuErrorString(e_), e_);                     \
      return ncclUnhandledCudaError;                                                           \
    }                                                                                          \
  } while (0)

static size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int nFifos(const struct ncclComm* comm) { return comm->nChannels + comm->p2pChannels * comm->nRanks; }
/* The heads (64 bytes each), then the mismatch mailbox word (cuda_exec.h). */
static size_t mailboxOff(const struct ncclComm* comm) { return (size_t)nFifos(comm) * 64; }
static size_t headsBytes(const struct ncclComm* comm) {
  /* + mailbox, op word; symmetric barrier pads, LL lines, staging area */
  return alignUp(mailboxOff(comm) + ACU_SYMM_STAGE_OFF + anycclCudaStageBytes(comm), 4096);
}
char* anycclCudaMailbox(const struct ncclComm* comm, int q) {
  return comm->devPeerBase && comm->devPeerBase[q] ? comm->devPeerBase[q] + mailboxOff(comm) : NULL;
}
/* LL lines have slots of their own (a line of simple data must never pass
 * for an LL line): up to 64 KB, half of it payload. */
static size_t llSlotBytes(const struct ncclComm* comm) { return comm->slotBytes < (64 << 10) ? comm->slotBytes : 64 << 10; }
static size_t fifoBytes(const struct ncclComm* comm) {
  return 4096 + alignUp((size_t)comm->nslots * comm->slotBytes, 4096) + alignUp((size_t)comm->nslots * llSlotBytes(comm), 4096);
}
static size_t fifoOff(const struct ncclComm* comm, int i) { return headsBytes(comm) + (size_t)i * fifoBytes(comm); }
static size_t headOff(int i) { return (size_t)i * 64; }

/* Connection table index of a host-side connection (plan lanes carry
 * pointers into comm->ringSend/ringRecv/p2pSend/p2pRecv). */
static int connIndex(const struct ncclComm* comm, const struct anycclConn* c) {
  if (c >= comm->ringSend && c < comm->ringSend + ANYCCL_MAX_CHANNELS) return (int)(c - comm->ringSend);
  if (c >= comm->ringRecv && c < comm->ringRecv + ANYCCL_MAX_CHANNELS)
    return ANYCCL_MAX_CHANNELS + (int)(c - comm->ringRecv);
  if (c >= comm->p2pSend && c < comm->p2pSend + comm->nRanks) return 2 * ANYCCL_MAX_CHANNELS + (int)(c - comm->p2pSend);
  if (c >= comm->p2pRecv && c < comm->p2pRecv + comm->nRanks)
    return 2 * ANYCCL_MAX_CHANNELS + comm->nRanks + (int)(c - comm->p2pRecv);
  return -1;
}
const void* anycclCudaP2pRecvConn(const struct ncclComm* comm, int peer) {
  int idx = connIndex(comm, &comm->p2pRecv[peer]);
  return comm->devConns && idx >= 0 && idx < comm->nDevConns ? (const void*)(comm->devConns + idx) : NULL;
}
/* The same connection on p2p channel k (ring connections have one). */
static int connSub(const struct ncclComm* comm, int idx, int k) {
  return idx >= 2 * ANYCCL_MAX_CHANNELS ? idx + k * 2 * comm->nRanks : idx;
}

static void setConn(struct acuConn* d, char* fifo, char* head, const struct ncclComm* comm, int peer) {
  d->buf = fifo + 4096;
  d->llbuf = fifo + 4096 + alignUp((size_t)comm->nslots * comm->slotBytes, 4096);
  d->llSlotBytes = (uint32_t)llSlotBytes(comm);
  d->tail = (uint64_t*)(fifo + offsetof(struct anycclFifoCtrl, tail));
  d->sizes = (uint64_t*)(fifo + offsetof(struct anycclFifoCtrl, sizes));
  d->head = (uint64_t*)head;
  d->step = 0;
  d->nslots = (uint32_t)comm->nslots;
  d->slotBytes = (uint32_t)comm->slotBytes;
  d->peer = peer;
  d->net = 0;
  d->mailbox = comm->devPeerBase && comm->devPeerBase[peer] ? (uint64_t*)(comm->devPeerBase[peer] + mailboxOff(comm)) : NULL;
}

/* ---- network connection ends (pinned host FIFOs, fed by the proxy) ---- */
static size_t netFifoBytes(const struct ncclComm* comm) {
  return 4096 + alignUp((size_t)comm->nslots * comm->slotBytes, 4096);
}

/* Connection ends this rank has with ranks of other hosts. */
static int countNetEnds(const struct ncclComm* comm, const int* remote) {
  int n = comm->nRanks, count = 0;
  for (int c = 0; c < comm->nChannels; c++) {
    const int* ring = comm->ringOrder + c * n;
    count += remote[ring[(comm->ringPos[c] + 1) % n]] + remote[ring[(comm->ringPos[c] + n - 1) % n]];
  }
  for (int q = 0; q < n; q++) count += remote[q] ? 2 * comm->p2pChannels : 0;
  return count;
}

/* The next network end: device connection d gets FIFO i of the pinned
 * block; the proxy's end (host view) goes into ends[i]. fifoIndex is the
 * FIFO's index in the receiver's numbering (the two ends meet through it). */
static void setNetConn(struct ncclComm* comm, struct acuConn* d, char* devBlock, struct anycclNetEnd* ends,
                       int peer, int send, int fifoIndex, int channel) {
  int i = comm->cuNetCount++;
  char* host = comm->cuNetStaging + (size_t)i * netFifoBytes(comm);
  char* dev = devBlock + (size_t)i * netFifoBytes(comm);
  struct anycclConn* c = &comm->cuNetConns[i];
  c->ctrl = (struct anycclFifoCtrl*)host;
  c->buf = host + 4096;
  c->nslots = comm->nslots;
  c->slotBytes = comm->slotBytes;
  c->peer = peer;
  c->net = send ? 2 : 1; /* 2: a send end (poisonNetSends) */
  c->fifoIndex = fifoIndex;
  c->via = anycclNetVia();
  ends[i] = (struct anycclNetEnd){c, send, channel};
  /* The FIFO's own head: the kernel and the proxy both use this one block. */
  setConn(d, dev, dev + offsetof(struct anycclFifoCtrl, head), comm, peer);
  d->llbuf = d->buf; /* no LL across hosts (and no LL area): never used */
  d->net = 1;        /* the proxy reads its counters: poisoned with a tagged slot, not by value */
  d->mailbox = NULL;
}

/* Map the segments of same-host peers (peer access or CUDA IPC); remote[q]
 * = 1 for ranks on other hosts (reached through the network proxy). */
static ncclResult_t mapPeers(struct ncclComm* comm, int* remote) {
  int n = comm->nRanks, r = comm->rank;
  const struct anycclPeerInfo* me = &comm->peerInfo[r];
  for (int q = 0; q < n; q++) {
    const struct anycclPeerInfo* p = &comm->peerInfo[q];
    if (q == r) {
      comm->devPeerBase[q] = comm->devSeg;
      continue;
    }
    if (p->hostHash != me->hostHash) {
      if (anycclParamInt(PARAM_NET_DISABLE)) {
        WARN("cuda backend: rank %d (host %s) is on another host than rank %d and ANYCCL_NET_DISABLE=1 refuses the "
             "network transport; unset it, or keep each communicator on one host",
             q, p->hostId[0] ? p->hostId : "?", r);
        return ncclSystemError;
      }
      remote[q] = 1;
      continue;
    }
    if (p->cudaDev == comm->cudaDev && p->processToken == me->processToken) {
      WARN("cuda backend: ranks %d and %d share device %d", r, q, comm->cudaDev);
      return ncclInvalidUsage;
    }
    if (p->processToken == me->processToken) {
      if (!acuCanAccessPeer(comm->cudaDev, p->cudaDev)) {
        WARN("cuda backend: device %d cannot access device %d directly (no NVLink or PCIe peer access); this "
             "build needs peer access between the GPUs of a communicator", comm->cudaDev, p->cudaDev);
        return ncclSystemError;
      }
      ACUCHECK(acuEnablePeer(comm->cudaDev, p->cudaDev));
      comm->devPeerBase[q] = p->devSeg;
    } else {
      void* base = NULL;
      ACUCHECK(acuIpcOpenMemHandle(&base, &p->devIpc));
      comm->devPeerBase[q] = base;
      comm->devPeerIpc[q] = 1;
    }
  }
  return ncclSuccess;
}

/* The device connection table (and the network ends, whose proxy starts
 * here). */
static ncclResult_t connTable(struct ncclComm* comm, const int* remote) {
  int n = comm->nRanks, r = comm->rank;
  ncclResult_t res = ncclSuccess;
  comm->nDevConns = 2 * ANYCCL_MAX_CHANNELS + comm->p2pChannels * 2 * n;
  struct acuConn* t;
  ANYCCL_CALLOC(t, comm->nDevConns);
  /* Network ends: one pinned block, FIFO after FIFO. */
  int netCount = countNetEnds(comm, remote);
  struct anycclNetEnd* ends = NULL;
  char* netDev = NULL;
  if (netCount > 0) {
    ends = calloc(netCount, sizeof(*ends));
    comm->cuNetConns = calloc(netCount, sizeof(*comm->cuNetConns));
    if (ends == NULL || comm->cuNetConns == NULL) {
      WARN("cuda backend: out of host memory for %d network connections", netCount);
      res = ncclSystemError;
      goto out;
    }
    int e = acuHostAllocMapped((void**)&comm->cuNetStaging, (void**)&netDev, (size_t)netCount * netFifoBytes(comm));
    if (e != 0) {
      WARN("cuda backend: cannot allocate %d pinned network FIFOs of %zu bytes: %s (%d)", netCount,
           netFifoBytes(comm), acuErrorString(e), e);
      res = ncclUnhandledCudaError;
      goto out;
    }
  }
  char* mine = comm->devSeg;
  for (int c = 0; c < comm->nChannels; c++) {
    const int* ring = comm->ringOrder + c * n;
    int next = ring[(comm->ringPos[c] + 1) % n];
    int prev = ring[(comm->ringPos[c] + n - 1) % n];
    comm->ringSend[c].peer = next;
    comm->ringRecv[c].peer = prev;
    if (remote[next]) setNetConn(comm, &t[c], netDev, ends, next, 1, c, c);
    else setConn(&t[c], comm->devPeerBase[next] + fifoOff(comm, c), mine + headOff(c), comm, next);
    if (remote[prev]) setNetConn(comm, &t[ANYCCL_MAX_CHANNELS + c], netDev, ends, prev, 0, c, c);
    else setConn(&t[ANYCCL_MAX_CHANNELS + c], mine + fifoOff(comm, c), comm->devPeerBase[prev] + headOff(c), comm, prev);
    if (n > 1)
      INFO(NCCL_INIT | NCCL_P2P | NCCL_NET, "Channel %02d/%d : %d[%d] -> %d[%d] via %s", c, comm->nChannels, r,
           comm->cudaDev, next, comm->peerInfo[next].cudaDev,
           remote[next] ? anycclNetVia() : comm->devPeerIpc[next] ? "P2P/IPC" : "P2P/direct pointer");
  }
  for (int q = 0; q < n; q++) {
    comm->p2pSend[q].peer = comm->p2pRecv[q].peer = q;
    if (q == r) continue;
    for (int s = 0; s < comm->p2pChannels; s++) {
      int base = comm->nChannels + s * n;
      struct acuConn* send = &t[2 * ANYCCL_MAX_CHANNELS + s * 2 * n + q];
      struct acuConn* recv = &t[2 * ANYCCL_MAX_CHANNELS + s * 2 * n + n + q];
      if (remote[q]) {
        setNetConn(comm, send, netDev, ends, q, 1, base + r, -1);
        setNetConn(comm, recv, netDev, ends, q, 0, base + q, -1);
        continue;
      }
      setConn(send, comm->devPeerBase[q] + fifoOff(comm, base + r), mine + headOff(base + q), comm, q);
      setConn(recv, mine + fifoOff(comm, base + q), comm->devPeerBase[q] + headOff(base + r), comm, q);
    }
  }
  int e = acuMalloc((void**)&comm->devConns, comm->nDevConns * sizeof(*t));
  if (e == 0) e = acuMemcpyHtoD(comm->devConns, t, comm->nDevConns * sizeof(*t));
  if (e != 0) {
    WARN("cuda backend: cannot set up the connection table: %s (%d)", acuErrorString(e), e);
    res = ncclUnhandledCudaError;
    goto out;
  }
  if (netCount > 0) {
    res = anycclNetStart(comm, ends, netCount, 1);
    if (res != ncclSuccess) goto out;
  }
out:
  free(t);
  free(ends);
  return res;
}

ncclResult_t anycclCudaSetup(struct ncclComm* comm) {
  int n = comm->nRanks, r = comm->rank;
  comm->cuda = 1;
  int k = (int)anycclParamInt(PARAM_CUDA_P2P_CHANNELS);
  comm->p2pChannels = k < 1 ? 1 : k > ANYCCL_MAX_CHANNELS ? ANYCCL_MAX_CHANNELS : k;
  comm->llThreshold = (size_t)anycclParamInt(PARAM_CUDA_LL_THRESHOLD);
  comm->sliceBytes = (size_t)anycclParamInt(PARAM_CUDA_SLICE);
  if (comm->sliceBytes < 4096 || comm->sliceBytes > comm->slotBytes) comm->sliceBytes = comm->slotBytes;
  comm->p2pSliceBytes = (size_t)anycclParamInt(PARAM_CUDA_P2P_SLICE);
  if (comm->p2pSliceBytes < 4096 || comm->p2pSliceBytes > comm->slotBytes) comm->p2pSliceBytes = comm->slotBytes;
  const char* proto = anycclParamStr(PARAM_PROTO);
  if (proto && strcasecmp(proto, "LL") == 0) comm->llThreshold = (size_t)-1;
  else if (proto && strcasecmp(proto, "Simple") == 0) comm->llThreshold = 0;
  else if (proto && r == 0) WARN("NCCL_PROTO=%s: unknown here (Simple, LL); choosing by size", proto);
  if (comm->nHosts > 1) {
    int cap = (int)anycclParamInt(PARAM_CUDA_NET_CHANNELS);
    if (cap < 1) cap = 1;
    if (comm->p2pChannels > cap) comm->p2pChannels = cap; /* ring channels: capped before the rings (init.c) */
    if (proto && strcasecmp(proto, "LL") == 0 && r == 0)
      WARN("NCCL_PROTO=LL: the communicator spans %d hosts; the network proxy moves whole slots, so it runs Simple",
           comm->nHosts);
    comm->llThreshold = 0;
  }
  const char* fence = anycclParamStr(PARAM_CUDA_FENCE);
  if (fence && strcasecmp(fence, "sc") == 0) comm->cuFlags |= ACU_FLAG_FENCE_SC;
  else if (fence && strcasecmp(fence, "acq_rel") != 0 && r == 0)
    WARN("ANYCCL_CUDA_FENCE=%s: unknown (acq_rel, sc); using acq_rel", fence);
  comm->devSegSize = fifoOff(comm, nFifos(comm));
  ACUCHECK(acuMalloc((void**)&comm->devSeg, comm->devSegSize));
  ACUCHECK(acuMemsetD(comm->devSeg, 0, comm->devSegSize));
  int nscratch = comm->nChannels > comm->p2pChannels ? comm->nChannels : comm->p2pChannels;
  ACUCHECK(acuMalloc((void**)&comm->devScratch, (size_t)nscratch * comm->slotBytes));
  void* sharedDev = NULL;
  ACUCHECK(acuHostAllocMapped((void**)&comm->cuShared, &sharedDev, sizeof(struct acuShared)));
  comm->cuSharedDev = sharedDev;
  const char* tpath = anycclParamStr(PARAM_CUDA_TIMELINE);
  if ((tpath && tpath[0]) || comm->trace) { /* ANYCCL_TRACE is made from the timeline */
    int64_t cap = anycclParamInt(PARAM_CUDA_TIMELINE_RECORDS);
    if (cap < 1) cap = 1;
    void* dev = NULL;
    size_t bytes = sizeof(struct acuTimeline) + (size_t)cap * sizeof(struct acuTimeRec);
    ACUCHECK(acuHostAllocMapped((void**)&comm->cuTimeline, &dev, bytes));
    memset(comm->cuTimeline, 0, sizeof(struct acuTimeline));
    comm->cuTimeline->cap = (unsigned long long)cap;
    comm->cuTimelineDev = dev;
  }
  struct anycclPeerInfo* me = &comm->peerInfo[r];
  me->devSeg = comm->devSeg;
  me->devSegSize = comm->devSegSize;
  ACUCHECK(acuIpcGetMemHandle(&me->devIpc, comm->devSeg));
  NCCLCHECK(anycclPeerInfoExchange(comm));
  comm->nvlinkAll = anycclCudaNvlinkAll(comm);
  if (r == 0)
    INFO(NCCL_INIT, "cuda backend: NVLink between all %d GPUs: %s (LL128 lines for the two-shot kernels: %s)", n,
         comm->nvlinkAll ? "yes" : "no", anycclCudaSymmLL128(comm) ? "on" : "off");

  ANYCCL_CALLOC(comm->devPeerBase, n);
  ANYCCL_CALLOC(comm->devPeerIpc, n);
  ANYCCL_CALLOC(comm->p2pSend, n);
  ANYCCL_CALLOC(comm->p2pRecv, n);
  int* remote;
  ANYCCL_CALLOC(remote, n);
  ncclResult_t res = mapPeers(comm, remote);
  if (res == ncclSuccess) res = connTable(comm, remote);
  free(remote);
  NCCLCHECK(res);
  /* Nobody writes into a peer's segment before every rank has mapped it. */
  NCCLCHECK(bootstrapBarrier(comm->bootstrap, 0x7302));
  INFO(NCCL_INIT, "cuda backend: %d ring channels, %d p2p channels, %d slots of %zu bytes per connection, segment %zu MB, "
       "%d network connections (%zu MB pinned)", comm->nChannels, comm->p2pChannels, comm->nslots, comm->slotBytes,
       comm->devSegSize >> 20, comm->cuNetCount, ((size_t)comm->cuNetCount * netFifoBytes(comm)) >> 20);
  ANYCCL_CALLOC(comm->blob, ACU_BLOB_LARGE); /* phase encoding, reused by every launch */
  ACUCHECK(acuEventCreateWithFlags(&comm->cuOrderEvent, 0x2 /* cudaEventDisableTiming */));
  ACUCHECK(acuStreamCreateNonBlocking(&comm->cuMbxStream));
  ACUCHECK(acuEventCreateWithFlags(&comm->cuMbxEvent, 0x2 /* cudaEventDisableTiming */));
  if (acuLaunchP2p) { /* cuda_p2p.c: a group's LL messages beside its FIFO ones */
    ACUCHECK(acuStreamCreateNonBlocking(&comm->cuP2pStream));
    ACUCHECK(acuEventCreateWithFlags(&comm->cuP2pFork, 0x2));
    ACUCHECK(acuEventCreateWithFlags(&comm->cuP2pJoin, 0x2));
  }
  return ncclSuccess;
}

/* The timeline as text, one record per line: seq lane step what t_ns
 * (what: 0 lane start, 1 step's wait done, 2 step posted, 3 lane end). */
static void timelineWrite(struct ncclComm* comm) {
  const struct acuTimeline* tl = comm->cuTimeline;
  _Static_assert(sizeof(struct acuTimeRec) == sizeof(struct anycclTraceTl), "trace.h's copy of acuTimeRec");
  if (comm->trace) {
    unsigned long long n = tl->next < tl->cap ? tl->next : tl->cap;
    anycclTraceFromTimeline(comm->trace, (const struct anycclTraceTl*)(tl + 1), (size_t)n);
  }
  const char* tpath = anycclParamStr(PARAM_CUDA_TIMELINE);
  if (tpath == NULL || tpath[0] == '\0') return; /* the timeline was only for ANYCCL_TRACE */
  char path[4096];
  snprintf(path, sizeof(path), "%s.%d", anycclParamStr(PARAM_CUDA_TIMELINE), comm->rank);
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    WARN("ANYCCL_CUDA_TIMELINE: cannot write %s; is its directory there and writable?", path);
    return;
  }
  unsigned long long n = tl->next < tl->cap ? tl->next : tl->cap;
  const struct acuTimeRec* r = (const struct acuTimeRec*)(tl + 1);
  fprintf(f, "# rank %d: %llu records, %llu dropped (ANYCCL_CUDA_TIMELINE_RECORDS)\n", comm->rank, n, tl->next - n);
  for (unsigned long long i = 0; i < n; i++)
    fprintf(f, "%u %u %u %u %llu\n", r[i].seq, r[i].lane, r[i].step, r[i].what, (unsigned long long)r[i].t);
  fclose(f);
}

/* Ranks of one process write into each other's segments through peer
 * access: a segment freed while a peer's kernel still runs (it stops at its
 * next wait on abort or poison) would fault that kernel, and its context
 * with it. Such segments are freed when the last rank of the communicator in
 * this process frees its own (kernels of the ranks that freed before have
 * finished: each synchronised its device first). */
struct segGroup {
  const void* key; /* the segment of the lowest rank of this process */
  int left;        /* ranks of this process yet to free */
  int n;
  void** segs;
  int* devs;
  struct segGroup* next;
};
static pthread_mutex_t segLock = PTHREAD_MUTEX_INITIALIZER;
static struct segGroup* segGroups;

static void segRelease(struct ncclComm* comm) {
  const struct anycclPeerInfo* me = &comm->peerInfo[comm->rank];
  const void* key = NULL;
  int local = 0;
  for (int q = 0; q < comm->nRanks; q++) {
    const struct anycclPeerInfo* p = &comm->peerInfo[q];
    if (p->hostHash != me->hostHash || p->processToken != me->processToken) continue;
    if (local++ == 0) key = q == comm->rank ? (const void*)comm->devSeg : p->devSeg;
  }
  struct segGroup* g = NULL;
  if (local > 1) {
    pthread_mutex_lock(&segLock);
    for (g = segGroups; g && g->key != key; g = g->next) {
    }
    if (g == NULL && (g = calloc(1, sizeof(*g))) != NULL) {
      g->segs = calloc(local, sizeof(void*));
      g->devs = calloc(local, sizeof(int));
      if (g->segs == NULL || g->devs == NULL) {
        free(g->segs);
        free(g->devs);
        free(g);
        g = NULL;
      } else {
        g->key = key;
        g->left = local;
        g->next = segGroups;
        segGroups = g;
      }
    }
    if (g && g->n < local) {
      g->segs[g->n] = comm->devSeg;
      g->devs[g->n++] = comm->cudaDev;
      if (--g->left > 0) {
        pthread_mutex_unlock(&segLock);
        return;
      }
      for (struct segGroup** pp = &segGroups; *pp; pp = &(*pp)->next)
        if (*pp == g) {
          *pp = g->next;
          break;
        }
    }
    pthread_mutex_unlock(&segLock);
  }
  if (g == NULL) { /* alone in this process (or out of memory: free now) */
    acuFree(comm->devSeg);
    return;
  }
  for (int i = 0; i < g->n; i++) {
    acuSetDevice(g->devs[i]);
    acuFree(g->segs[i]);
  }
  acuSetDevice(comm->cudaDev);
  free(g->segs);
  free(g->devs);
  free(g);
}

void anycclCudaFree(struct ncclComm* comm) {
  if (!comm->cuda) return;
  int saved = -1;
  acuGetDevice(&saved);
  acuSetDevice(comm->cudaDev);
  acuDeviceSynchronize(); /* kernels still using the segments (bounded: they watch abort) */
  /* a kernel error nobody asked for yet (destroy without ncclCommGetAsyncError): its WARN,
   * and the communicator in error, so that the drain below does not wait for stopped peers */
  if (comm->cuShared && comm->cuShared->err != ACU_ERR_NONE) anycclCommSetError(comm, anycclCudaAsyncError(comm));
  anycclNetFree(comm);    /* sends the kernels posted leave first; then the proxy stops */
  if (comm->cuNetStaging) acuFreeHost(comm->cuNetStaging);
  free(comm->cuNetConns);
  comm->cuNetStaging = NULL;
  comm->cuNetConns = NULL;
  comm->cuNetCount = 0;
  anycclDevFreeAll(comm); /* device API windows and communicators */
  if (comm->devPeerBase)
    for (int q = 0; q < comm->nRanks; q++)
      if (comm->devPeerIpc[q] && comm->devPeerBase[q]) acuIpcCloseMemHandle(comm->devPeerBase[q]);
  free(comm->devPeerBase);
  free(comm->devPeerIpc);
  comm->devPeerBase = NULL;
  comm->devPeerIpc = NULL;
  if (comm->devConns) acuFree(comm->devConns);
  if (comm->devScratch) acuFree(comm->devScratch);
  if (comm->devSeg) segRelease(comm);
  anycclCudaSymmMapsFree(comm);
  if (comm->cuShared) acuFreeHost(comm->cuShared);
  if (comm->cuTimeline) {
    timelineWrite(comm);
    acuFreeHost(comm->cuTimeline);
    comm->cuTimeline = comm->cuTimelineDev = NULL;
  }
  if (comm->cuOrderEvent) acuEventDestroy(comm->cuOrderEvent);
  comm->cuOrderEvent = NULL;
  if (comm->cuMbxEvent) acuEventDestroy(comm->cuMbxEvent);
  if (comm->cuMbxStream) acuStreamDestroy(comm->cuMbxStream);
  comm->cuMbxEvent = comm->cuMbxStream = NULL;
  if (comm->cuP2pFork) acuEventDestroy(comm->cuP2pFork);
  if (comm->cuP2pJoin) acuEventDestroy(comm->cuP2pJoin);
  if (comm->cuP2pStream) acuStreamDestroy(comm->cuP2pStream);
  comm->cuP2pFork = comm->cuP2pJoin = comm->cuP2pStream = NULL;
  comm->devConns = NULL;
  comm->devScratch = comm->devSeg = NULL;
  comm->cuShared = NULL;
  free(comm->p2pSend);
  free(comm->p2pRecv);
  comm->p2pSend = comm->p2pRecv = NULL;
  free(comm->blob);
  free(comm->encoder);
  comm->blob = NULL;
  comm->encoder = NULL;
  if (saved >= 0) acuSetDevice(saved);
}

void anycclCudaAbort(struct ncclComm* comm) {
  if (comm->cuda && comm->cuShared) comm->cuShared->abort = 1;
}

/* Around copies on the mailbox stream from any thread: the communicator's
 * device current, and relaxed capture mode, so that they never disturb a
 * graph capture of another thread (PyTorch's watchdog polls from its own). */
struct mbxScope {
  int mode, saved;
  void* ctx;    /* the thread's context before (NULL: none) */
  int ctxKnown; /* ctx was read */
};
static struct mbxScope mbxEnter(const struct ncclComm* comm) {
  struct mbxScope sc = {acuCaptureModeExchange(2 /* cudaStreamCaptureModeRelaxed */), -1, NULL, 0};
  /* a thread with no context (not ours: PyTorch's watchdog) gets none back */
  sc.ctxKnown = acuCtxGet && acuCtxGet(&sc.ctx) == 0;
  acuGetDevice(&sc.saved);
  if (sc.saved != comm->cudaDev || (sc.ctxKnown && sc.ctx == NULL)) acuSetDevice(comm->cudaDev);
  return sc;
}
static void mbxLeave(const struct ncclComm* comm, struct mbxScope sc) {
  if (sc.ctxKnown && sc.ctx == NULL) acuCtxSet(NULL);
  else if (sc.saved >= 0 && sc.saved != comm->cudaDev) acuSetDevice(sc.saved);
  acuCaptureModeExchange(sc.mode);
}

/* A peer's kernel poisoned this rank's mailbox (its own kernels may have
 * finished before the mismatch was found): an async copy of the word into
 * cuShared->mailbox on a private stream, at most one a millisecond and one at
 * a time, read once it completed. Only from a thread that is on the
 * communicator's device with a context already (the application's): a
 * thread that is not (PyTorch's watchdog calls ncclCommGetAsyncError) would
 * make CUDA calls that can wait on the driver for hundreds of ms while it
 * holds locks the next collective's caller needs (a 199 ms and a 1.2 s call
 * were measured, stalling eager all-reduces). Such a rank still learns of
 * the poison from its next collective's kernels, which watch the mailboxes. */
static int onCommDevice(const struct ncclComm* comm) {
  int dev = -1;
  void* ctx = NULL;
  if (acuGetDevice(&dev) != 0 || dev != comm->cudaDev) return 0;
  return !(acuCtxGet && acuCtxGet(&ctx) == 0 && ctx == NULL);
}
static void mailboxPoll(struct ncclComm* comm) {
  uint32_t no = 0;
  if (comm->cuMbxStream == NULL || comm->devSeg == NULL || !onCommDevice(comm) ||
      !__atomic_compare_exchange_n(&comm->cuMbxBusy, &no, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  if (comm->cuMbxPending && acuEventQuery(comm->cuMbxEvent) == 0) {
    comm->cuMbxPending = 0;
    uint64_t v = comm->cuShared->mailbox;
    if ((v & ACU_POISON) && comm->cuShared->err == ACU_ERR_NONE) {
      comm->cuShared->errPeer = (int32_t)(uint32_t)v;
      __atomic_store_n(&comm->cuShared->err, ACU_ERR_POISONED, __ATOMIC_RELEASE);
    }
  }
  double t = anycclNowSec();
  if (!comm->cuMbxPending && t - comm->cuMbxLast >= 1e-3) {
    struct mbxScope sc = mbxEnter(comm);
    if (acuMemcpyAsync((void*)&comm->cuShared->mailbox, comm->devSeg + mailboxOff(comm), sizeof(uint64_t),
                       comm->cuMbxStream) == 0 &&
        acuEventRecord(comm->cuMbxEvent, comm->cuMbxStream) == 0)
      comm->cuMbxPending = 1;
    mbxLeave(comm, sc);
    comm->cuMbxLast = t;
  }
  __atomic_store_n(&comm->cuMbxBusy, 0, __ATOMIC_RELEASE);
}

/* This rank stopped on a mismatch: a 0-byte slot tagged ANYCCL_TAG_POISON on
 * every network send end with a free slot (its kernels have stopped or stop
 * at their next wait), so that remote peers whose kernels had finished learn
 * it from their proxies. The report must leave before the user aborts (an
 * abort drops unsent slots): wait up to 1 s for the proxy to send it. */
static void poisonNetSends(struct ncclComm* comm) {
  int posted = 0;
  for (int i = 0; i < comm->cuNetCount; i++) {
    struct anycclConn* c = &comm->cuNetConns[i];
    uint64_t tail = __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE);
    if (c->net != 2 || tail - __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) >= (uint64_t)c->nslots) continue;
    c->ctrl->sizes[tail % c->nslots] = anycclSizeWord(0, ANYCCL_TAG_POISON);
    __atomic_store_n(&c->ctrl->tail, tail + 1, __ATOMIC_RELEASE);
    posted = 1;
  }
  if (posted) anycclNetKick(comm);
  for (double end = anycclNowSec() + 1; posted && anycclNowSec() < end;) {
    posted = 0;
    for (int i = 0; i < comm->cuNetCount; i++) {
      struct anycclConn* c = &comm->cuNetConns[i];
      if (c->net == 2 && __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) < __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE))
        posted = 1;
    }
    if (posted) usleep(500);
  }
}

/* This rank learnt of a mismatch: ACU_POISON | finder into the mailbox of
 * every same-host peer (async copies on the mailbox stream, never waited
 * for), so that ranks whose kernels never met the mismatch (not involved in
 * it, or finished) learn it when they poll theirs. */
static void poisonLocalPeers(struct ncclComm* comm, int finder) {
  if (comm->cuMbxStream == NULL || comm->devPeerBase == NULL) return;
  comm->cuShared->poisonOut = ACU_POISON | (uint32_t)finder;
  struct mbxScope sc = mbxEnter(comm);
  for (int q = 0; q < comm->nRanks; q++)
    if (q != comm->rank && comm->devPeerBase[q])
      acuMemcpyAsync(comm->devPeerBase[q] + mailboxOff(comm), (const void*)&comm->cuShared->poisonOut,
                     sizeof(uint64_t), comm->cuMbxStream);
  mbxLeave(comm, sc);
}

/* An error a kernel reported, as an ncclResult_t (ncclSuccess if none). */
ncclResult_t anycclCudaAsyncError(struct ncclComm* comm) {
  if (!comm->cuda || comm->cuShared == NULL) return ncclSuccess;
  if (comm->cuShared->err == ACU_ERR_NONE) mailboxPoll(comm);
  uint32_t err = comm->cuShared->err;
  if (err == ACU_ERR_NONE) return ncclSuccess;
  const int mismatch = err == ACU_ERR_SIZE || err == ACU_ERR_MISMATCH || err == ACU_ERR_POISONED;
  if (!comm->cuErrReported) {
    comm->cuErrReported = 1;
    /* one mismatch WARN per rank: a remote peer's report (proxy) may have printed it */
    uint32_t no = 0;
    int warn = !mismatch || __atomic_compare_exchange_n(&comm->mismatchWarned, &no, 1, 0, __ATOMIC_ACQ_REL,
                                                         __ATOMIC_ACQUIRE);
    int peer = comm->cuShared->errPeer;
    if (mismatch) poisonLocalPeers(comm, err == ACU_ERR_POISONED ? peer : comm->rank);
    if (mismatch && warn) poisonNetSends(comm); /* not when a remote report came first: they know */
    if (!warn)
      ;
    else if (err == ACU_ERR_SIZE)
      WARN("rank %d expected %llu bytes from rank %d but got %llu: ranks %d and %d called the operation differently "
           "(count, datatype, reduction op or root, or send/recv sizes); the communicator is in error (ncclCommAbort it)",
           comm->rank, (unsigned long long)comm->cuShared->expected, peer, (unsigned long long)comm->cuShared->got,
           comm->rank, peer);
    else if (err == ACU_ERR_MISMATCH)
      WARN("rank %d received data of another operation from rank %d: ranks %d and %d called the operation "
           "differently (count, datatype, reduction op or root, send/recv sizes, or an earlier call); the "
           "communicator is in error (ncclCommAbort it)", comm->rank, peer, comm->rank, peer);
    else if (err == ACU_ERR_POISONED)
      WARN("rank %d: rank %d reported that ranks called the operation differently (see its WARN); the "
           "communicator is in error (ncclCommAbort it)", comm->rank, peer);
    else if (err == ANYCCL_DEV_ERR_TIMEOUT)
      WARN("rank %d: a device API wait (barrier, signal, counter or LL line) gave up after %lld s (ANYCCL_DEV_TIMEOUT, "
           "by default ANYCCL_OP_TIMEOUT): a peer did not reach the same barrier or send what was awaited", comm->rank,
           (long long)anycclTimeoutSec(PARAM_DEV_TIMEOUT));
    else if (err == ANYCCL_DEV_ERR_UNREACHABLE)
      WARN("rank %d: a kernel used the device API beyond what this build supports (a peer outside the LSA team, "
           "multicast, a barrier index past the requested count, or a signal/counter id past the requested count); "
           "the operation was dropped", comm->rank);
    else if (comm->cuShared->errPeer >= 0)
      WARN("rank %d made no progress for %lld s waiting for rank %d (ANYCCL_OP_TIMEOUT): a peer is gone or did not "
           "call the same operation", comm->rank, (long long)comm->opTimeoutSec, comm->cuShared->errPeer);
    else /* an LL wait: the line's sender is not tracked */
      WARN("rank %d made no progress for %lld s waiting for a peer's data (ANYCCL_OP_TIMEOUT): a peer is gone or "
           "did not call the same operation", comm->rank, (long long)comm->opTimeoutSec);
  }
  return mismatch || err == ANYCCL_DEV_ERR_UNREACHABLE ? ncclInvalidUsage : ncclSystemError;
}

void anycclCudaPoisoned(struct ncclComm* comm, int peer) {
  if (!comm->cuda || comm->cuShared == NULL || comm->cuShared->err != ACU_ERR_NONE) return;
  comm->cuShared->errPeer = peer;
  __atomic_store_n(&comm->cuShared->err, ACU_ERR_POISONED, __ATOMIC_RELEASE);
}

/* The 8-bit collective-number field of a tag: 1-255 (0: a send/recv phase,
 * which has no number). */
static uint32_t numField(uint32_t collSeq) { return collSeq ? (collSeq - 1) % 255 + 1 : 0; }

uint32_t anycclCudaPhaseTag(const struct ncclComm* comm, const struct anycclPhase* ph) {
  if (ph->func == FUNC_SEND) return ACU_TAG_COLL;
  const uint32_t h = (uint32_t)anycclSigHash(comm, ph);
  return ACU_TAG_COLL | numField(comm->cuCurCollSeq) << 22 | (h & 0x3fffffu);
}

void anycclCudaSlotTag(struct ncclComm* comm, int peer, uint32_t tag) {
  struct acuShared* sh = comm->cuShared;
  if (!comm->cuda || sh == NULL || sh->err != ACU_ERR_NONE) return;
  if ((tag & 0xC0000000u) == ACU_TAG_COLL && (tag >> 22 & 0xffu) != 0) { /* kept until the GPU reaches its number */
    comm->cuPendTag = tag;
    comm->cuPendPeer = peer;
  }
  tag = comm->cuPendTag;
  const uint64_t w = sh->opWord; /* written only by kernels of numbered collectives */
  if (tag == 0 || w == 0 || (tag >> 22 & 0xffu) != numField((uint32_t)(w >> 32))) return;
  comm->cuPendTag = 0;
  if ((uint32_t)w == tag) return;
  sh->expected = (uint32_t)w;
  sh->got = tag;
  sh->errPeer = comm->cuPendPeer;
  __atomic_store_n(&sh->err, ACU_ERR_MISMATCH, __ATOMIC_RELEASE);
}

/* The next collective number, for phase ph about to be encoded (its tag and
 * op word carry it). Every collective phase gets its own: ranks agree on
 * them because every rank runs the same collective phases in the same order
 * (a group's collectives are called in one order, as in NCCL), whatever
 * send/recv phases each rank's plan also holds; those get 0, unnumbered.
 * One number per plan instead would be wrong: ranks run a plan's phases as
 * separate kernels, and a rank in a later phase of the plan would see a peer
 * still in an earlier one "start this collective with another tag". */
void anycclCudaNumberPhase(struct ncclComm* comm, const struct anycclPhase* ph) {
  if (ph->func == FUNC_SEND) {
    comm->cuCurCollSeq = 0;
    return;
  }
  if (++comm->cuCollSeq == 0) comm->cuCollSeq = 1;
  comm->cuCurCollSeq = comm->cuCollSeq;
}

/* ---- plan launch --------------------------------------------------------------- */
static size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }
_Static_assert(sizeof(struct acuPhase) % 8 == 0, "the lanes after the header hold 64-bit fields");


/* One GPU lane: a plan lane, or the k-th cut of one. */
struct gpuLane {
  const struct anycclLane* l;
  int k;                  /* p2p channel */
  int cuts;               /* SEND/RECV: how many ways the ops are cut */
  uint64_t begin, end;    /* STEPS: element range */
};

#define P2P_CUT_MIN (64 << 10)      /* p2p ops from this size are cut over the p2p channels */
#define DIRECT_CUT_BYTES (4 << 10)  /* a direct lane takes one more block per this many bytes */

static int isP2pLane(const struct ncclComm* comm, const struct anycclLane* l) {
  for (int c = 0; c < ANYCCL_MAX_LANE_CONNS; c++)
    if (l->conns[c] && connIndex(comm, l->conns[c]) >= 2 * ANYCCL_MAX_CHANNELS) return 1;
  return 0;
}

/* How many cuts a p2p op of `bytes` takes. A function of the size alone:
 * the sender's and the receiver's lanes must cut it the same way. Measured
 * on 4 x H200 (sendrecv and all-to-all, 64 KB - 512 MB): many small cuts
 * pay per-block latency, and an all-to-all with every op cut 32 ways needs
 * 193 blocks (a second wave on 132 SMs) and the 32 KB parameter blob: 8
 * cuts up to 4 MB, then one per 512 KB. (Capping the cuts so that an
 * all-to-all always fits the SMs, 21 at 4 ranks, took all-to-all at 32 MB
 * from 178 to 230 GB/s but sendrecv at 256-512 MB from 348-359 to 309-332:
 * a cap would have to be a function of the op alone, like the count.) */
int anycclP2pCuts(const struct ncclComm* comm, uint64_t bytes) {
  int K = comm->p2pChannels;
  if (bytes < P2P_CUT_MIN) return 1;
  int64_t per = anycclParamInt(PARAM_CUDA_P2P_CUT_BYTES), least = anycclParamInt(PARAM_CUDA_P2P_CUTS_MIN);
  if (per < 4096) per = 4096;
  if (least < 1) least = 1;
  uint64_t c = (bytes + (uint64_t)per - 1) / (uint64_t)per;
  if (c < (uint64_t)least) c = (uint64_t)least;
  return c > (uint64_t)K ? K : (int)c;
}

/* How many blocks a direct (one-shot) lane of `bytes` runs: one more per
 * DIRECT_CUT_BYTES, at most the p2p channels. */
int anycclDirectCuts(const struct ncclComm* comm, uint64_t bytes) {
  uint64_t c = bytes / DIRECT_CUT_BYTES + 1;
  return c > (uint64_t)comm->p2pChannels ? comm->p2pChannels : (int)c;
}

/* Byte range of op piece k of `cuts` (64-byte aligned pieces). */
static void opPiece(uint64_t bytes, int k, int cuts, uint64_t* off, uint64_t* len) {
  if (cuts == 1 || bytes < P2P_CUT_MIN) {
    *off = 0;
    *len = k == 0 ? bytes : 0;
    return;
  }
  uint64_t part = ((bytes + cuts - 1) / cuts + 63) & ~(uint64_t)63;
  uint64_t b = part * k < bytes ? part * k : bytes;
  uint64_t e = b + part < bytes ? b + part : bytes;
  *off = b;
  *len = e - b;
}

/* Cut the plan's lanes into GPU lanes, lane by lane; returns how many (-1
 * on overflow). A lane with nothing to move (all its ops empty) gets none. */
static int cutLanesByLane(const struct ncclComm* comm, const struct anycclPhase* ph, struct gpuLane* out, int cap) {
  int n = 0;
  for (int i = 0; i < ph->nlanes; i++) {
    const struct anycclLane* l = &ph->lanes[i];
    if (l->kind == LANE_STEPS && isP2pLane(comm, l) && l->end > l->begin) {
      uint64_t elems = l->end - l->begin;
      uint64_t cuts = (uint64_t)anycclDirectCuts(comm, elems * ph->elemSize);
      uint64_t align = ph->elemSize >= 16 ? 1 : 16 / ph->elemSize;
      uint64_t part = ((elems + cuts - 1) / cuts + align - 1) / align * align;
      for (uint64_t k = 0; k < cuts; k++) {
        uint64_t b = l->begin + k * part, e = b + part;
        if (b >= l->end) break;
        if (n == cap) return -1;
        out[n++] = (struct gpuLane){l, (int)k, 1, b, e < l->end ? e : l->end};
      }
    } else if (l->kind == LANE_P2P_SEND || l->kind == LANE_P2P_RECV || l->kind == LANE_COPY) {
      int cuts = 1;
      for (int j = 0; j < l->nops; j++) {
        int c = anycclP2pCuts(comm, l->ops[j].bytes);
        if (c > cuts) cuts = c;
      }
      for (int k = 0; k < cuts; k++) {
        int any = 0;
        for (int j = 0; j < l->nops && !any; j++) {
          uint64_t off, len;
          opPiece(l->ops[j].bytes, k, cuts, &off, &len);
          any = len > 0;
        }
        if (!any) continue;
        if (n == cap) return -1;
        out[n++] = (struct gpuLane){l, k, cuts, 0, 0};
      }
    } else {
      if (n == cap) return -1;
      out[n++] = (struct gpuLane){l, 0, 1, l->begin, l->end};
    }
  }
  return n;
}

/* The GPU lanes in cut-major order: every lane's cut 0, then every lane's
 * cut 1, ... (one block per GPU lane, scheduled in this order). A phase of
 * many cut lanes needs more blocks than the GPU has SMs (all-to-all at 4
 * ranks: 7 lanes x 32 cuts), so only the first blocks run at first. Lane by
 * lane, those were all of a rank's sends to its first peers while the
 * peers' matching receives came last in theirs: with more ranks (or
 * ANYCCL_CUDA_P2P_CHANNELS) every resident block could wait for one that is
 * not. Cut-major, the rank running the fewest cuts at once finds every
 * partner of its blocks running (cut k pairs with cut k), so it always
 * progresses. Within a plan lane the cuts keep their order. */
static int cutLanes(const struct ncclComm* comm, const struct anycclPhase* ph, struct gpuLane* tmp,
                    struct gpuLane* out, int cap) {
  int n = cutLanesByLane(comm, ph, tmp, cap);
  if (n < 0) return n;
  int maxk = 0, m = 0;
  for (int i = 0; i < n; i++)
    if (tmp[i].k > maxk) maxk = tmp[i].k;
  for (int k = 0; k <= maxk; k++)
    for (int i = 0; i < n; i++)
      if (tmp[i].k == k) out[m++] = tmp[i];
  return m;
}

/* Phase encoding state: the arrays of a blob, filled lane by lane, then laid
 * out (steps and shapes are shared between lanes, so their counts are known
 * only at the end). Every array is bounded by the large blob's size. */
#define ENC_MAX_LANES 1024
struct encoder {
  struct acuLaneWire lanes[ENC_MAX_LANES];
  struct acuShape shapes[256];
  struct acuStep steps[ACU_BLOB_LARGE / sizeof(struct acuStep)];
  uint16_t conns[ACU_BLOB_LARGE / sizeof(uint16_t)];
  struct acuOp ops[ACU_BLOB_LARGE / sizeof(struct acuOp)];
  struct gpuLane gl[ENC_MAX_LANES];
  struct gpuLane byLane[ENC_MAX_LANES]; /* cutLanes' first pass */
  int nlanes, nshapes, nsteps, nconns, nops;
};

static int addShape(struct encoder* e, const struct acuShape* sh) {
  for (int i = 0; i < e->nshapes; i++)
    if (memcmp(&e->shapes[i], sh, sizeof(*sh)) == 0) return i;
  if (e->nshapes == 256) return -1;
  e->shapes[e->nshapes] = *sh;
  return e->nshapes++;
}

/* Index of the lane's step sequence in the blob: an earlier lane's when
 * the same (rings of one shape share their programs), else appended. */
static int addSteps(struct encoder* e, const struct anycclLane* l) {
  struct acuStep tmp[256];
  int n = l->nsteps;
  if (n > 256) return -1;
  for (int s = 0; s < n; s++) {
    const struct anycclStep* st = &l->steps[s];
    tmp[s] = (struct acuStep){st->recv, st->send, st->in0, st->in1, st->out, 0, st->chunk, st->inChunk, st->outChunk};
  }
  for (int i = 0; i < e->nlanes; i++) {
    const struct acuLaneWire* w = &e->lanes[i];
    if (w->kind == ACU_LANE_STEPS && w->nsteps == n && memcmp(&e->steps[w->stepOff], tmp, sizeof(tmp[0]) * n) == 0)
      return w->stepOff;
  }
  if (e->nsteps + n > (int)(sizeof(e->steps) / sizeof(e->steps[0]))) return -1;
  memcpy(&e->steps[e->nsteps], tmp, sizeof(tmp[0]) * n);
  e->nsteps += n;
  return e->nsteps - n;
}

static ncclResult_t encodePhase(struct ncclComm* comm, const struct anycclPhase* ph, unsigned char* buf,
                                size_t cap) {
  if (comm->encoder == NULL) ANYCCL_CALLOC(comm->encoder, 1); /* ~165 KB, kept for every later launch */
  struct encoder* e = comm->encoder;
  int nl = cutLanes(comm, ph, e->byLane, e->gl, ENC_MAX_LANES);
  if (nl < 0) {
    WARN("%s: more than %d GPU lanes in one phase", ph->what, ENC_MAX_LANES);
    return ncclInternalError;
  }
  e->nlanes = e->nshapes = e->nsteps = e->nconns = e->nops = 0;
  static const struct acuShape none;
  addShape(e, &none); /* shape 0: lanes without geometry (p2p, copies) */
  for (int i = 0; i < nl; i++) {
    const struct anycclLane* l = e->gl[i].l;
    int k = e->gl[i].k;
    struct acuLaneWire* d = &e->lanes[i];
    memset(d, 0, sizeof(*d));
    d->kind = l->kind == LANE_STEPS ? ACU_LANE_STEPS
              : l->kind == LANE_P2P_SEND ? ACU_LANE_SEND
              : l->kind == LANE_P2P_RECV ? ACU_LANE_RECV
                                         : ACU_LANE_COPY;
    if (l->kind == LANE_STEPS) {
      int nc = anycclLaneConns(l);
      int so = addSteps(e, l);
      if (so < 0 || e->nconns + nc > (int)(sizeof(e->conns) / sizeof(e->conns[0]))) goto overflow;
      d->nsteps = (uint8_t)l->nsteps;
      d->stepOff = (uint16_t)so;
      d->connOff = (uint16_t)e->nconns;
      uint64_t used = 0; /* a lane writes back the counters of the connections it lists: only its own */
      for (int j = 0; j < l->nsteps; j++) {
        if (l->steps[j].recv >= 0) used |= 1ull << l->steps[j].recv;
        if (l->steps[j].send >= 0) used |= 1ull << l->steps[j].send;
      }
      for (int c = 0; c < nc; c++) {
        int idx = l->conns[c] && (used >> c & 1) ? connIndex(comm, l->conns[c]) : -1;
        e->conns[e->nconns++] = idx < 0 ? 0xffff : (uint16_t)connSub(comm, idx, k);
      }
      struct acuShape sh = {l->lenTotal, l->lenStride, l->inStride, l->outStride, l->slice};
      if (sh.slice * ph->elemSize > comm->sliceBytes)
        sh.slice = comm->sliceBytes / ph->elemSize > 0 ? comm->sliceBytes / ph->elemSize : 1;
      /* Small messages: LL (a slot then carries half its size in payload). */
      d->ll = ph->count * ph->elemSize <= comm->llThreshold;
      if (d->ll && sh.slice * ph->elemSize > llSlotBytes(comm) / 2) sh.slice = llSlotBytes(comm) / 2 / ph->elemSize;
      int si = addShape(e, &sh);
      if (si < 0) goto overflow;
      d->shape = (uint8_t)si;
      d->begin = e->gl[i].begin;
      d->end = e->gl[i].end;
      if (l->scratch)
        d->scratch = (uint64_t)(uintptr_t)(comm->devScratch + (l->scratch - comm->scratch) + (size_t)k * comm->slotBytes);
    } else {
      if (e->nops + l->nops > (int)(sizeof(e->ops) / sizeof(e->ops[0]))) goto overflow;
      d->opOff = (uint16_t)e->nops;
      for (int j = 0; j < l->nops; j++) {
        uint64_t off = 0, len = l->ops[j].bytes;
        opPiece(l->ops[j].bytes, k, e->gl[i].cuts, &off, &len); /* a copy's source and destination alike */
        if (len == 0 && l->kind != LANE_COPY) continue;
        /* send/recv: the whole transfer's size, hashed, rides in bits 40-63 (cuda_exec.h) */
        uint64_t tag = l->kind == LANE_COPY ? 0 : anycclMix64(l->ops[j].bytes) >> 40;
        e->ops[e->nops++] = (struct acuOp){(uint64_t)(uintptr_t)l->ops[j].ptr + off, len | tag << 40};
      }
      d->nops = (uint16_t)(e->nops - d->opOff);
      if (l->kind != LANE_COPY) {
        uint64_t most = 0;
        for (int j = 0; j < l->nops; j++) most = l->ops[j].bytes > most ? l->ops[j].bytes : most;
        d->ll = most <= comm->llThreshold;
      }
      if (l->conn) {
        int idx = connIndex(comm, l->conn);
        if (idx < 0) {
          WARN("internal: %s lane %d has an unknown connection", ph->what, i);
          return ncclInternalError;
        }
        d->conn = (uint16_t)connSub(comm, idx, k);
      }
    }
    e->nlanes++;
  }
  size_t offLanes = sizeof(struct acuPhase);
  size_t offShapes = offLanes + sizeof(struct acuLaneWire) * nl;
  size_t offSteps = offShapes + sizeof(struct acuShape) * e->nshapes;
  size_t offConns = offSteps + pad8(sizeof(struct acuStep) * e->nsteps);
  size_t offOps = offConns + pad8(sizeof(uint16_t) * e->nconns);
  size_t total = offOps + sizeof(struct acuOp) * e->nops;
  if (total > cap) {
  overflow:
    WARN("%s: the phase does not fit a %zu-byte kernel parameter blob (%d lanes, %d steps, %d ops)", ph->what, cap,
         nl, e->nsteps, e->nops);
    return ncclInternalError;
  }
  struct acuPhase* h = (struct acuPhase*)buf;
  memset(h, 0, sizeof(*h));
  memcpy(buf + offLanes, e->lanes, sizeof(struct acuLaneWire) * nl);
  memcpy(buf + offShapes, e->shapes, sizeof(struct acuShape) * e->nshapes);
  memcpy(buf + offSteps, e->steps, sizeof(struct acuStep) * e->nsteps);
  memcpy(buf + offConns, e->conns, sizeof(uint16_t) * e->nconns);
  memcpy(buf + offOps, e->ops, sizeof(struct acuOp) * e->nops);
  h->in = (uint64_t)(uintptr_t)ph->in;
  h->out = (uint64_t)(uintptr_t)ph->out;
  h->scalar = ph->op.scalar;
  h->scalarPtr = (uint64_t)(uintptr_t)ph->scalarPtr;
  h->divisor = ph->op.divisor;
  h->conns = comm->devConns;
  h->shared = comm->cuSharedDev;
  h->timeline = comm->cuTimelineDev;
  h->seq = (uint32_t)comm->launches;
  h->sig = anycclCudaPhaseTag(comm, ph);
  h->opWord = (uint64_t*)(comm->devSeg + mailboxOff(comm) + sizeof(uint64_t));
  h->collSeq = comm->cuCurCollSeq;
  h->timeoutNs = comm->opTimeoutSec > 0 ? (uint64_t)comm->opTimeoutSec * 1000000000ull : 0;
  h->elemSize = (uint32_t)ph->elemSize;
  h->type = (uint8_t)ph->op.type;
  h->op = (uint8_t)ph->op.op;
  h->reduce = (uint8_t)ph->reduce;
  h->flags = (uint8_t)(comm->cuFlags | (comm->cuNetCount ? ACU_FLAG_HOST_OPWORD : 0));
  h->nlanes = (uint16_t)nl;
  h->nsteps = (uint16_t)e->nsteps;
  h->nconns = (uint16_t)e->nconns;
  h->nops = (uint16_t)e->nops;
  h->nshapes = (uint16_t)e->nshapes;
  h->bytes = (uint32_t)total;
  h->chunk = (uint32_t)comm->p2pSliceBytes;
  h->rank = comm->rank;
  return ncclSuccess;
}

/* The blob encodePhase makes, for the unit test of the format (tests/algo),
 * and which plan lane (and cut) each of its GPU lanes came from. */
ncclResult_t anycclCudaEncodeForTest(struct ncclComm* comm, const struct anycclPhase* ph, unsigned char* buf,
                                     size_t cap, int* planLane, int* cut) {
  NCCLCHECK(encodePhase(comm, ph, buf, cap));
  const struct acuPhase* h = (const struct acuPhase*)buf;
  for (int i = 0; i < h->nlanes; i++) {
    planLane[i] = (int)(comm->encoder->gl[i].l - ph->lanes);
    cut[i] = comm->encoder->gl[i].k;
  }
  return ncclSuccess;
}

/* A communicator's kernels share connections and step counters, so they
 * must run one after the other, as NCCL's do, even when the caller switches
 * streams. An event is recorded after every launch (on the launch stream, so
 * an old stream is never touched again); a launch on another stream first
 * waits for it. Captured launches are ordered by the graph instead: no event
 * is recorded while capturing, and a captured launch waits for none. */
static ncclResult_t orderBefore(struct ncclComm* comm, cudaStream_t stream, int* capturing) {
  *capturing = acuStreamIsCapturing((void*)stream);
  int e = 0;
  if (!*capturing && comm->cuEventValid && comm->cuLastStream != (void*)stream)
    e = acuStreamWaitEvent((void*)stream, comm->cuOrderEvent, 0);
  if (e != 0) {
    WARN("ordering the launch on stream %p after this communicator's last launch failed: %s (%d)", (void*)stream,
         acuErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}
static ncclResult_t orderAfter(struct ncclComm* comm, cudaStream_t stream, int capturing) {
  comm->cuLastStream = (void*)stream;
  comm->cuEventValid = 0;
  if (capturing) return ncclSuccess;
  int e = acuEventRecord(comm->cuOrderEvent, (void*)stream);
  if (e != 0) {
    WARN("recording the launch on stream %p failed: %s (%d)", (void*)stream, acuErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  comm->cuEventValid = 1;
  return ncclSuccess;
}

/* ANYCCL_TRACE: what each GPU lane of the phase just encoded does (trace.c
 * names the kernels' timeline records by it at destroy). */
static void traceLanes(struct ncclComm* comm, const struct anycclPhase* ph, int p) {
  const struct encoder* e = comm->encoder;
  int32_t peers[2 * 256];
  for (int i = 0; i < e->nlanes; i++) {
    const struct anycclLane* l = e->gl[i].l;
    struct anycclTraceGpuLane d = {.seq = (uint32_t)comm->launches, .phase = (uint16_t)p, .lane = (uint16_t)i,
                                   .func = (uint8_t)ph->func, .kind = (uint8_t)l->kind, .peer = -1,
                                   .bytes = (double)ph->count * ph->elemSize};
    if (l->kind == LANE_STEPS) {
      d.nsteps = (uint16_t)(l->nsteps > 256 ? 256 : l->nsteps);
      for (int j = 0; j < d.nsteps; j++) {
        const struct anycclStep* st = &l->steps[j];
        peers[2 * j] = st->send >= 0 && l->conns[st->send] ? l->conns[st->send]->peer : -1;
        peers[2 * j + 1] = st->recv >= 0 && l->conns[st->recv] ? l->conns[st->recv]->peer : -1;
      }
      double sb = (double)l->slice * ph->elemSize;
      d.stepBytes = sb < (double)comm->sliceBytes ? sb : (double)comm->sliceBytes;
    } else {
      d.peer = l->conn ? l->conn->peer : comm->rank;
      for (int j = 0; j < l->nops; j += l->kind == LANE_COPY ? 2 : 1) d.stepBytes += (double)l->ops[j].bytes;
    }
    anycclTraceGpuLaneAdd(comm->trace, &d, l->kind == LANE_STEPS ? peers : NULL);
  }
}

ncclResult_t anycclCudaLaunchPlan(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream) {
  int capturing = 0;
  anycclNetKick(comm); /* a proxy, if any, starts polling the FIFOs */
  uint64_t t0 = anycclProfNow();
  ncclResult_t res = orderBefore(comm, stream, &capturing);
  anycclProfAdd(PROF_ORDER, t0);
  unsigned char* buf = comm->blob;
  for (int p = 0; p < plan->nphases && res == ncclSuccess; p++) {
    const struct anycclPhase* ph = &plan->phases[p];
    anycclCudaNumberPhase(comm, ph); /* before any skip: every rank numbers every collective phase */
    if (ph->nlanes == 0 || anycclCudaSymm(comm, ph, stream, &res)) continue;
    /* send/recv: the small messages in the p2p LL kernel (cuda_p2p.c); the
     * rest, if any, here beside it, joined after */
    struct anycclPhase rest;
    const int split = ph->func == FUNC_SEND ? anycclCudaP2p(comm, ph, (void*)stream, &rest, &res) : 0;
    if (split == 1) continue;
    const struct anycclPhase* run = split == 2 ? &rest : ph;
    t0 = anycclProfNow();
    res = encodePhase(comm, run, buf, ACU_BLOB_LARGE);
    anycclProfAdd(PROF_ENCODE, t0);
    if (res == ncclSuccess && ((struct acuPhase*)buf)->nlanes > 0) {
      if (comm->trace) traceLanes(comm, run, p);
      t0 = anycclProfNow();
      int e = acuLaunchPhase((const struct acuPhase*)buf, (void*)stream);
      anycclProfAdd(PROF_KERNEL, t0);
      if (e != 0) {
        WARN("%s: kernel launch on stream %p failed: %s (%d); is the stream valid and on device %d?", ph->what,
             (void*)stream, acuErrorString(e), e, comm->cudaDev);
        res = ncclUnhandledCudaError;
      }
    }
    if (split == 2) {
      ncclResult_t j = anycclCudaP2pJoin(comm, (void*)stream, &rest);
      if (res == ncclSuccess) res = j;
    }
    if (res != ncclSuccess) break;
  }
  t0 = anycclProfNow();
  if (res == ncclSuccess) res = orderAfter(comm, stream, capturing);
  anycclProfAdd(PROF_ORDER, t0);
  plan->seq = comm->launches++;
  t0 = anycclProfNow();
  anycclPlanFree(plan);
  anycclProfAdd(PROF_FREE, t0);
  return res;
}

/* ---- the cuda executor as the core sees it (exec.h) ---------------------------- */
static ncclResult_t cudaExecSetup(struct ncclComm* comm) {
  comm->peerThreshold = (size_t)-1; /* single-copy phases are the cpu executor's */
  return anycclCudaSetup(comm);
}

static void cudaExecFree(struct ncclComm* comm) {
  if (comm->cuda) anycclCudaFree(comm);
  else anycclTransportFree(comm); /* a setup that failed before the device part */
}

static void cudaExecAbort(struct ncclComm* comm) {
  anycclCudaAbort(comm);
  if (comm->bell) anycclBellRing(comm->bell);
}

const struct anycclExec anycclExecCuda = {
    .name = "cuda",
    .setup = cudaExecSetup,
    .launch = anycclCudaLaunchPlan,
    .abort = cudaExecAbort,
    .asyncError = anycclCudaAsyncError,
    .free = cudaExecFree,
};
