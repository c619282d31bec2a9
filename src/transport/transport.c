/* Connection setup: one segment per rank holding its doorbell and its receive
 * FIFOs; each peer's segment is reached through the first transport that can
 * (P2P inside a process, SHM inside a host). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "param.h"
#include "net.h"
#include "transport.h"

static const struct anycclTransport* transports[] = {&anycclTransportP2p, &anycclTransportShm, &anycclTransportNet};

void anycclBellRing(struct anycclBell* b) {
  __atomic_add_fetch(&b->bell, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST))
    syscall(SYS_futex, &b->bell, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
  if (b->eventFd1) anycclNetNotify(b->eventFd1 - 1, &b->fdAsleep);
}

static size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Segment layout, identical on every rank for a given (nChannels, nRanks,
 * nslots, slotBytes): bell | ring FIFOs [nChannels] | p2p FIFOs [nRanks]. */
static size_t fifoBytes(int nslots, size_t slotBytes) {
  return alignUp(sizeof(struct anycclFifoCtrl), 4096) + alignUp((size_t)nslots * slotBytes, 4096);
}
static size_t fifoOffset(const struct ncclComm* comm, int index) {
  return 4096 + (size_t)index * fifoBytes(comm->nslots, comm->slotBytes);
}
static size_t segmentBytes(const struct ncclComm* comm) {
  return fifoOffset(comm, comm->nChannels + comm->nRanks);
}

void* anycclShmCreate(const char* name, size_t bytes, int* fd) {
  *fd = memfd_create(name, MFD_CLOEXEC);
  if (*fd < 0) return NULL;
  void* p = ftruncate(*fd, (off_t)bytes) == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0)
                                              : MAP_FAILED;
  if (p != MAP_FAILED) return p;
  int e = errno;
  close(*fd);
  *fd = -1;
  errno = e;
  return NULL;
}

int anycclShmMapPeer(int pid, int fd, size_t bytes, void** out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0) return ANYCCL_SHM_OPEN;
  struct stat st;
  if (fstat(f, &st) != 0 || (uint64_t)st.st_size < bytes) {
    close(f);
    return ANYCCL_SHM_SHORT;
  }
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  int e = errno;
  close(f);
  if (p == MAP_FAILED) {
    errno = e;
    return ANYCCL_SHM_MMAP;
  }
  *out = p;
  return 0;
}

static ncclResult_t segmentCreate(struct ncclComm* comm) {
  struct anycclSegment* seg;
  ANYCCL_CALLOC(seg, 1);
  seg->size = segmentBytes(comm);
  seg->base = anycclShmCreate("anyccl-segment", seg->size, &seg->fd);
  if (seg->base == NULL) {
    WARN("Cannot create a %zu-byte shared segment: %s (check /dev/shm and memory limits)", seg->size,
         strerror(errno));
    free(seg);
    return ncclSystemError;
  }
  seg->refs = 1;
  comm->segment = seg;
  comm->bell = (struct anycclBell*)seg->base;
  return ncclSuccess;
}

