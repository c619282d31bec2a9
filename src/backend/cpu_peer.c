/* Single-copy phases on the cpu backend: when every rank of a communicator
 * lives on one host and each rank's user buffers can be reached by the
 * others (same process, or device memory shared through IPC), ranks read and
 * write each other's buffers directly instead of pushing slots through
 * FIFOs. Each byte is then read and written once, as in NCCL's P2P/IPC
 * direct mode.
 *
 * Protocol: every rank publishes its buffers in its xchg entry and waits
 * for everybody's entry of the same phase number; if all can be reached it
 * runs its share of the work, then waits until every rank has finished
 * (nobody may leave while others still touch its buffers). If one cannot be
 * reached, every rank sees that and runs the FIFO lanes instead. */
#define _GNU_SOURCE
#include <linux/futex.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "reduce.h"
#include "rt.h"

#define BLOCK_BYTES (32 << 10) /* reduction block: stays in L1/L2 */

#define xchgOf anycclXchgOf

static void ringAll(struct ncclComm* comm) {
  for (int q = 0; q < comm->nRanks; q++)
    if (q != comm->rank) anycclBellRing((struct anycclBell*)comm->peerBase[q]);
}

static int allReached(struct ncclComm* comm, int field, uint64_t seq) {
  for (int q = 0; q < comm->nRanks; q++) {
    struct anycclXchg* x = xchgOf(comm, q);
    if (__atomic_load_n(field ? &x->done : &x->seq, __ATOMIC_SEQ_CST) < seq) return 0;
  }
  return 1;
}

/* Wait until every peer's field (seq or done) reaches `seq`. Waiting for
 * the entries (field 0), a peer that runs this collective otherwise (FIFO
 * lanes: its data in my FIFOs, or its entry's signature) is a mismatch. */
