/* The device API on the cuda backend, host side: windows (each rank's
 * buffer mapped on every rank of its LSA team, the ranks of its host) and
 * device communicators (a resource buffer per rank, itself a window, that
 * holds barrier inboxes, GIN signals and counters, LL all-to-all lines and
 * the program's own resource buffers). The device side is all inline, in
 * include/nccl_device/.
 *
 * A window's device record (struct ncclWindow_vidmem) holds the window's
 * address on every LSA peer as mapped here, and the same as one range:
 * windows lie in ncclMemAlloc memory (src/cuda/vmm.cu), at the same offset
 * of their allocation on every rank, and each rank maps its LSA peers'
 * allocations side by side, 4 GiB-aligned slots apart, so that device code
 * computes a peer's address (as NCCL's symmetric memory does). Peers of
 * other processes hand their allocation over as a file descriptor
 * (src/core/fdpass.c). The table holds the buffer itself on this rank, the
 * peer's pointer for ranks of this process and the flat mapping for others
 * (host code: the symmetric-window collectives). Registration and device
 * communicator creation are collective (a bootstrap all-gather); inside a
 * group they run at its end (anycclGroupAddJob).
 *
 * GIN to ranks outside the LSA team (other hosts) goes through a proxy of
 * the communicator (cuda_gin.c): windows join it as they are made. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "fdpass.h"
#include "param.h"
#include "rt.h"
#include "nccl_device/core.h"

#define WIN_MAGIC 0x616e79636357696eULL
#define DEV_MAGIC 0x616e796363446576ULL

/* ---- the LSA team ------------------------------------------------------------ */
static int gcd(int a, int b) {
  while (b) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Ranks in blocks of lsaSize consecutive ranks, each block on one host:
 * lsaSize is the gcd of the hosts' rank counts, or 1 when the ranks of a
 * host are not consecutive (as NCCL's). */
void anycclLsaTeam(const struct ncclComm* comm, int* lsaSize, int* lsaRank) {
  int n = comm->nRanks, g = 0;
  for (int q = 0; q < n; q++) {
    int first = 1, count = 0;
    for (int p = 0; p < n; p++)
      if (comm->peerInfo[p].hostHash == comm->peerInfo[q].hostHash) {
        if (p < q) first = 0;
        count++;
      }
    if (first) g = gcd(g, count);
  }
  if (g <= 0) g = 1;
  for (int q = 0; q < n && g > 1; q++)
    if (comm->peerInfo[q].hostHash != comm->peerInfo[q - q % g].hostHash) g = 1;
  *lsaSize = g;
  *lsaRank = comm->rank % g;
}

/* ---- windows ------------------------------------------------------------------- */
struct anycclWin {
  uint64_t magic;
  struct ncclComm* comm;
  struct ncclWindow_vidmem* dev; /* the handle the program gets */
  struct ncclWindow_vidmem rec;  /* its content */
  void* flat; /* the peers' allocations side by side (acuVmmMapFlat) */
  size_t flatStride, flatSizes[ANYCCL_DEV_MAX_LSA];
  struct anycclWin* next;
};

struct winMsg {
  uint64_t size, ptr;
  int vmm, pad;                 /* vmm: the buffer lies in an ncclMemAlloc allocation... */
  uint64_t allocOff, allocSize; /* ...at this offset of it, of this size */
  struct anycclFdAddr box;      /* where this rank takes peers' allocations (other processes) */
  int boxOk, exportable;
};

static void winFree(struct anycclWin* w) {
  anycclGinUnregister(w->comm, w->rec.ginMem);
  if (w->dev) acuFree(w->dev); /* waits for the device, as a deregistration may */
  if (w->flat) acuVmmUnmapFlat(w->flat, w->rec.lsaSize, w->flatSizes, w->flatStride);
  w->magic = 0;
  free(w);
}

#define SLOT_4G ((size_t)1 << 32)

/* Maps the LSA peers' allocations side by side (every rank decided alike,
 * from the same table, that it can): peers of this process from their
 * pointers, the others from file descriptors they send to this rank's box.
 * Fills w's flat range and the table. */
static ncclResult_t winMapFlat(struct ncclComm* comm, struct anycclWin* w, const struct winMsg* all, int first,
                               struct anycclFdBox* box, int crossProc) {
  int lsaSize = w->rec.lsaSize, lsaRank = w->rec.lsaRank;
  const struct winMsg* me = &all[comm->rank];
  int fds[ANYCCL_DEV_MAX_LSA] = {0};     /* (each filled below, for the lsaSize peers) */
  void* bases[ANYCCL_DEV_MAX_LSA] = {0};
  size_t maxSize = 0;
  for (int i = 0; i < lsaSize; i++) {
    const struct winMsg* m = &all[first + i];
    int local = comm->peerInfo[first + i].processToken == comm->peerInfo[comm->rank].processToken;
    bases[i] = local ? (void*)(uintptr_t)(m->ptr - m->allocOff) : NULL;
    fds[i] = -1;
    w->flatSizes[i] = m->allocSize;
    if (m->allocSize > maxSize) maxSize = m->allocSize;
  }
  ncclResult_t res = ncclSuccess;
  if (crossProc) { /* every rank of the team sends its allocation to each rank of another process */
    struct anycclFdAddr to[ANYCCL_DEV_MAX_LSA];
    int nTo = 0, nFrom = 0, myFd = -1;
    for (int i = 0; i < lsaSize; i++)
      if (bases[i] == NULL) {
        to[nTo++] = all[first + i].box;
        nFrom++;
      }
    int e = acuVmmExport((void*)(uintptr_t)(me->ptr - me->allocOff), &myFd);
    if (e != 0) {
      WARN("ncclCommWindowRegister: exporting this rank's allocation for the other processes: %s (%d)",
           acuErrorString(e), e);
      res = ncclUnhandledCudaError;
    }
    /* also after a local failure: the peers wait for this rank's descriptor (they fail on the timeout) */
    if (res == ncclSuccess)
      res = anycclFdBoxSwap(box, myFd, lsaRank, to, nTo, fds, lsaSize, nFrom, (int)bootstrapTimeoutMs(),
                            &comm->abortFlag);
    if (myFd >= 0) close(myFd);
  }
  if (res != ncclSuccess) return res;
  size_t stride = (maxSize + SLOT_4G - 1) / SLOT_4G * SLOT_4G;
  void* flat = NULL;
  int e = acuVmmMapFlat(comm->cudaDev, lsaSize, bases, fds, w->flatSizes, stride, &flat);
  for (int i = 0; i < lsaSize; i++)
    if (fds[i] >= 0) close(fds[i]);
  if (e != 0) {
    WARN("ncclCommWindowRegister: mapping the %d LSA peers' allocations (%zu bytes each at most) side by side: %s "
         "(%d)", lsaSize, maxSize, acuErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  w->flat = flat;
  w->flatStride = stride;
  w->rec.lsaFlat = (char*)flat + me->allocOff;
  w->rec.lsaStride4G = (uint32_t)(stride / SLOT_4G);
  for (int i = 0; i < lsaSize; i++) {
    int q = first + i;
    w->rec.lsaBase[i] = q == comm->rank ? w->rec.localBase
                        : bases[i]      ? (char*)(uintptr_t)all[q].ptr
                                        : w->rec.lsaFlat + i * stride;
  }
  return ncclSuccess;
}

/* Collective over the communicator's ranks; comm->cudaDev is current. */
static ncclResult_t winCreate(struct ncclComm* comm, char* buff, size_t size, int flags, struct anycclWin** out) {
  int n = comm->nRanks, lsaSize, lsaRank;
  anycclLsaTeam(comm, &lsaSize, &lsaRank);
  int first = comm->rank - lsaRank, crossProc = 0;
  for (int i = 0; i < lsaSize; i++)
    crossProc |= comm->peerInfo[first + i].processToken != comm->peerInfo[comm->rank].processToken;
  struct winMsg* all;
  ANYCCL_CALLOC(all, n);
  struct winMsg* me = &all[comm->rank];
  me->ptr = (uint64_t)(uintptr_t)buff;
  me->size = size;
  void* abase = NULL;
  size_t asize = 0;
  int exportable = 0;
  if (acuVmmFind != NULL && acuVmmFind(buff, &abase, &asize, &exportable) == 0) {
    me->vmm = 1;
    me->allocOff = (uint64_t)(buff - (char*)abase);
    me->allocSize = asize;
    me->exportable = exportable;
  }
  struct anycclFdBox box = {.sock = -1};
  if (crossProc && me->vmm && exportable && anycclFdBoxOpen(&box) == ncclSuccess) {
    me->box = box.addr;
    me->boxOk = 1;
  }
  /* the GIN proxy's memory id (the same on every rank: this is collective), before the exchange, so that no
   * rank's GIN reaches this window before it is registered here */
  int ginMem = -1;
  ncclResult_t res = anycclGinRegister(comm, buff, size, &ginMem);
  ncclResult_t ar = bootstrapAllGather(comm->bootstrap, all, sizeof(*all)); /* every rank runs it */
  if (res == ncclSuccess) res = ar;
  struct anycclWin* w = NULL;
  if (res == ncclSuccess && lsaSize > ANYCCL_DEV_MAX_LSA) {
    WARN("ncclCommWindowRegister: %d ranks share a host, more than this build's %d (ANYCCL_DEV_MAX_LSA)", lsaSize,
         ANYCCL_DEV_MAX_LSA);
    res = ncclInvalidUsage;
  }
  /* every rank sees the same table: all fail alike, before any rank waits on another */
  for (int q = 0; q < n && res == ncclSuccess; q++)
    if (all[q].size != size && (flags & NCCL_WIN_COLL_SYMMETRIC)) {
      WARN("ncclCommWindowRegister: NCCL_WIN_COLL_SYMMETRIC windows must have the same size on every rank: rank %d "
           "registered %llu bytes, rank %d %zu", q, (unsigned long long)all[q].size, comm->rank, size);
      res = ncclInvalidUsage;
    }
  for (int i = 0; i < lsaSize && res == ncclSuccess; i++) {
    const struct winMsg* m = &all[first + i];
    if (!m->vmm) {
      WARN("ncclCommWindowRegister: rank %d's buffer %p is not ncclMemAlloc memory: windows need it (as NCCL's do), "
           "so that every peer's window can be mapped in one range; allocate the buffer with ncclMemAlloc",
           first + i, (void*)(uintptr_t)m->ptr);
      res = ncclInvalidArgument;
    } else if (m->allocOff != all[first].allocOff) {
      WARN("ncclCommWindowRegister: rank %d's buffer starts %llu bytes into its ncclMemAlloc allocation, rank %d's "
           "%llu: register buffers at the same offset of their allocations on every rank of a host",
           first + i, (unsigned long long)m->allocOff, first, (unsigned long long)all[first].allocOff);
      res = ncclInvalidArgument;
    } else if (crossProc && !(m->exportable && m->boxOk)) {
      WARN("ncclCommWindowRegister: rank %d cannot hand its allocation to the other processes of its host (%s)",
           first + i, m->exportable ? "no Unix socket for the exchange" : "the driver gave no shareable handle");
      res = ncclSystemError;
    }
  }
  if (res == ncclSuccess && (w = calloc(1, sizeof(*w))) == NULL) res = ncclSystemError;
  if (res != ncclSuccess) goto fail;
  w->magic = WIN_MAGIC;
  w->comm = comm;
  w->rec = (struct ncclWindow_vidmem){.localBase = buff, .size = size, .lsaRank = lsaRank, .lsaSize = lsaSize,
                                      .worldRank = comm->rank, .winFlags = flags, .winHost = w, .ginMem = ginMem};
  ginMem = -1; /* w owns it */
  res = winMapFlat(comm, w, all, first, &box, crossProc);
  anycclFdBoxClose(&box);
  if (res != ncclSuccess) goto fail;
  int e = acuMalloc((void**)&w->dev, sizeof(w->rec));
  if (e == 0) e = acuMemcpyHtoD(w->dev, &w->rec, sizeof(w->rec));
  if (e != 0) {
    WARN("ncclCommWindowRegister: device memory for the window: %s (%d)", acuErrorString(e), e);
    res = ncclUnhandledCudaError;
    goto fail;
  }
  free(all);
  *out = w;
  return ncclSuccess;
fail:
  anycclFdBoxClose(&box);
  free(all);
  anycclGinUnregister(comm, ginMem);
  if (w) winFree(w);
  return res;
}

int anycclWinSymmetric(struct ncclComm* comm, const void* p, size_t bytes, char** peer) {
  int found = 0;
  pthread_mutex_lock(&comm->lock);
  for (const struct anycclWin* w = comm->windows; w && !found; w = w->next) {
    const struct ncclWindow_vidmem* r = &w->rec;
    const char* c = (const char*)p;
    if (!(r->winFlags & NCCL_WIN_COLL_SYMMETRIC) || r->lsaSize != comm->nRanks || c < r->localBase ||
        bytes > r->size || (size_t)(c - r->localBase) > r->size - bytes)
      continue;
    for (int q = 0; q < comm->nRanks; q++) peer[q] = r->lsaBase[q] + (c - r->localBase);
    found = 1;
  }
  pthread_mutex_unlock(&comm->lock);
  return found;
}

static void winLink(struct ncclComm* comm, struct anycclWin* w) {
  pthread_mutex_lock(&comm->lock);
  w->next = comm->windows;
  comm->windows = w;
  pthread_mutex_unlock(&comm->lock);
}

static struct anycclWin* winUnlink(struct ncclComm* comm, ncclWindow_t win) {
  struct anycclWin* found = NULL;
  pthread_mutex_lock(&comm->lock);
  for (struct anycclWin** pw = &comm->windows; *pw; pw = &(*pw)->next)
    if ((*pw)->dev == win) {
      found = *pw;
      *pw = found->next;
      break;
    }
  pthread_mutex_unlock(&comm->lock);
  return found;
}

struct winJob {
  struct ncclComm* comm;
  char* buff;
  size_t size;
  int flags;
  ncclWindow_t* out;
};

static ncclResult_t winJobRun(void* arg) {
  struct winJob* j = arg;
  struct ncclComm* comm = j->comm;
  int saved = -1;
  acuGetDevice(&saved);
  acuSetDevice(comm->cudaDev);
  struct anycclWin* w = NULL;
  ncclResult_t res = winCreate(comm, j->buff, j->size, j->flags, &w);
  if (res == ncclSuccess) {
    winLink(comm, w);
    *j->out = w->dev;
    INFO(NCCL_REG, "rank %d: window %p over %p (%zu bytes), LSA team of %d", comm->rank, (void*)w->dev, j->buff,
         j->size, w->rec.lsaSize);
  }
  if (saved >= 0) acuSetDevice(saved);
  free(j);
  return res;
}

ncclResult_t anycclWindowRegister(struct ncclComm* comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  struct winJob* j;
  ANYCCL_CALLOC(j, 1);
  *j = (struct winJob){comm, buff, size, flags, win};
  return anycclGroupAddJob(comm, winJobRun, j);
}

ncclResult_t anycclWindowDeregister(struct ncclComm* comm, ncclWindow_t win) {
  struct anycclWin* w = win ? winUnlink(comm, win) : NULL;
  if (w == NULL) {
    WARN("ncclCommWindowDeregister: win %p was not returned by ncclCommWindowRegister on comm %p", (void*)win,
         (void*)comm);
    return ncclInvalidArgument;
  }
  int saved = -1;
  acuGetDevice(&saved);
  acuSetDevice(comm->cudaDev);
  winFree(w);
  if (saved >= 0) acuSetDevice(saved);
  return ncclSuccess;
}

/* ---- device communicators ------------------------------------------------------- */
struct anycclDevRec {
  uint64_t magic;
  struct ncclComm* comm;
  char* res;              /* resource buffer (device) */
  uint64_t* shadows;      /* GIN signal shadows (device) */
  struct anycclWin* resWin;
  struct anycclDevRec* next;
};

static void devRecFree(struct anycclDevRec* d) {
  if (d->resWin) winFree(d->resWin);
  if (d->res) acuVmmFree(d->res);
  if (d->shadows) acuFree(d->shadows);
  d->magic = 0;
  free(d);
}

/* One piece of the resource buffer. */
static ncclResult_t place(size_t* top, size_t bytes, size_t align, ncclDevResourceHandle_t* handle) {
  if (align < 128) align = 128;
  if (align & (align - 1)) {
    WARN("ncclDevCommCreate: bufferAlign %zu is not a power of two", align);
    return ncclInvalidArgument;
  }
  size_t off = (*top + align - 1) & ~(align - 1);
  if (off / 128 > UINT32_MAX) {
    WARN("ncclDevCommCreate: resource buffers over 512 GB");
    return ncclInvalidArgument;
  }
  if (handle) *handle = (ncclDevResourceHandle_t)(off / 128);
  *top = off + bytes;
  return ncclSuccess;
}

/* Windows made before the communicator had a GIN proxy join it now, in list
 * order (the same on every rank); their device records learn the id. */
static ncclResult_t ginRegisterWin(struct ncclComm* comm, struct anycclWin* w) {
  if (w == NULL || w->rec.ginMem >= 0) return ncclSuccess;
  NCCLCHECK(anycclGinRegister(comm, w->rec.localBase, w->rec.size, &w->rec.ginMem));
  int e = acuMemcpyHtoD(&w->dev->ginMem, &w->rec.ginMem, sizeof(w->rec.ginMem));
  if (e != 0) {
    WARN("ncclDevCommCreate: updating a window's device record: %s (%d)", acuErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

static ncclResult_t ginRegisterAll(struct ncclComm* comm, struct anycclDevRec* d) {
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&comm->lock);
  for (struct anycclWin* w = comm->windows; w && r == ncclSuccess; w = w->next) r = ginRegisterWin(comm, w);
  for (struct anycclDevRec* o = comm->devComms; o && r == ncclSuccess; o = o->next) r = ginRegisterWin(comm, o->resWin);
  pthread_mutex_unlock(&comm->lock);
  if (r == ncclSuccess) r = ginRegisterWin(comm, d->resWin);
  return r;
}

static int needsGin(const ncclDevCommRequirements_t* r) {
  int gin = r->ginForceEnable || r->ginSignalCount > 0 || r->ginCounterCount > 0 || r->railGinBarrierCount > 0 ||
            r->barrierCount > 0;
  for (const ncclDevResourceRequirements_t* q = r->resourceRequirementsList; q; q = q->next)
    gin |= q->ginSignalCount > 0 || q->ginCounterCount > 0;
  return gin;
}

static ncclResult_t devCreate(struct ncclComm* comm, const ncclDevCommRequirements_t* r, ncclDevComm_t* out) {
  int lsaSize, lsaRank;
  anycclLsaTeam(comm, &lsaSize, &lsaRank);
  ncclTeam_t lsa = {lsaSize, lsaRank, 1};
  ncclTeam_t rail = {comm->nRanks / lsaSize, comm->rank / lsaSize, lsaSize};
  /* The checks are the same on every rank: all ranks fail alike, before the exchange. */
  if (r->lsaMultimem) {
    WARN("ncclDevCommCreate: lsaMultimem: anyccl creates no multicast (NVLink SHARP) objects; leave it false and use "
         "LSA pointers");
    return ncclInvalidUsage;
  }
  for (const ncclTeamRequirements_t* t = r->teamRequirementsList; t; t = t->next)
    if (t->multimem) {
      WARN("ncclDevCommCreate: teamRequirementsList asks for multimem: anyccl creates no multicast objects");
      return ncclInvalidUsage;
    }
  int ginHosts = needsGin(r) && rail.nRanks > 1; /* GIN to other hosts: through the proxy (cuda_gin.c) */
  int index = comm->nDevCommsMade++;
  memset(out, 0, sizeof(*out));
  out->rank = comm->rank;
  out->nRanks = comm->nRanks;
  out->nRanks_rcp32 = (uint32_t)(UINT32_MAX / (uint32_t)comm->nRanks + ((comm->nRanks & (comm->nRanks - 1)) == 0));
  out->lsaRank = lsaRank;
  out->lsaSize = lsaSize;
  out->lsaSize_rcp32 = (uint32_t)(UINT32_MAX / (uint32_t)lsaSize + ((lsaSize & (lsaSize - 1)) == 0));

  /* Layout: LSA barriers, rail barriers, LL all-to-all, the program's buffers, signals, counters. */
  size_t top = 0;
  ncclDevResourceRequirements_t req;
  int nb = r->barrierCount > r->lsaBarrierCount ? r->barrierCount : r->lsaBarrierCount;
  int nSignals = r->ginSignalCount > 0 ? r->ginSignalCount : 0;
  int nCounters = r->ginCounterCount > 0 ? r->ginCounterCount : 0;
  NCCLCHECK(ncclLsaBarrierCreateRequirement(lsa, nb, &out->lsaBarrier, &req));
  NCCLCHECK(place(&top, req.bufferSize, req.bufferAlign, &out->lsaBarrier.bufHandle));
  int nrb = r->barrierCount > r->railGinBarrierCount ? r->barrierCount : r->railGinBarrierCount;
  NCCLCHECK(ncclGinBarrierCreateRequirement(comm, rail, nrb, &out->railGinBarrier, &req));
  NCCLCHECK(place(&top, req.bufferSize, req.bufferAlign, &out->railGinBarrier.bufHandle));
  out->railGinBarrier.signal0 = (ncclGinSignal_t)nSignals;
  nSignals += req.ginSignalCount;
  if (r->lsaLLA2ABlockCount > 0) {
    NCCLCHECK(ncclLLA2ACreateRequirement(r->lsaLLA2ABlockCount, r->lsaLLA2ASlotCount, &out->lsaLLA2A, &req));
    NCCLCHECK(place(&top, req.bufferSize, req.bufferAlign, &out->lsaLLA2A.bufHandle));
  }
  for (ncclDevResourceRequirements_t* q = r->resourceRequirementsList; q; q = q->next) {
    ncclDevResourceHandle_t h;
    NCCLCHECK(place(&top, q->bufferSize, q->bufferAlign, &h));
    if (q->outBufferHandle) *q->outBufferHandle = h;
    if (q->outGinSignalStart) *q->outGinSignalStart = (ncclGinSignal_t)nSignals;
    if (q->outGinCounterStart) *q->outGinCounterStart = (ncclGinCounter_t)nCounters;
    nSignals += q->ginSignalCount > 0 ? q->ginSignalCount : 0;
    nCounters += q->ginCounterCount > 0 ? q->ginCounterCount : 0;
  }
  NCCLCHECK(place(&top, (size_t)nSignals * 8, 8, &out->ginSignalsHandle));
  NCCLCHECK(place(&top, (size_t)nCounters * 8, 8, &out->ginCountersHandle));
  size_t bytes = (top + 4095) & ~(size_t)4095;
  out->ginContextCount = 1;
  out->ginSignalCount = nSignals;
  out->ginCounterCount = nCounters;

  struct anycclDevRec* d;
  ANYCCL_CALLOC(d, 1);
  d->magic = DEV_MAGIC;
  d->comm = comm;
  ncclResult_t res = ncclSuccess;
  int e = acuVmmAlloc((void**)&d->res, bytes); /* a window's memory (winCreate) */
  if (e == 0) e = acuMemsetD(d->res, 0, bytes);
  if (e == 0 && nSignals > 0) e = acuMalloc((void**)&d->shadows, (size_t)nSignals * 8);
  if (e == 0 && nSignals > 0) e = acuMemsetD(d->shadows, 0, (size_t)nSignals * 8);
  if (e == 0) e = acuDeviceSynchronize();
  if (e != 0) {
    WARN("ncclDevCommCreate: %zu bytes of device memory for the resource buffer: %s (%d)", bytes, acuErrorString(e), e);
    res = ncclUnhandledCudaError;
  }
  /* Every rank runs the exchange, also after a local failure (the others wait in it). */
  ncclResult_t wr = winCreate(comm, d->res, bytes, NCCL_WIN_COLL_SYMMETRIC, &d->resWin);
  if (res == ncclSuccess) res = wr;
  /* Nobody writes into a peer's resource buffer before it is cleared and mapped everywhere. */
  ncclResult_t br = bootstrapBarrier(comm->bootstrap, 0x7d31);
  if (res == ncclSuccess) res = br;
  if (res == ncclSuccess && ginHosts) res = anycclGinSetup(comm);
  if (res == ncclSuccess && ginHosts) res = ginRegisterAll(comm, d);
  if (res == ncclSuccess && ginHosts) res = anycclGinAttach(comm, index, nSignals, nCounters, out);
  /* No GIN operation reaches a peer's proxy before the peer registered its windows and attached this device
   * communicator (its signals would be dropped); every rank meets here, also after a local failure. */
  if (ginHosts) {
    ncclResult_t gr = bootstrapBarrier(comm->bootstrap, 0x7d32);
    if (res == ncclSuccess) res = gr;
  }
  if (res != ncclSuccess) {
    devRecFree(d);
    return res;
  }
  out->resourceWindow = d->resWin->dev;
  out->resourceLocal = d->resWin->rec.localBase;
  out->resourceFlat = d->resWin->rec.lsaFlat; /* LSA rank 0's slot, as the window's */
  out->resourceStride4G = d->resWin->rec.lsaStride4G;
  out->ginSignalShadows = d->shadows;
  /* NVIDIA's 2.28 ncclDevComm is 200 bytes: programs built against its
   * header (PyTorch) pass one of that size to ncclDevCommCreate */
  _Static_assert(sizeof(struct ncclDevComm) <= 200, "ncclDevComm must not outgrow NVIDIA's 2.28 layout (200 bytes)");
  /* the device header finds the error word right after the abort flag */
  _Static_assert(offsetof(struct acuShared, err) == offsetof(struct acuShared, abort) + sizeof(uint32_t),
                 "ncclDevComm.abortFlag[1] must be acuShared.err");
  out->abortFlag = comm->cuSharedDev ? &comm->cuSharedDev->abort : NULL;
  out->timeoutNs = (uint64_t)anycclTimeoutSec(PARAM_DEV_TIMEOUT) * 1000000000ull;
  pthread_mutex_lock(&comm->lock);
  d->next = comm->devComms;
  comm->devComms = d;
  pthread_mutex_unlock(&comm->lock);
  INFO(NCCL_INIT, "rank %d: device communicator, LSA team %d of %d, %d LSA barriers, %d signals, %d counters, "
       "resource buffer %zu bytes", comm->rank, lsaRank, lsaSize, nb, nSignals, nCounters, bytes);
  return ncclSuccess;
}

struct devJob {
  struct ncclComm* comm;
  ncclDevCommRequirements_t reqs;
  ncclDevComm_t* out;
};

static ncclResult_t devJobRun(void* arg) {
  struct devJob* j = arg;
  int saved = -1;
  acuGetDevice(&saved);
  acuSetDevice(j->comm->cudaDev);
  ncclResult_t res = devCreate(j->comm, &j->reqs, j->out);
  if (saved >= 0) acuSetDevice(saved);
  free(j);
  return res;
}

ncclResult_t anycclDevCommCreate(struct ncclComm* comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* out) {
  struct devJob* j;
  ANYCCL_CALLOC(j, 1);
  *j = (struct devJob){comm, *reqs, out};
  return anycclGroupAddJob(comm, devJobRun, j);
}

ncclResult_t anycclDevCommDestroy(struct ncclComm* comm, const ncclDevComm_t* dc) {
  struct anycclDevRec* found = NULL;
  pthread_mutex_lock(&comm->lock);
  for (struct anycclDevRec** pd = &comm->devComms; *pd; pd = &(*pd)->next)
    if ((*pd)->resWin && (*pd)->resWin->dev == dc->resourceWindow) { /* the window is its own */
      found = *pd;
      *pd = found->next;
      break;
    }
  pthread_mutex_unlock(&comm->lock);
  if (found == NULL) {
    WARN("ncclDevCommDestroy: devComm %p was not made by ncclDevCommCreate on comm %p (or was destroyed)",
         (const void*)dc, (void*)comm);
    return ncclInvalidArgument;
  }
  int saved = -1;
  acuGetDevice(&saved);
  acuSetDevice(comm->cudaDev);
  acuDeviceSynchronize(); /* kernels still using it (bounded: their waits watch abort and time) */
  devRecFree(found);
  if (saved >= 0) acuSetDevice(saved);
  return ncclSuccess;
}

/* Communicator teardown (comm->cudaDev current). */
void anycclDevFreeAll(struct ncclComm* comm) {
  anycclGinFree(comm); /* its proxy thread first: it reads windows and host words */
  while (comm->devComms) {
    struct anycclDevRec* d = comm->devComms;
    comm->devComms = d->next;
    devRecFree(d);
  }
  while (comm->windows) {
    struct anycclWin* w = comm->windows;
    comm->windows = w->next;
    winFree(w);
  }
}
