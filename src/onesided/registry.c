/* Registered memory, semaphores and channels of a proxy service, and their
 * exchange with peers over the communicator's bootstrap.
 *
 * A peer in this process is reached through plain pointers; a peer in
 * another process of this host through IPC handles of "device" memory (on
 * the cpu backend anyccl-cpu's shared memory, as src/backend/cpu_peer.c
 * does it); a peer on another host (NCCL_HOSTID) through the network
 * (port_net.c): its memories are known by their ids in its own service. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "cuda_exec.h"
#include "param.h"
#include "port.h"
#include "rt.h"
#include "transport.h"

#define BAD(fn, what, v, lim) anycclPortBadArgument(fn, what, (uint64_t)(v), (uint64_t)(lim))

enum { TAG_MEM = 0, TAG_SEM = 1, TAG_CONN = 2 };

int portTag(struct anycclProxyService* s, int kind, int count) {
  return 0x40000000 | ((s->index & 0xff) << 22) | ((kind & 3) << 20) | (count & 0xfffff);
}

ncclResult_t portExportAlloc(void* p, cudaIpcMemHandle_t* h, uint64_t* off, int* ok) {
  void* base = p;
  size_t size;
  *ok = 0;
  *off = 0;
  memset(h, 0, sizeof(*h));
  if (anycclRt.ipcGetMemHandle == NULL) return ncclSuccess;
  if (anycclRt.memGetAddressRange != NULL && anycclRt.memGetAddressRange(p, &base, &size) != 0) return ncclSuccess;
  if (anycclRt.ipcGetMemHandle(h, base) != 0) return ncclSuccess;
  *off = (uint64_t)((char*)p - (char*)base);
  *ok = 1;
  return ncclSuccess;
}

static ncclResult_t importAlloc(struct anycclProxyService* s, int peer, const cudaIpcMemHandle_t* h, uint64_t off,
                                const char* what, char** ptr, void** base) {
  if (anycclRt.ipcOpenMemHandle == NULL || anycclRt.ipcOpenMemHandle(base, *h, 1) != 0) {
    WARN("port: rank %d cannot map rank %d's %s through IPC (same host, other process)", s->rank, peer, what);
    return ncclSystemError;
  }
  *ptr = (char*)*base + off;
  return ncclSuccess;
}

static int connKind(struct anycclProxyService* s, int q) {
  const struct anycclPeerInfo* p = &s->comm->peerInfo[q];
  const struct anycclPeerInfo* me = &s->comm->peerInfo[s->rank];
  if (p->processToken == me->processToken) return CONN_LOCAL;
  if (p->hostHash == me->hostHash) return CONN_IPC;
  return CONN_NET;
}

/* ---- memory ------------------------------------------------------------------------ */

