/* The staged sizes under CUDA graph capture, ranks in several processes of
 * one host: the two-barrier kernels on the ranks' own buffers, mapped into
 * every peer (cuda_symm.c calls anycclCudaSymmMapped).
 *
 * With a process per rank, while a stream is captured (a graph's launches
 * repeat with the same buffers, and every rank captures the same calls),
 * each staged call runs a bootstrap all-gather of the ranks' buffers: for
 * each, the allocation it lies in (an ncclMemAlloc allocation, src/cuda/
 * vmm.cu: a process-unique id; or cudaMalloc's: its CUDA IPC handle), the
 * offset, the size, and a box for file descriptors (src/core/fdpass.c).
 * Every allocation no rank has seen before is mapped once by the ranks of
 * the other processes: an ncclMemAlloc allocation handed over by its owner
 * as a descriptor, a cudaMalloc one opened from its handle. The pairs
 * (owner, allocation) seen so far are the same set on every rank, so every
 * rank decides alike what to exchange; when some rank's buffer is neither,
 * all of them stage. Mappings stay until the communicator is freed (a freed
 * allocation's memory stays with them; ids are never reused, so a new
 * allocation at the same address is mapped anew); at most
 * ANYCCL_CUDA_SYMM_MAP allocations a communicator, then staging. Eager
 * calls stage: the exchange costs a bootstrap round trip. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "fdpass.h"
#include "param.h"

enum { KIND_VMM = 1, KIND_IPC = 2 };

struct anycclSymmMap {
  int owner, kind;
  uint64_t id;
  unsigned char ipc[64]; /* KIND_IPC: the handle (id is a hash of it) */
  void* flat;            /* its mapping here (owner in another process), else NULL */
  size_t size;
  struct anycclSymmMap* next;
};

struct mapMsg {
  uint64_t ptr[2], id[2], off[2], size[2]; /* [0] the input, [1] the output */
  unsigned char ipc[2][64];                /* KIND_IPC: cudaMalloc's allocation, shared through CUDA IPC */
  int kind[2];
  struct anycclFdAddr box;
  int ok, pad;
};

static struct anycclSymmMap* findMap(struct ncclComm* comm, int owner, const struct mapMsg* w, int which) {
  for (struct anycclSymmMap* m = comm->symmMaps; m; m = m->next)
    if (m->owner == owner && m->kind == w->kind[which] && m->id == w->id[which] &&
        (m->kind != KIND_IPC || memcmp(m->ipc, w->ipc[which], 64) == 0))
      return m;
  return NULL;
}

static int countMaps(const struct ncclComm* comm) {
  int n = 0;
  for (const struct anycclSymmMap* m = comm->symmMaps; m; m = m->next) n++;
  return n;
}

void anycclCudaSymmMapsFree(struct ncclComm* comm) {
  while (comm->symmMaps) {
    struct anycclSymmMap* m = comm->symmMaps;
    comm->symmMaps = m->next;
    if (m->flat && m->kind == KIND_VMM) acuVmmUnmapFlat(m->flat, 1, &m->size, m->size);
    if (m->flat && m->kind == KIND_IPC) acuIpcCloseMemHandle(m->flat);
    free(m);
  }
}

static int sameProcess(const struct ncclComm* comm, int q) {
  return comm->peerInfo[q].processToken == comm->peerInfo[comm->rank].processToken;
}

/* (r, which) is new: its allocation has not been exchanged, and it is not
 * the same allocation as r's input (which 1, the output, when in and out
 * share one) */
static int isNew(struct ncclComm* comm, const struct mapMsg* all, int r, int which) {
  if (which == 1 && all[r].kind[1] == all[r].kind[0] && all[r].id[1] == all[r].id[0] &&
      memcmp(all[r].ipc[1], all[r].ipc[0], 64) == 0)
    return 0;
  return findMap(comm, r, &all[r], which) == NULL;
}