static ncclResult_t waitAll(struct ncclComm* comm, const struct anycclPhase* ph, int field, uint64_t seq) {
  int spins = 0;
  double lastCheck = 0, start = 0;
  for (;;) {
    uint32_t seen = __atomic_load_n(&comm->bell->bell, __ATOMIC_SEQ_CST);
    int ready = 1;
    for (int q = 0; q < comm->nRanks && ready; q++) {
      struct anycclXchg* x = xchgOf(comm, q);
      uint64_t v = __atomic_load_n(field ? &x->done : &x->seq, __ATOMIC_SEQ_CST);
      ready = v >= seq;
    }
    if (ready) return ncclSuccess;
    if (__atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
      return ncclInvalidUsage;
    ncclResult_t async = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
    if (async != ncclSuccess && async != ncclInProgress) return async;
    if (++spins < comm->spinCount) {
      if (comm->yieldSpin) sched_yield();
      continue;
    }
    double t = anycclNowSec();
    if (lastCheck == 0) lastCheck = start = t;
    if (comm->peerCheckMs > 0 && (t - lastCheck) * 1000 >= comm->peerCheckMs) {
      lastCheck = t;
      ncclResult_t dead = anycclCheckPeers(comm, "single-copy phase");
      if (dead != ncclSuccess) return dead;
    }
    if (field == 0) {
      ncclResult_t bad = anycclMismatchPoll(comm, ph);
      if (bad != ncclSuccess) return bad;
    }
    if (comm->opTimeoutSec > 0 && t - start > comm->opTimeoutSec) {
      WARN("%s: rank %d waited %lld s for its peers in the single-copy exchange (ANYCCL_OP_TIMEOUT): a peer is gone "
           "or did not call the same operation; the communicator is now in error",
           ph->what, comm->rank, (long long)comm->opTimeoutSec);
      return ncclSystemError;
    }
    anycclBellWait(comm->bell, seen);
  }
}

/* Describe one of my buffers for other processes. */
static int exportBuffer(char* p, cudaIpcMemHandle_t* h, size_t* off) {
  if (p == NULL) return 1; /* unused buffer (e.g. recvbuff on a non-root) */
  void* base;
  size_t size;
  if (anycclRt.memGetAddressRange == NULL || anycclRt.ipcGetMemHandle == NULL) return 0;
  if (anycclRt.memGetAddressRange(p, &base, &size) != 0) return 0;
  if (anycclRt.ipcGetMemHandle(h, base) != 0) return 0;
  *off = (size_t)(p - (char*)base);
  return 1;
}

/* A peer's buffer in my address space. */
static ncclResult_t importBuffer(struct ncclComm* comm, int q, char* ptr, const cudaIpcMemHandle_t* h, size_t off,
                                 char** out) {
  const struct anycclXchg* x = xchgOf(comm, q);
  if (ptr == NULL || x->pid == (int)getpid()) {
    *out = ptr;
    return ncclSuccess;
  }
  for (int i = 0; i < comm->nIpcMaps; i++)
    if (comm->ipcMaps[i].peer == q && memcmp(&comm->ipcMaps[i].handle, h, sizeof(*h)) == 0) {
      *out = comm->ipcMaps[i].base + off;
      return ncclSuccess;
    }
  void* base;
  if (anycclRt.ipcOpenMemHandle(&base, *h, 1 /* cudaIpcMemLazyEnablePeerAccess */) != 0) {
    WARN("single-copy: rank %d cannot open rank %d's buffer through IPC", comm->rank, q);
    return ncclSystemError;
  }
  if (comm->nIpcMaps == comm->capIpcMaps) {
    int cap = comm->capIpcMaps ? 2 * comm->capIpcMaps : 16;
    struct anycclIpcMap* m = realloc(comm->ipcMaps, cap * sizeof(*m));
    if (m == NULL) {
      anycclRt.ipcCloseMemHandle(base);
      return ncclSystemError;
    }
    comm->ipcMaps = m;
    comm->capIpcMaps = cap;
  }
  comm->ipcMaps[comm->nIpcMaps++] = (struct anycclIpcMap){q, *h, base};
  *out = (char*)base + off;
  return ncclSuccess;
}

void anycclPeerFree(struct ncclComm* comm) {
  for (int i = 0; i < comm->nIpcMaps; i++) anycclRt.ipcCloseMemHandle(comm->ipcMaps[i].base);
  free(comm->ipcMaps);
  comm->ipcMaps = NULL;
  comm->nIpcMaps = comm->capIpcMaps = 0;
}

/* My share [lo, hi) of `count` elements cut in n parts aligned to 64 bytes. */
static void share(size_t count, size_t es, int n, int r, size_t* lo, size_t* hi) {
  size_t align = 64 / es > 0 ? 64 / es : 1;
  size_t part = (count + n - 1) / n;
  part = (part + align - 1) / align * align;
  *lo = (size_t)r * part < count ? (size_t)r * part : count;
  *hi = *lo + part < count ? *lo + part : count;
}

/* acc = in[0] op in[1] op ... (rank order, every input is a rank's own
 * contribution: premultiplied), then written to every destination. */
static void reduceBlocks(struct ncclComm* comm, struct anycclPhase* ph, int n, char** in, char** dst, int ndst,
                         size_t lo, size_t hi, char* acc, size_t accBytes) {
  size_t es = ph->elemSize;
  size_t blk = (accBytes < BLOCK_BYTES ? accBytes : BLOCK_BYTES) / es;
  unsigned pre = ph->op.op == anycclDevPreMulSum ? ANYCCL_RED_PREMUL_IN0 : 0;
  unsigned post = ph->op.op == anycclDevSumPostDiv ? ANYCCL_RED_POSTDIV_OUT0 : 0;
  anycclRedOp ops[ANYCCL_MAX_LANE_CONNS]; /* each rank's input scaled by its own scalar */
  for (int q = 0; q < n; q++) {
    ops[q] = ph->op;
    ops[q].scalar = xchgOf(comm, q)->scalar;
  }
  /* Plain ops (no per-rank scalar, no final division): fuse the last
   * reduction with the writes of the first two destinations. */
  int plain = !pre && !post && n >= 2;
  for (size_t off = lo; off < hi; off += blk) {
    size_t m = hi - off < blk ? hi - off : blk;
    size_t b = off * es;
    if (plain) {
      const char* last = in[n - 1] + b;
      const char* prev = in[0] + b;
      if (n > 2) {
        anycclReduce(&ph->op, m, in[0] + b, in[1] + b, acc, NULL, 0);
        for (int q = 2; q < n - 1; q++) anycclReduce(&ph->op, m, in[q] + b, acc, acc, NULL, 0);
        prev = acc;
      }
      anycclReduce(&ph->op, m, last, prev, dst[0] + b, ndst > 1 ? dst[1] + b : NULL, 0);
      for (int d = 2; d < ndst; d++) memcpy(dst[d] + b, dst[0] + b, m * es);
      continue;
    }
    anycclReduce(&ops[0], m, in[0] + b, NULL, acc, NULL, pre);
    for (int q = 1; q < n; q++) anycclReduce(&ops[q], m, in[q] + b, acc, acc, NULL, pre);
    for (int d = 0; d < ndst; d++) anycclReduce(&ph->op, m, acc, NULL, dst[d] + b, NULL, post);
  }
}

/* Large single-copy transfers write lines that nobody reads soon: streaming
 * stores skip the read-for-ownership of every destination line (about a
 * third of the memory traffic of a copy). */
#define STREAM_MIN_BYTES (1 << 20)
static void copyRange(char* dst, const char* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
#if defined(__x86_64__) && defined(__SSE2__)
  if (bytes >= STREAM_MIN_BYTES) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    memcpy(dst, src, head);
    dst += head, src += head, bytes -= head;
    size_t body = bytes & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
      __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
      __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
      _mm_stream_si128((__m128i*)(dst + i), a);
      _mm_stream_si128((__m128i*)(dst + i + 16), b);
      _mm_stream_si128((__m128i*)(dst + i + 32), c);
      _mm_stream_si128((__m128i*)(dst + i + 48), d);
    }
    _mm_sfence(); /* the finishing handshake publishes the data */
    memcpy(dst + body, src + body, bytes - body);
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

/* The work of rank r once every rank's buffers are mapped (ins/outs). */
static void peerWork(struct ncclComm* comm, struct anycclPhase* ph, char** ins, char** outs) {
  int n = comm->nRanks, r = comm->rank;
  size_t es = ph->elemSize, count = ph->count, lo, hi;
  int func = ph->peerFunc - 1;
  char* acc = comm->scratch; /* BLOCK_BYTES <= slotBytes */
  switch (func) {
    case FUNC_ALLREDUCE:
      share(count, es, n, r, &lo, &hi);
      reduceBlocks(comm, ph, n, ins, outs, n, lo, hi, acc, comm->slotBytes);
      break;
    case FUNC_REDUCE: {
      share(count, es, n, r, &lo, &hi);
      reduceBlocks(comm, ph, n, ins, &outs[ph->root], 1, lo, hi, acc, comm->slotBytes);
      break;
    }
    case FUNC_REDUCESCATTER: {
      char* shifted[ANYCCL_MAX_LANE_CONNS];
      for (int q = 0; q < n; q++) shifted[q] = ins[q] + (size_t)r * count * es;
      reduceBlocks(comm, ph, n, shifted, &outs[r], 1, 0, count, acc, comm->slotBytes);
      break;
    }
    case FUNC_ALLGATHER:
      for (int i = 0; i < n; i++) {
        int q = (r + i) % n;
        copyRange(outs[r] + (size_t)q * count * es, ins[q], count * es);
      }
      break;
    case FUNC_BROADCAST:
      copyRange(outs[r], ins[ph->root], count * es);
      break;
    case FUNC_ALLTOALL:
      for (int i = 0; i < n; i++) {
        int q = (r + i) % n;
        copyRange(outs[r] + (size_t)q * count * es, ins[q] + (size_t)r * count * es, count * es);
      }
      break;
    case FUNC_GATHER:
      copyRange(outs[ph->root] + (size_t)r * count * es, ins[r], count * es);
      break;
    case FUNC_SCATTER:
      copyRange(outs[r], ins[ph->root] + (size_t)r * count * es, count * es);
      break;
  }
}

int anycclCpuPeerPhase(struct ncclComm* comm, struct anycclPhase* ph, ncclResult_t* res) {
  int n = comm->nRanks, r = comm->rank;
  *res = ncclSuccess;
  if (n > ANYCCL_MAX_LANE_CONNS || comm->peerBase == NULL) return 0;
  uint64_t seq = ++comm->peerSeq;
  struct anycclXchg* me = xchgOf(comm, r);
  me->pid = getpid();
  me->in = ph->in;
  me->out = ph->out;
  me->scalar = ph->op.scalar;
  me->shareable = exportBuffer(ph->in, &me->inH, &me->inOff) && exportBuffer(ph->out, &me->outH, &me->outOff);
  __atomic_store_n(&me->seq, seq, __ATOMIC_SEQ_CST);
  ringAll(comm);
  int ok = 1;
  if ((*res = waitAll(comm, ph, 0, seq)) != ncclSuccess) {
    if (__atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
      return 1;
    /* Leaving early: nobody may start on my buffers after this (they see
     * failSeq), and if all entries are in already, somebody may have
     * started: then I stay for the handshake, doing nothing. */
    __atomic_store_n(&me->failSeq, seq, __ATOMIC_SEQ_CST);
    if (!allReached(comm, 0, seq)) {
      __atomic_store_n(&me->done, seq, __ATOMIC_RELEASE);
      ringAll(comm);
      return 1;
    }
    ok = 0;
  } else if (!anycclPeerAgree(comm, ph, seq)) {
    /* The ranks called different operations: nobody touches anything. */
    *res = ncclInvalidUsage;
    ok = 0;
  }
  /* Same decision on every rank: all in my process, or all exported. */
  for (int q = 0; q < n; q++) {
    const struct anycclXchg* x = xchgOf(comm, q);
    if (x->pid != me->pid && !x->shareable) ok = 0;
  }
  int mixed = 0;
  for (int q = 0; q < n; q++) mixed |= xchgOf(comm, q)->pid != me->pid;
  if (mixed)
    for (int q = 0; q < n; q++) ok &= xchgOf(comm, q)->shareable;
  char* ins[ANYCCL_MAX_LANE_CONNS];
  char* outs[ANYCCL_MAX_LANE_CONNS];
  if (ok && *res == ncclSuccess) {
    for (int q = 0; q < n && *res == ncclSuccess; q++) {
      const struct anycclXchg* x = xchgOf(comm, q);
      *res = importBuffer(comm, q, x->in, &x->inH, x->inOff, &ins[q]);
      if (*res == ncclSuccess) *res = importBuffer(comm, q, x->out, &x->outH, x->outOff, &outs[q]);
    }
    if (*res == ncclSuccess) peerWork(comm, ph, ins, outs);
  }
  /* Nobody leaves (or falls back to the FIFO lanes) before all are done
   * with each other's buffers. */
  __atomic_store_n(&me->done, seq, __ATOMIC_RELEASE);
  ringAll(comm);
  ncclResult_t w = waitAll(comm, ph, 1, seq);
  if (*res == ncclSuccess) *res = w;
  return ok;
}