ncclResult_t portParseMemWire(const void* bytes, size_t len, int peer, struct memWire* w, char* why, size_t whyLen) {
  memset(w, 0, sizeof(*w));
  if (len != sizeof(*w)) {
    snprintf(why, whyLen, "%zu bytes, not a memory description of %zu", len, sizeof(*w));
    return ncclRemoteError;
  }
  memcpy(w, bytes, sizeof(*w));
  if (w->owner != peer || w->id < 0) {
    snprintf(why, whyLen, "rank %d gave no valid memory (owner %d, id %d)", peer, w->owner, w->id);
    return ncclInvalidArgument;
  }
  if (w->size == 0 || w->size >= ANYCCL_PORT_MAX_OFFSET || w->off >= ANYCCL_PORT_MAX_OFFSET) {
    snprintf(why, whyLen, "rank %d's memory %d claims %llu bytes at offset %llu (at most 2^37 - 1 each)", peer, w->id,
             (unsigned long long)w->size, (unsigned long long)w->off);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* Under s->lock. The lowest freed id first (GIN windows deregistered: every
 * rank registers and deregisters its windows in the same order, so ids stay
 * alike across ranks), else the next one. A freed entry is refilled before
 * its kind says so. */
static ncclResult_t addMem(struct anycclProxyService* s, const struct portMem* m, const char* fn, anycclMemoryId* id) {
  int n = s->nMems;
  for (int i = 0; i < n; i++)
    if (__atomic_load_n(&s->mems[i].kind, __ATOMIC_ACQUIRE) == MEM_FREE) {
      struct portMem e = *m;
      e.kind = MEM_FREE;
      s->mems[i] = e;
      __atomic_store_n(&s->mems[i].kind, m->kind, __ATOMIC_RELEASE);
      *id = i;
      return ncclSuccess;
    }
  if (n >= s->maxMems) {
    WARN("%s: the service has %d memories already (ANYCCL_PORT_MAX_MEMORIES)", fn, n);
    return ncclInvalidUsage;
  }
  s->mems[n] = *m;
  __atomic_store_n(&s->nMems, n + 1, __ATOMIC_RELEASE);
  *id = n;
  return ncclSuccess;
}

PORT_API ncclResult_t anycclRegisterMemory(anycclProxyService_t s, void* ptr, size_t bytes, anycclMemoryId* id) {
  const char* fn = "anycclRegisterMemory";
  if (s == NULL) return BAD(fn, "svc (NULL)", 0, 0);
  if (ptr == NULL || id == NULL) return BAD(fn, "ptr or id (NULL)", 0, 0);
  if (bytes == 0 || bytes >= ANYCCL_PORT_MAX_OFFSET) return BAD(fn, "bytes (1 to 2^37-1)", bytes, ANYCCL_PORT_MAX_OFFSET);
  struct portMem m = {MEM_LOCAL, s->rank, -1, ptr, bytes, NULL};
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = addMem(s, &m, fn, id);
  pthread_mutex_unlock(&s->lock);
  return r;
}

static ncclResult_t checkMem(struct anycclProxyService* s, anycclMemoryId id, const char* fn, const char* what) {
  if (id < 0 || id >= __atomic_load_n(&s->nMems, __ATOMIC_ACQUIRE)) return BAD(fn, what, id, s->nMems);
  return ncclSuccess;
}

static ncclResult_t makeWire(struct anycclProxyService* s, anycclMemoryId local, const char* fn, struct memWire* w) {
  NCCLCHECK(checkMem(s, local, fn, "local memory id"));
  const struct portMem* m = &s->mems[local];
  if (m->kind != MEM_LOCAL) return BAD(fn, "local memory id (a peer's memory, not registered here)", local, s->nMems);
  memset(w, 0, sizeof(*w));
  w->id = local;
  w->owner = s->rank;
  w->size = m->size;
  w->ptr = (uint64_t)(uintptr_t)m->ptr;
  return portExportAlloc(m->ptr, &w->ipc, &w->off, &w->ipcOk);
}

static ncclResult_t importMem(struct anycclProxyService* s, int peer, const struct memWire* wire, anycclMemoryId* id) {
  struct memWire checked, *w = &checked;
  char why[200];
  ncclResult_t res = portParseMemWire(wire, sizeof(*wire), peer, w, why, sizeof(why));
  if (res != ncclSuccess) {
    WARN("port: rank %d: %s", s->rank, why);
    return res;
  }
  struct portMem m = {MEM_MAPPED, peer, w->id, (char*)(uintptr_t)w->ptr, w->size, NULL};
  int kind = peer == s->rank ? CONN_LOCAL : connKind(s, peer);
  if (kind == CONN_NET) {
    m.kind = MEM_NET;
    m.ptr = NULL;
  } else if (kind == CONN_IPC) {
    if (!w->ipcOk) {
      WARN("port: rank %d's memory %d cannot be shared with other processes: register memory from cudaMalloc "
           "(anyccl-cpu device memory), not host memory, nor ncclMemAlloc memory on GPUs (a cuMemCreate allocation, "
           "which CUDA IPC does not share; ANYCCL_CUDA_MEM_VMM=0 makes ncclMemAlloc a cudaMalloc)", peer, w->id);
      return ncclInvalidUsage;
    }
    NCCLCHECK(importAlloc(s, peer, &w->ipc, w->off, "registered memory", &m.ptr, &m.ipcBase));
    void* base;
    size_t mapped;
    if (anycclRt.memGetAddressRange && anycclRt.memGetAddressRange(m.ipcBase, &base, &mapped) == 0 &&
        (w->off > mapped || w->size > mapped - w->off)) {
      WARN("port: rank %d's memory %d claims %llu bytes at offset %llu of a mapping of %zu bytes", peer, w->id,
           (unsigned long long)w->size, (unsigned long long)w->off, mapped);
      anycclRt.ipcCloseMemHandle(m.ipcBase);
      return ncclRemoteError;
    }
  }
  ncclResult_t r = addMem(s, &m, "anycclMemoryRecv", id);
  if (r != ncclSuccess && m.ipcBase) anycclRt.ipcCloseMemHandle(m.ipcBase);
  return r;
}

static ncclResult_t checkPeer(struct anycclProxyService* s, int peer, const char* fn) {
  if (peer < 0 || peer >= s->nRanks || peer == s->rank)
    return BAD(fn, "peer (another rank of the communicator)", peer, s->nRanks);
  return ncclSuccess;
}

PORT_API ncclResult_t anycclMemorySend(anycclProxyService_t s, anycclMemoryId local, int peer) {
  const char* fn = "anycclMemorySend";
  if (s == NULL) return BAD(fn, "svc (NULL)", 0, 0);
  NCCLCHECK(checkPeer(s, peer, fn));
  struct memWire w;
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = makeWire(s, local, fn, &w);
  if (r == ncclSuccess) r = bootstrapSend(s->comm->bootstrap, peer, portTag(s, TAG_MEM, s->nMemSent[peer]++), &w, sizeof(w));
  pthread_mutex_unlock(&s->lock);
  return r;
}

PORT_API ncclResult_t anycclMemoryRecv(anycclProxyService_t s, int peer, anycclMemoryId* remote) {
  const char* fn = "anycclMemoryRecv";
  if (s == NULL || remote == NULL) return BAD(fn, "svc or remote (NULL)", 0, 0);
  NCCLCHECK(checkPeer(s, peer, fn));
  struct memWire w;
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = bootstrapRecv(s->comm->bootstrap, peer, portTag(s, TAG_MEM, s->nMemRecv[peer]++), &w, sizeof(w));
  if (r == ncclSuccess) r = importMem(s, peer, &w, remote);
  pthread_mutex_unlock(&s->lock);
  return r;
}

PORT_API ncclResult_t anycclMemoryAllGather(anycclProxyService_t s, anycclMemoryId local, anycclMemoryId* remote) {
  const char* fn = "anycclMemoryAllGather";
  if (s == NULL || remote == NULL) return BAD(fn, "svc or remote (NULL)", 0, 0);
  struct memWire* all;
  ANYCCL_CALLOC(all, s->nRanks);
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = makeWire(s, local, fn, &all[s->rank]);
  /* every rank must take part even if its own id is bad: send a hole */
  if (r != ncclSuccess) all[s->rank].owner = -1;
  ncclResult_t g = bootstrapAllGather(s->comm->bootstrap, all, sizeof(*all));
  if (r == ncclSuccess) r = g;
  for (int q = 0; q < s->nRanks && r == ncclSuccess; q++) {
    if (q == s->rank) {
      remote[q] = local;
    } else {
      r = importMem(s, q, &all[q], &remote[q]);
    }
  }
  pthread_mutex_unlock(&s->lock);
  free(all);
  return r;
}

PORT_API ncclResult_t anycclMemoryPointer(anycclProxyService_t s, anycclMemoryId id, void** ptr, size_t* bytes) {
  const char* fn = "anycclMemoryPointer";
  if (s == NULL || ptr == NULL) return BAD(fn, "svc or ptr (NULL)", 0, 0);
  NCCLCHECK(checkMem(s, id, fn, "memory id"));
  *ptr = s->mems[id].ptr;
  if (bytes) *bytes = s->mems[id].size;
  return ncclSuccess;
}

/* ---- connections and semaphores -------------------------------------------------- */

struct slotsWire {
  uint64_t ptr, off;
  int32_t ipcOk, nslots; /* nslots: the sender's semaphore slots (its ANYCCL_PORT_MAX_SEMAPHORES) */
  cudaIpcMemHandle_t ipc;
  uint64_t hostPtr, hostBytes; /* GPUs: its host counters (hostBytes 0: none), a memfd of process hostPid */
  int32_t hostPid, hostFd;
};

/* The peer's host counters, mapped here so that my proxy can store into
 * them: its own pointer within one process, its memfd otherwise. Without
 * them signals go by copy (INFO says why). */
static void mapPeerHost(struct anycclProxyService* s, int peer, const struct slotsWire* w) {
  struct portConn* c = &s->conns[peer];
  if (!s->cuda || w->hostBytes == 0 || w->nslots < 0 || w->hostBytes < (uint64_t)w->nslots * sizeof(uint64_t)) return;
  if (c->kind == CONN_LOCAL) {
    c->peerHost = (uint64_t*)(uintptr_t)w->hostPtr;
    return;
  }
  void* p;
  if (anycclShmMapPeer((int)w->hostPid, (int)w->hostFd, w->hostBytes, &p) != 0) {
    INFO(NCCL_INIT | NCCL_PROXY,
         "port: rank %d cannot map rank %d's host counters (/proc/%d/fd/%d: %s); signals to it go by copy", s->rank,
         peer, (int)w->hostPid, (int)w->hostFd, strerror(errno));
    return;
  }
  c->peerHost = (uint64_t*)p;
  c->peerHostMap = w->hostBytes;
}

/* Both ranks of the pair, at their first semaphore with each other. */
static ncclResult_t portConnect(struct anycclProxyService* s, int peer) {
  struct portConn* c = &s->conns[peer];
  if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) return ncclSuccess;
  c->kind = connKind(s, peer);
  if (c->kind == CONN_NET) {
    __atomic_store_n(&s->anyNet, 1, __ATOMIC_RELEASE);
    if (s->cuda && s->hostSems == NULL) { /* signals from the network land in the host counters */
      WARN("port: rank %d: peer %d is on another host, and this service has no host semaphore counters "
           "(ANYCCL_PORT_HOST_SIGNALS=0, or cudaHostRegister failed): port channels across hosts need them", s->rank,
           peer);
      return ncclInvalidUsage;
    }
    NCCLCHECK(portNetConnect(s, peer));
  } else {
    struct slotsWire mine, theirs;
    memset(&mine, 0, sizeof(mine));
    mine.ptr = (uint64_t)(uintptr_t)s->slots;
    mine.nslots = s->maxSems;
    NCCLCHECK(portExportAlloc(s->slots, &mine.ipc, &mine.off, &mine.ipcOk));
    if (s->hostSems) {
      mine.hostPtr = (uint64_t)(uintptr_t)s->hostSems;
      mine.hostBytes = s->hostSemsBytes;
      mine.hostPid = (int32_t)getpid();
      mine.hostFd = s->hostSemsFd;
    }
    int tag = portTag(s, TAG_CONN, 0);
    NCCLCHECK(bootstrapSend(s->comm->bootstrap, peer, tag, &mine, sizeof(mine)));
    NCCLCHECK(bootstrapRecv(s->comm->bootstrap, peer, tag, &theirs, sizeof(theirs)));
    c->peerNslots = theirs.nslots;
    if (c->kind == CONN_LOCAL) {
      c->peerSlots = (char*)(uintptr_t)theirs.ptr;
    } else {
      if (!theirs.ipcOk) {
        WARN("port: rank %d's semaphores cannot be mapped by other processes (no IPC in this runtime)", peer);
        return ncclSystemError;
      }
      NCCLCHECK(importAlloc(s, peer, &theirs.ipc, theirs.off, "semaphores", &c->peerSlots, &c->ipcBase));
    }
    mapPeerHost(s, peer, &theirs);
  }
  __atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
  INFO(NCCL_INIT | NCCL_PROXY, "port: rank %d -> rank %d via %s", s->rank, peer,
       c->kind == CONN_NET ? "NET" : c->kind == CONN_IPC ? "IPC" : "P2P");
  return ncclSuccess;
}

static ncclResult_t newSlot(struct anycclProxyService* s, const char* fn, int* slot) {
  if (s->nSems >= s->maxSems) {
    WARN("%s: the service has %d semaphores already (ANYCCL_PORT_MAX_SEMAPHORES)", fn, s->nSems);
    return ncclInvalidUsage;
  }
  *slot = s->nSems;
  return ncclSuccess;
}

PORT_API ncclResult_t anycclSemaphoreCreate(anycclProxyService_t s, int peer, anycclSemaphoreId* id) {
  const char* fn = "anycclSemaphoreCreate";
  if (s == NULL || id == NULL) return BAD(fn, "svc or id (NULL)", 0, 0);
  NCCLCHECK(checkPeer(s, peer, fn));
  pthread_mutex_lock(&s->lock);
  int slot = -1, theirs = -1;
  ncclResult_t r = portConnect(s, peer);
  /* both send, then both receive: a full table on one side still completes the exchange (-1) */
  ncclResult_t full = r == ncclSuccess ? newSlot(s, fn, &slot) : r;
  int tag = portTag(s, TAG_SEM, s->nSemMade[peer]++);
  if (r == ncclSuccess) r = bootstrapSend(s->comm->bootstrap, peer, tag, &slot, sizeof(slot));
  if (r == ncclSuccess) r = bootstrapRecv(s->comm->bootstrap, peer, tag, &theirs, sizeof(theirs));
  if (r == ncclSuccess) r = full;
  if (r == ncclSuccess && theirs < 0) {
    WARN("%s: rank %d could not make its half of the semaphore", fn, peer);
    r = ncclInvalidUsage;
  }
  if (r == ncclSuccess && portCheckPeerSlot(&s->conns[peer], theirs) != 0) {
    WARN("%s: rank %d gave semaphore slot %d, outside its %d slots", fn, peer, theirs, s->conns[peer].peerNslots);
    r = ncclRemoteError;
  }
  if (r == ncclSuccess) {
    s->sems[slot] = (struct portSem){peer, theirs, 0, 0, 0};
    __atomic_store_n(&s->nSems, slot + 1, __ATOMIC_RELEASE);
    *id = slot;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

PORT_API ncclResult_t anycclHostSemaphoreCreate(anycclProxyService_t s, anycclSemaphoreId* id) {
  const char* fn = "anycclHostSemaphoreCreate";
  if (s == NULL || id == NULL) return BAD(fn, "svc or id (NULL)", 0, 0);
  pthread_mutex_lock(&s->lock);
  int slot;
  ncclResult_t r = newSlot(s, fn, &slot);
  if (r == ncclSuccess) {
    s->sems[slot] = (struct portSem){-1, -1, 0, 0, 0};
    __atomic_store_n(&s->nSems, slot + 1, __ATOMIC_RELEASE);
    *id = slot;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

static ncclResult_t checkSem(struct anycclProxyService* s, anycclSemaphoreId id, const char* fn) {
  if (id < 0 || id >= __atomic_load_n(&s->nSems, __ATOMIC_ACQUIRE)) return BAD(fn, "semaphore id", id, s->nSems);
  return ncclSuccess;
}

PORT_API ncclResult_t anycclHostSemaphoreSignal(anycclProxyService_t s, anycclSemaphoreId id) {
  const char* fn = "anycclHostSemaphoreSignal";
  if (s == NULL) return BAD(fn, "svc (NULL)", 0, 0);
  NCCLCHECK(checkSem(s, id, fn));
  if (s->sems[id].peer != -1) return BAD(fn, "semaphore id (not a host semaphore)", id, s->nSems);
  if (!s->cuda) {
    anycclPortHostSignal(&s->slots[id].value, &s->slots[id].sleepers);
    return ncclSuccess;
  }
  if (s->hostSems) { /* device waits add the host counter */
    __atomic_add_fetch(&s->hostSems[id], 1, __ATOMIC_RELEASE);
    return ncclSuccess;
  }
  pthread_mutex_lock(&s->lock);
  uint64_t v = ++s->sems[id].hostValue;
  int e = anycclRt.memcpyAsync(&s->slots[id].value, &v, sizeof(v), (cudaStream_t)s->stream);
  if (e == 0) e = anycclRt.streamSynchronize((cudaStream_t)s->stream);
  pthread_mutex_unlock(&s->lock);
  CUDACHECK(e);
  return ncclSuccess;
}

PORT_API ncclResult_t anycclSemaphoreDevice(anycclProxyService_t s, anycclSemaphoreId id,
                                            struct anycclPortSemaphore* dev) {
  const char* fn = "anycclSemaphoreDevice";
  if (s == NULL || dev == NULL) return BAD(fn, "svc or dev (NULL)", 0, 0);
  NCCLCHECK(checkSem(s, id, fn));
  const struct portSem* sem = &s->sems[id];
  dev->inbound = &s->slots[id];
  dev->expected = &s->expected[id];
  dev->outbound = NULL;
  if (sem->peer >= 0 && s->conns[sem->peer].kind != CONN_NET)
    dev->outbound = (struct anycclSemSlot*)s->conns[sem->peer].peerSlots + sem->remoteSlot;
  dev->shared = s->sharedDev;
  dev->timeoutNs = s->timeoutNs;
  dev->hostInbound = s->hostSemsDev ? (const uint64_t*)s->hostSemsDev + id : NULL;
  return ncclSuccess;
}

/* ---- channels ------------------------------------------------------------------------ */

static ncclResult_t checkChannel(struct anycclProxyService* s, const char* fn, anycclSemaphoreId sem,
                                 anycclMemoryId dst, anycclMemoryId src) {
  NCCLCHECK(checkSem(s, sem, fn));
  NCCLCHECK(checkMem(s, dst, fn, "dst memory id"));
  NCCLCHECK(checkMem(s, src, fn, "src memory id"));
  int peer = s->sems[sem].peer;
  if (peer < 0) return BAD(fn, "semaphore id (a host semaphore; channels need a peer's)", sem, s->nSems);
  if (s->mems[src].kind != MEM_LOCAL) return BAD(fn, "src memory id (must be registered here)", src, s->nMems);
  if (s->mems[dst].kind != MEM_LOCAL && s->mems[dst].owner != peer)
    return BAD(fn, "dst memory id (a memory of another rank than the semaphore's peer)", dst, s->nMems);
  return ncclSuccess;
}

/* The direct path of a channel (include/anyccl_port.h): the destination is
 * mapped here, the peer's semaphore word is mapped here, and only adds
 * reach that word (cpu: the proxy adds too; GPUs: the proxy stores into the
 * peer's host counter, which needs conn->peerHost; without it the proxy
 * copies values into the word, which an add would race with). */
static void directPath(struct anycclProxyService* s, anycclSemaphoreId sem, anycclMemoryId dst, anycclMemoryId src,
                       struct anycclPortChannel* ch) {
  const struct portConn* conn = &s->conns[s->sems[sem].peer];
  const struct portMem* d = &s->mems[dst];
  ch->src = s->mems[src].ptr;
  ch->dst = NULL;
  ch->directMax = 0;
  if (d->ptr == NULL || d->kind == MEM_NET || conn->kind == CONN_NET || ch->sem.outbound == NULL) return;
  if (s->cuda && conn->peerHost == NULL) return;
  /* GPUs: the calling thread loads and stores them: device memory only (the
   * proxy's copies also take pageable host memory; IPC maps device memory) */
  if (s->cuda && (acuPointerIsDevice == NULL || !acuPointerIsDevice(ch->src, NULL) ||
                  (d->ipcBase == NULL && !acuPointerIsDevice(d->ptr, NULL))))
    return;
  int64_t max = anycclParamInt(PARAM_PORT_DIRECT_MAX);
  if (max < 0) max = s->cuda ? 4096 : 65536;
  ch->dst = d->ptr;
  ch->directMax = (uint64_t)max;
}

PORT_API ncclResult_t anycclPortChannelCreate(anycclProxyService_t s, anycclSemaphoreId sem, anycclMemoryId dst,
                                              anycclMemoryId src, struct anycclPortChannel* ch) {
  const char* fn = "anycclPortChannelCreate";
  if (s == NULL || ch == NULL) return BAD(fn, "svc or chan (NULL)", 0, 0);
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = checkChannel(s, fn, sem, dst, src);
  int n = s->nChans;
  if (r == ncclSuccess && n >= s->maxChans) {
    WARN("%s: the service has %d port channels already (ANYCCL_PORT_MAX_CHANNELS)", fn, n);
    r = ncclInvalidUsage;
  }
  if (r == ncclSuccess) {
    s->chans[n] = (struct portChan){sem, dst, src};
    __atomic_store_n(&s->nChans, n + 1, __ATOMIC_RELEASE);
    memset(ch, 0, sizeof(*ch));
    ch->magic = ANYCCL_PORT_MAGIC;
    ch->id = (uint32_t)n;
    ch->dstSize = s->mems[dst].size;
    ch->srcSize = s->mems[src].size;
    r = anycclProxyServiceFifo(s, &ch->fifo);
    if (r == ncclSuccess) r = anycclSemaphoreDevice(s, sem, &ch->sem);
    if (r == ncclSuccess) directPath(s, sem, dst, src, ch);
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

PORT_API ncclResult_t anycclMemoryChannelCreate(anycclProxyService_t s, anycclSemaphoreId sem, anycclMemoryId dst,
                                                anycclMemoryId src, anycclMemoryId pkt,
                                                struct anycclMemoryChannel* ch) {
  const char* fn = "anycclMemoryChannelCreate";
  if (s == NULL || ch == NULL) return BAD(fn, "svc or chan (NULL)", 0, 0);
  pthread_mutex_lock(&s->lock);
  ncclResult_t r = checkChannel(s, fn, sem, dst, src);
  if (r == ncclSuccess && s->conns[s->sems[sem].peer].kind == CONN_NET)
    r = BAD(fn, "semaphore id (its peer is on another host: use a port channel)", sem, s->nSems);
  if (r == ncclSuccess && pkt != -1) {
    r = checkMem(s, pkt, fn, "pkt memory id (or -1)");
    if (r == ncclSuccess && s->mems[pkt].kind != MEM_LOCAL)
      r = BAD(fn, "pkt memory id (must be registered here)", pkt, s->nMems);
  }
  if (r == ncclSuccess) {
    memset(ch, 0, sizeof(*ch));
    ch->magic = ANYCCL_MEMCHAN_MAGIC;
    ch->dst = s->mems[dst].ptr;
    ch->dstSize = s->mems[dst].size;
    ch->src = s->mems[src].ptr;
    ch->srcSize = s->mems[src].size;
    if (pkt != -1) {
      ch->pkt = s->mems[pkt].ptr;
      ch->pktSize = s->mems[pkt].size;
    }
    r = anycclSemaphoreDevice(s, sem, &ch->sem);
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

ncclResult_t portFreeTables(struct anycclProxyService* s) {
  portFreeHostSems(s);
  for (int i = 0; s->mems && i < s->nMems; i++)
    if (s->mems[i].ipcBase) anycclRt.ipcCloseMemHandle(s->mems[i].ipcBase);
  for (int q = 0; s->conns && q < s->nRanks; q++)
    if (s->conns[q].ipcBase) anycclRt.ipcCloseMemHandle(s->conns[q].ipcBase);
  if (s->slots) anycclRt.free(s->slots);
  if (s->cuda && s->expected) anycclRt.free(s->expected);
  else free(s->expected);
  free(s->mems);
  free(s->sems);
  free(s->chans);
  free(s->conns);
  free(s->nMemSent);
  free(s->nMemRecv);
  free(s->nSemMade);
  return ncclSuccess;
}