/* FNV-1a of an IPC handle: its allocation's id (the map compares the whole handle) */
static uint64_t handleId(const unsigned char* h) {
  uint64_t x = 0xcbf29ce484222325ull;
  for (int i = 0; i < 64; i++) x = (x ^ h[i]) * 0x100000001b3ull;
  return x;
}

/* One round: every owner of a new allocation (input or output) sends it to
 * the ranks of the other processes; each maps what it receives. */
static ncclResult_t exchange(struct ncclComm* comm, const struct mapMsg* all, int which, struct anycclFdBox* box) {
  const int n = comm->nRanks, me = comm->rank;
  struct anycclFdAddr* to;
  int* from;
  ANYCCL_CALLOC(to, n);
  ANYCCL_CALLOC(from, n);
  int nTo = 0, nFrom = 0, myFd = -1;
  ncclResult_t res = ncclSuccess;
  if (all[me].kind[which] == KIND_VMM && isNew(comm, all, me, which)) {
    for (int q = 0; q < n; q++)
      if (!sameProcess(comm, q)) to[nTo++] = all[q].box;
    if (nTo > 0) {
      int e = acuVmmExport((void*)(uintptr_t)(all[me].ptr[which] - all[me].off[which]), &myFd);
      if (e != 0) {
        WARN("rank %d: handing its ncclMemAlloc buffer to the other processes: %s (%d)", me, acuErrorString(e), e);
        res = ncclUnhandledCudaError;
      }
    }
  }
  for (int r = 0; r < n; r++)
    if (!sameProcess(comm, r) && all[r].kind[which] == KIND_VMM && isNew(comm, all, r, which)) nFrom++;
  if (res == ncclSuccess && (nTo > 0 || nFrom > 0))
    res = anycclFdBoxSwap(box, myFd, me, to, nTo, from, n, nFrom, (int)bootstrapTimeoutMs(), &comm->abortFlag);
  if (myFd >= 0) close(myFd);
  /* every rank records every new pair, mapped or not, so that the sets stay equal */
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    if (!isNew(comm, all, r, which)) continue;
    struct anycclSymmMap* m = calloc(1, sizeof(*m));
    if (m == NULL) {
      res = ncclSystemError;
      break;
    }
    m->owner = r;
    m->kind = all[r].kind[which];
    m->id = all[r].id[which];
    memcpy(m->ipc, all[r].ipc[which], 64);
    m->size = all[r].size[which];
    if (!sameProcess(comm, r)) {
      void* base = NULL;
      int e = m->kind == KIND_IPC ? acuIpcOpenMemHandle(&m->flat, m->ipc)
              : from[r] >= 0      ? acuVmmMapFlat(comm->cudaDev, 1, &base, &from[r], &m->size, m->size, &m->flat)
                                  : -1;
      if (e != 0) {
        WARN("rank %d: mapping rank %d's buffer (%zu bytes, %s): %s", me, r, m->size,
             m->kind == KIND_IPC ? "CUDA IPC" : "ncclMemAlloc", e < 0 ? "its descriptor did not come" : acuErrorString(e));
        free(m);
        res = ncclUnhandledCudaError;
        break;
      }
    }
    m->next = comm->symmMaps;
    comm->symmMaps = m;
  }
  for (int r = 0; r < n; r++)
    if (from[r] >= 0) close(from[r]);
  free(to);
  free(from);
  return res;
}

static int symmMapped(struct ncclComm* comm, const void* in, void* out, char** peerIn, char** peerOut,
                      ncclResult_t* res);

int anycclCudaSymmMapped(struct ncclComm* comm, const void* in, void* out, char** peerIn, char** peerOut,
                         ncclResult_t* res) {
  /* (the stream is being captured: allocation and IPC calls need the relaxed mode on this thread) */
  const int old = acuCaptureModeExchange(2 /* cudaStreamCaptureModeRelaxed */);
  const int r = symmMapped(comm, in, out, peerIn, peerOut, res); /* (collective: every rank runs it) */
  acuCaptureModeExchange(old);
  return r;
}