static void segmentRelease(struct anycclSegment* seg) {
  if (seg == NULL) return;
  if (__atomic_sub_fetch(&seg->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  munmap(seg->base, seg->size);
  if (seg->fd >= 0) close(seg->fd);
  free(seg);
}

/* ---- P2P: ranks in one process share the segment directly ---------------- */
static int p2pCan(const struct anycclPeerInfo* self, const struct anycclPeerInfo* peer) {
  return self->processToken == peer->processToken && !anycclParamInt(PARAM_P2P_DISABLE);
}
static ncclResult_t p2pMap(const struct anycclPeerInfo* peer, char** base, void** handle) {
  struct anycclSegment* seg = peer->segLocal;
  __atomic_add_fetch(&seg->refs, 1, __ATOMIC_ACQ_REL);
  *base = seg->base;
  *handle = seg;
  return ncclSuccess;
}
static void p2pUnmap(void* handle) { segmentRelease((struct anycclSegment*)handle); }
const struct anycclTransport anycclTransportP2p = {"P2P/direct pointer", p2pCan, p2pMap, p2pUnmap};

/* ---- SHM: ranks of one host map each other's memfd ----------------------- */
struct shmMap {
  char* base;
  size_t size;
};
static int shmCan(const struct anycclPeerInfo* self, const struct anycclPeerInfo* peer) {
  return self->hostHash == peer->hostHash && !anycclParamInt(PARAM_SHM_DISABLE);
}
static ncclResult_t shmMap(const struct anycclPeerInfo* peer, char** base, void** handle) {
  void* p;
  int r = anycclShmMapPeer(peer->pid, peer->segFd, peer->segSize, &p);
  if (r == ANYCCL_SHM_OPEN) {
    WARN("SHM: cannot open rank %d's segment /proc/%d/fd/%d: %s (processes must run as the same user on one host)",
         peer->rank, peer->pid, peer->segFd, strerror(errno));
    return ncclSystemError;
  }
  if (r == ANYCCL_SHM_SHORT) {
    WARN("SHM: rank %d's segment /proc/%d/fd/%d is smaller than the %zu bytes it announced", peer->rank, peer->pid,
         peer->segFd, peer->segSize);
    return ncclRemoteError;
  }
  if (r == ANYCCL_SHM_MMAP) {
    WARN("SHM: mmap of rank %d's segment failed: %s", peer->rank, strerror(errno));
    return ncclSystemError;
  }
  struct shmMap* m = malloc(sizeof(*m));
  if (m == NULL) {
    munmap(p, peer->segSize);
    return ncclSystemError;
  }
  m->base = p;
  m->size = peer->segSize;
  *base = p;
  *handle = m;
  return ncclSuccess;
}
static void shmUnmap(void* handle) {
  struct shmMap* m = handle;
  munmap(m->base, m->size);
  free(m);
}
const struct anycclTransport anycclTransportShm = {"SHM/direct/direct", shmCan, shmMap, shmUnmap};

/* ---- NET: ranks of other hosts, through the proxy (net.c) ------------------ */
static int netCan(const struct anycclPeerInfo* self, const struct anycclPeerInfo* peer) {
  return self->hostHash != peer->hostHash && !anycclParamInt(PARAM_NET_DISABLE);
}
static ncclResult_t netMap(const struct anycclPeerInfo* peer, char** base, void** handle) {
  *base = NULL; /* nothing to map: net.c gives the connections their FIFOs */
  *handle = NULL;
  return ncclSuccess;
}
static void netUnmap(void* handle) {}
const struct anycclTransport anycclTransportNet = {"NET/Socket/0", netCan, netMap, netUnmap};

/* A transport's name in the logs; the network's names the table its proxy
 * will run over (ANYCCL_NET_ENGINE, NCCL_NET_PLUGIN): "NET/P2P/0". */
static char netVia[80];
static void netViaInit(void) { snprintf(netVia, sizeof(netVia), "NET/%s/0", anycclNetDefault()->name); }
const char* anycclNetVia(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, netViaInit);
  return netVia;
}
static const char* transportName(const struct anycclTransport* t) {
  return t != &anycclTransportNet ? t->name : anycclNetVia();
}

/* ---- connections --------------------------------------------------------- */
static void connInit(struct anycclConn* c, char* segBase, const struct ncclComm* comm, int index, int peer,
                     struct anycclBell* peerBell, const char* via) {
  c->peer = peer;
  c->via = via;
  c->fifoIndex = index;
  c->nslots = comm->nslots;
  c->slotBytes = comm->slotBytes;
  c->step = 0;
  if (segBase == NULL) { /* a net send: the proxy's staging FIFO, set up by net.c */
    c->net = 1;
    return;
  }
  char* f = segBase + fifoOffset(comm, index);
  c->ctrl = (struct anycclFifoCtrl*)f;
  c->buf = f + alignUp(sizeof(struct anycclFifoCtrl), 4096);
  c->peerBell = peerBell;
}

ncclResult_t anycclTransportSetup(struct ncclComm* comm) {
  int n = comm->nRanks, r = comm->rank;
  NCCLCHECK(segmentCreate(comm));
  struct anycclPeerInfo* me = &comm->peerInfo[r];
  me->segFd = comm->segment->fd;
  me->segSize = comm->segment->size;
  me->segLocal = comm->segment;
  NCCLCHECK(anycclPeerInfoExchange(comm));

  ANYCCL_CALLOC(comm->peerMaps, n);
  ANYCCL_CALLOC(comm->peerTransport, n);
  ANYCCL_CALLOC(comm->p2pSend, n);
  ANYCCL_CALLOC(comm->p2pRecv, n);
  char** bases;
  ANYCCL_CALLOC(bases, n);
  ncclResult_t res = ncclSuccess;
  for (int q = 0; q < n; q++) {
    if (q == r) {
      bases[q] = comm->segment->base;
      continue;
    }
    const struct anycclTransport* t = NULL;
    for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
      if (transports[i]->canConnect(me, &comm->peerInfo[q])) {
        t = transports[i];
        break;
      }
    if (t == NULL) {
      WARN("No transport reaches rank %d (busId %s) from rank %d: ranks on different hosts need the network "
           "transport, which this build lacks (check NCCL_HOSTID, NCCL_P2P_DISABLE, NCCL_SHM_DISABLE)",
           q, comm->peerInfo[q].busId, r);
      res = ncclSystemError;
      goto fail;
    }
    if (t != &anycclTransportNet && comm->peerInfo[q].segSize != comm->segment->size) {
      /* every rank lays out the same segment (segmentBytes) */
      WARN("Rank %d announced a %zu-byte segment; rank %d's is %zu bytes (corrupt rank information, or ranks "
           "with different settings)", q, comm->peerInfo[q].segSize, r, comm->segment->size);
      res = ncclRemoteError;
      goto fail;
    }
    NCCLCHECKGOTO(t->mapPeer(&comm->peerInfo[q], &bases[q], &comm->peerMaps[q]), res, fail);
    comm->peerTransport[q] = t;
  }
  /* Rings: send into next's FIFO c, receive from my FIFO c. */
  for (int c = 0; c < comm->nChannels; c++) {
    const int* ring = comm->ringOrder + c * n;
    int next = ring[(comm->ringPos[c] + 1) % n];
    int prev = ring[(comm->ringPos[c] + n - 1) % n];
    const char* via = next == r ? "self" : transportName(comm->peerTransport[next]);
    connInit(&comm->ringSend[c], bases[next], comm, c, next, (struct anycclBell*)bases[next], via);
    connInit(&comm->ringRecv[c], comm->segment->base, comm, c, prev, (struct anycclBell*)bases[prev],
             prev == r ? "self" : comm->peerTransport[prev]->name);
    if (n > 1)
      INFO(NCCL_INIT | NCCL_P2P | NCCL_SHM, "Channel %02d/%d : %d[%d] -> %d[%d] via %s", c, comm->nChannels, r,
           comm->cudaDev, next, comm->peerInfo[next].cudaDev, via);
  }
  /* All-pairs mesh for point-to-point and direct algorithms. */
  for (int q = 0; q < n; q++) {
    if (q == r) continue;
    const char* via = transportName(comm->peerTransport[q]);
    connInit(&comm->p2pSend[q], bases[q], comm, comm->nChannels + r, q, (struct anycclBell*)bases[q], via);
    connInit(&comm->p2pRecv[q], comm->segment->base, comm, comm->nChannels + q, q, (struct anycclBell*)bases[q],
             via);
    TRACE(NCCL_INIT | NCCL_P2P, "P2P : %d[%d] -> %d[%d] via %s", r, comm->cudaDev, q, comm->peerInfo[q].cudaDev,
          via);
  }
  if (n > 1) {
    char line[256];
    int len = 0;
    for (size_t t = 0; t < sizeof(transports) / sizeof(transports[0]); t++) {
      int cnt = 0;
      for (int q = 0; q < n; q++) cnt += q != r && comm->peerTransport[q] == transports[t];
      if (cnt && len < (int)sizeof(line))
        len += snprintf(line + len, sizeof(line) - len, "%s%d via %s", len ? ", " : "", cnt, transportName(transports[t]));
    }
    INFO(NCCL_INIT | NCCL_P2P, "Connected all-pairs mesh of %d ranks: %s", n, line);
  }
  /* Receives from remote peers are fed by the proxy, not by the peer. */
  for (int c = 0; c < comm->nChannels; c++)
    if (comm->ringRecv[c].peer != r && comm->peerTransport[comm->ringRecv[c].peer] == &anycclTransportNet)
      comm->ringRecv[c].net = 1;
  for (int q = 0; q < n; q++)
    if (q != r && comm->peerTransport[q] == &anycclTransportNet) comm->p2pRecv[q].net = 1;
  NCCLCHECKGOTO(anycclNetSetup(comm), res, fail);
  /* Everybody mapped everybody: the memfds may close now (mappings stay). */
  NCCLCHECKGOTO(bootstrapBarrier(comm->bootstrap, 0x7301), res, fail);
  close(comm->segment->fd);
  comm->segment->fd = -1;
  comm->peerBase = bases; /* kept for single-copy phases (the xchg entries) */
  return ncclSuccess;
fail:
  free(bases);
  return res;
}

void anycclTransportFree(struct ncclComm* comm) {
  anycclNetFree(comm);
  anycclPeerFree(comm);
  free(comm->peerBase);
  comm->peerBase = NULL;
  if (comm->peerMaps) {
    for (int q = 0; q < comm->nRanks; q++)
      if (comm->peerMaps[q] && comm->peerTransport[q]) comm->peerTransport[q]->unmapPeer(comm->peerMaps[q]);
  }
  free(comm->peerMaps);
  free(comm->peerTransport);
  free(comm->p2pSend);
  free(comm->p2pRecv);
  comm->peerMaps = NULL;
  comm->peerTransport = NULL;
  comm->p2pSend = comm->p2pRecv = NULL;
  segmentRelease(comm->segment);
  comm->segment = NULL;
}