static int symmMapped(struct ncclComm* comm, const void* in, void* out, char** peerIn, char** peerOut,
                      ncclResult_t* res) {
  const int n = comm->nRanks, me = comm->rank;
  const int64_t limit = anycclParamInt(PARAM_CUDA_SYMM_MAP);
  if (limit <= 0 || acuVmmFindId == NULL || acuVmmMapFlat == NULL) return 0;
  /* a process per rank: ranks of one process launch from one thread (a group), where a blocking exchange of
   * one would wait for the next (every rank sees the same table: all decide alike) */
  for (int q = 0; q < n; q++)
    for (int t = q + 1; t < n; t++)
      if (comm->peerInfo[q].processToken == comm->peerInfo[t].processToken) return 0;
  struct mapMsg* all;
  if ((all = calloc((size_t)n, sizeof(*all))) == NULL) return 0; /* (every rank must take part: fail the call) */
  struct mapMsg* mine = &all[me];
  const void* bufs[2] = {in, out};
  int ok = 1;
  for (int k = 0; k < 2 && ok; k++) {
    void* base = NULL;
    size_t size = 0;
    int exportable = 0;
    if (acuVmmFindId(bufs[k], &base, &size, &exportable, &mine->id[k]) == 0) {
      ok = exportable; /* ncclMemAlloc's: a descriptor */
      mine->kind[k] = KIND_VMM;
    } else if (acuPtrPeerReachable != NULL && acuPtrPeerReachable(bufs[k]) && acuMemGetAddressRange != NULL &&
               acuMemGetAddressRange(bufs[k], &base, &size) == 0 && acuIpcGetMemHandle(mine->ipc[k], base) == 0) {
      mine->kind[k] = KIND_IPC; /* cudaMalloc's (PyTorch's caching allocator): CUDA IPC */
      mine->id[k] = handleId(mine->ipc[k]);
    } else {
      ok = 0;
    }
    if (ok) {
      mine->ptr[k] = (uint64_t)(uintptr_t)bufs[k];
      mine->off[k] = (uint64_t)((const char*)bufs[k] - (char*)base);
      mine->size[k] = size;
    }
  }
  struct anycclFdBox box = {.sock = -1};
  /* (every rank opens one: it takes the peers' ncclMemAlloc allocations) */
  if (ok && anycclFdBoxOpen(&box) != ncclSuccess) ok = 0;
  mine->box = box.addr;
  mine->ok = ok;
  ncclResult_t r = bootstrapAllGather(comm->bootstrap, all, sizeof(*all));
  int use = r == ncclSuccess;
  int fresh = 0;
  for (int q = 0; q < n && use; q++) {
    use = all[q].ok;
    for (int k = 0; k < 2 && use; k++) fresh += isNew(comm, all, q, k);
  }
  if (use && countMaps(comm) + fresh > limit) use = 0; /* the same count on every rank */
  if (use && fresh > 0) {
    r = exchange(comm, all, 0, &box);
    if (r == ncclSuccess) r = exchange(comm, all, 1, &box);
    if (r != ncclSuccess) use = 0;
  }
  anycclFdBoxClose(&box);
  if (r != ncclSuccess) {
    *res = r;
    free(all);
    return 1; /* failed: the call reports it */
  }
  if (use)
    for (int q = 0; q < n; q++) {
      char* p[2];
      for (int k = 0; k < 2; k++) {
        if (sameProcess(comm, q)) {
          p[k] = (char*)(uintptr_t)all[q].ptr[k];
        } else {
          const struct anycclSymmMap* m = findMap(comm, q, &all[q], k);
          p[k] = (char*)m->flat + all[q].off[k];
        }
      }
      peerIn[q] = p[0];
      peerOut[q] = p[1];
    }
  free(all);
  return use ? 2 : 0;
}
