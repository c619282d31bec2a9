/* The cpu executor: interprets a plan on the thread that runs the stream's
 * work. Lanes of a phase progress round-robin without blocking; when none can
 * move, the rank spins briefly and then sleeps on its doorbell (futex), so
 * ranks may outnumber cores. Every wait watches the abort flag and the
 * operation timeout. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"
#include "reduce.h"
#include "trace.h"

double anycclNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int recvReady(const struct anycclConn* c) {
  return __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE) > c->step;
}
static inline int sendReady(const struct anycclConn* c) {
  return c->step - __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) < (uint64_t)c->nslots;
}
static inline char* slotPtr(const struct anycclConn* c) { return c->buf + (c->step % c->nslots) * c->slotBytes; }

static inline void recvDone(struct anycclConn* c) {
  __atomic_store_n(&c->ctrl->head, ++c->step, __ATOMIC_RELEASE);
  anycclBellRing(c->peerBell);
}
static inline void sendDone(struct anycclConn* c, size_t bytes, uint32_t tag) {
  c->ctrl->sizes[c->step % c->nslots] = anycclSizeWord(bytes, tag);
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  anycclBellRing(c->peerBell);
}

/* Sends by reference (zero copy): on a net send end whose proxy reads any
 * host memory (conn->sendRef), a slice of at least comm->zcopyMin bytes that
 * is already in the user's buffer (sent unchanged, or just written there) is
 * posted as a pointer into that buffer instead of being copied into the
 * staging slot. The memory must not change until the proxy's send completes
 * (the FIFO's head passes the slot): a step that would write over a pending
 * one waits, and the phase ends only once all of them are done, after which
 * the user may reuse the buffer. (A phase that ends by abort or error may
 * leave one being read until ncclCommAbort/ncclCommDestroy returns.) */
#define REF_MAX 128
struct refs {
  int n;
  int64_t min; /* comm->zcopyMin */
  struct {
    const char* p;
    size_t len;
    const struct anycclConn* c;
    uint64_t step; /* the slot's message number: done once head > step */
  } e[REF_MAX];
};

/* Drop the completed entries; returns how many went. */
static int refsPrune(struct refs* r) {
  int k = 0, n0 = r->n;
  for (int i = 0; i < r->n; i++)
    if (__atomic_load_n(&r->e[i].c->ctrl->head, __ATOMIC_ACQUIRE) <= r->e[i].step) r->e[k++] = r->e[i];
  r->n = k;
  return n0 - k;
}

/* May a slice of `bytes` on c go by reference? */
static int refOk(struct refs* r, const struct anycclConn* c, size_t bytes) {
  if (c->sendRef == NULL || r->min < 0 || bytes < (size_t)r->min || bytes == 0) return 0;
  if (r->n == REF_MAX) refsPrune(r);
  return r->n < REF_MAX;
}

/* Post the next slot of c as [p, p + bytes) of user memory (then sendDone). */
static void refPost(struct refs* r, struct anycclConn* c, const char* p, size_t bytes) {
  c->sendRef[c->step % c->nslots] = (char*)p;
  r->e[r->n].p = p;
  r->e[r->n].len = bytes;
  r->e[r->n].c = c;
  r->e[r->n].step = c->step;
  r->n++;
}

static int overlaps(const char* a, size_t na, const char* b, size_t nb) { return a < b + nb && b < a + na; }

/* Does [p, p + len) overlap a send still reading it? */
static int refBusy(struct refs* r, const char* p, size_t len) {
  for (int pass = 0; pass < 2; pass++) {
    int hit = 0;
    for (int i = 0; i < r->n && !hit; i++) hit = overlaps(p, len, r->e[i].p, r->e[i].len);
    if (!hit) return 0;
    if (pass == 0) refsPrune(r);
  }
  return 1;
}

/* Receives into the user's buffer: on a net receive end with recvRef, the
 * executor binds, up to nslots messages ahead, each message that a step will
 * only copy into the user's buffer (an all-gather hop, the last steps of an
 * all-reduce, a broadcast, a send/recv receive) to that place; the table
 * stores the bytes there instead of the slot when the message has the size
 * and tag the step expects (transport.h). A bound place may be written any
 * time from the binding on, so only places that no step of the phase reads
 * or writes before its own receive are bound: out-of-place ring phases, or
 * ones that do not read their input; send/recv buffers that overlap no other
 * buffer of the phase. The step then finds its bytes in place (recvAt). */
static inline char* recvAt(const struct anycclConn* c) {
  if (c->recvRef) {
    const struct anycclRecvRef* r = &c->recvRef[c->step % c->nslots];
    if (__atomic_load_n(&r->taken, __ATOMIC_ACQUIRE) == c->step + 1) return r->ptr;
  }
  return slotPtr(c);
}

static inline void bindMsg(struct anycclConn* c, uint64_t m, char* ptr, uint64_t word) {
  struct anycclRecvRef* r = &c->recvRef[m % c->nslots];
  r->ptr = ptr;
  r->word = word;
  __atomic_store_n(&r->msg, m + 1, __ATOMIC_RELEASE);
}

/* Elements of block `chunk` in a buffer of `total` elements cut in `stride`s. */
static inline size_t blockLen(size_t total, size_t stride, size_t chunk) {
  size_t start = chunk * stride;
  if (start >= total) return 0;
  return total - start < stride ? total - start : stride;
}

static char* bufPtr(const struct anycclPhase* ph, const struct anycclLane* l, int buf, const struct anycclStep* s) {
  switch (buf) {
    case BUF_IN: return ph->in + (s->inChunk * l->inStride + l->pos) * ph->elemSize;
    case BUF_OUT: return ph->out + (s->outChunk * l->outStride + l->pos) * ph->elemSize;
    case BUF_SCRATCH: return l->scratch;
    default: return NULL;
  }
}

/* Bind the lane's receives up to message `limit` (exclusive). STEPS lanes
 * with one receive end (rings, chains); step geometry as stepLaneProgress. */
static void bindSteps(const struct anycclPhase* ph, struct anycclLane* l, struct anycclConn* rc, uint64_t limit) {
  while (l->bind && l->bmsg < limit) {
    if (l->bpos >= l->end) {
      l->bind = 0;
      break;
    }
    const struct anycclStep* s = &l->steps[l->bcur];
    if (s->recv >= 0) {
      size_t len = blockLen(l->lenTotal, l->lenStride, s->chunk);
      if (len > l->end) len = l->end;
      size_t n = len > l->bpos ? len - l->bpos : 0;
      if (n > l->slice) n = l->slice;
      char* to = ph->out + (s->outChunk * l->outStride + l->bpos) * ph->elemSize;
      size_t bytes = n * ph->elemSize;
      if (n > 0 && s->in1 == BUF_NONE && s->out == BUF_OUT && !(ph->reduce && ph->op.op == anycclDevSumPostDiv) &&
          !(l->bind == 2 && overlaps(to, bytes, ph->in, l->lenStride * ph->elemSize)))
        bindMsg(rc, l->bmsg, to, anycclSizeWord(bytes, ph->tag));
      l->bmsg++;
    }
    if (++l->bcur == l->nsteps) {
      l->bcur = 0;
      l->bpos += l->slice;
    }
  }
}

/* ... P2P receive lanes: op bpos from byte bsub, a slot's bytes per message. */
static void bindP2p(const struct anycclPhase* ph, struct anycclLane* l, struct anycclConn* c, uint64_t limit) {
  while (l->bind && l->bmsg < limit) {
    if (l->bpos >= (size_t)l->nops) {
      l->bind = 0;
      break;
    }
    const struct anycclP2pOp* op = &l->ops[l->bpos];
    size_t n = op->bytes - l->bsub;
    if (n > c->slotBytes) n = c->slotBytes;
    uint32_t tag = ph->func == FUNC_SEND ? anycclP2pTag(op->bytes) : ph->tag;
    if (n > 0) bindMsg(c, l->bmsg, op->ptr + l->bsub, anycclSizeWord(n, tag));
    l->bmsg++;
    l->bsub += n;
    if (l->bsub >= op->bytes) {
      l->bsub = 0;
      l->bpos++;
    }
  }
}

/* May this lane's receives be bound (see recvAt)? Sets up its cursor and
 * returns its receive end, or NULL. */
static struct anycclConn* bindStart(const struct anycclPhase* ph, struct anycclLane* l) {
  l->bind = 0;
  if (l->kind == LANE_P2P_RECV) {
    if (l->conn == NULL || l->conn->recvRef == NULL) return NULL;
    /* every op of this lane against every op of the phase but itself */
    for (int i = 0; i < l->nops; i++)
      for (int j = 0; j < ph->nlanes; j++) {
        const struct anycclLane* o = &ph->lanes[j];
        if (o->kind == LANE_STEPS) continue;
        for (int k = 0; k < o->nops; k++)
          if (&o->ops[k] != &l->ops[i] && overlaps(l->ops[i].ptr, l->ops[i].bytes, o->ops[k].ptr, o->ops[k].bytes))
            return NULL;
      }
    l->bpos = l->pos;
    l->bsub = l->sub;
    l->bmsg = l->conn->step;
    l->bind = 1;
    return l->conn;
  }
  if (l->kind != LANE_STEPS || l->done) return NULL;
  int rv = -1, readsIn = 0;
  for (int i = 0; i < l->nsteps; i++) {
    const struct anycclStep* s = &l->steps[i];
    if (s->recv >= 0 && rv >= 0 && s->recv != rv) return NULL; /* one receive end only */
    if (s->recv >= 0) rv = s->recv;
    if ((s->recv < 0 && s->in0 == BUF_OUT) || s->in1 == BUF_OUT) return NULL; /* reads its output */
    readsIn |= (s->recv < 0 && s->in0 == BUF_IN) || s->in1 == BUF_IN;
  }
  if (rv < 0 || l->conns[rv] == NULL || l->conns[rv]->recvRef == NULL) return NULL;
  size_t span = l->lenTotal * ph->elemSize; /* bounds both buffers' extents */
  l->bind = 1;
  /* An in-place all-reduce reads block c of its input before the block's
   * final value can arrive (this rank's share is in it): its places are
   * free. An in-place all-gather's input is one block of its output: the
   * other blocks are. Other overlaps: no binding. */
  if (readsIn && ph->in && overlaps(ph->in, span, ph->out, span)) {
    if (ph->func == FUNC_ALLGATHER) l->bind = 2;
    else if (!(ph->func == FUNC_ALLREDUCE && ph->in == ph->out)) return NULL;
  }
  l->bcur = l->cur;
  l->bpos = l->pos;
  l->bmsg = l->conns[rv]->step;
  return l->conns[rv];
}

/* A received slot's size word against the one expected: a word without a
 * tag (a peer that does not tag) is checked on its bytes only. */
static inline int slotMatches(uint64_t got, uint64_t want) {
  return got == want || ((got >> 32) == 0 && (uint32_t)got == (uint32_t)want);
}

/* ANYCCL_TRACE: a step could not run (the first time: the wait starts). */
static inline void traceBlocked(struct anycclTraceBuf* tb, struct anycclLane* l, int recvSide) {
  if (tb && l->trWaitT == 0) {
    l->trWaitT = anycclNowSec() * 1e6;
    l->trWaitRecv = recvSide;
  }
}
/* A step ran from t0 to now: its wait (if any), its send and its receive. */
static void traceStep(struct anycclTraceBuf* tb, struct anycclLane* l, int li, uint64_t seq, double t0,
                      const struct anycclConn* rc, const struct anycclConn* sc, size_t bytes) {
  double t1 = anycclNowSec() * 1e6;
  if (l->trWaitT > 0) {
    anycclTraceAddRec(tb, l->trWaitRecv ? TR_RECVWAIT : TR_BUFWAIT, l->trWaitT, t0, seq, li, -1, 0, 0, 0, 0);
    l->trWaitT = 0;
  }
  if (sc) anycclTraceAddRec(tb, TR_SEND, t0, t1, seq, li, sc->peer, l->trSends++, (double)bytes, 0, sc->net);
  if (rc) anycclTraceAddRec(tb, TR_RECV, t0, t1, seq, li, rc->peer, l->trRecvs++, (double)bytes, 0, rc->net);
}

/* Run as many steps of a STEPS lane as are ready. Returns the number done,
 * or -1 on a protocol error (size or tag mismatch: ranks disagree on the
 * call; nothing of the slot was used). */
static int stepLaneProgress(struct anycclPhase* ph, struct anycclLane* l, int li, struct ncclComm* comm,
                            uint64_t seq, struct refs* refs) {
  int done = 0;
  struct anycclTraceBuf* tb = comm->trace;
  while (!l->done) {
    const struct anycclStep* s = &l->steps[l->cur];
    struct anycclConn* rc = s->recv >= 0 ? l->conns[s->recv] : NULL;
    struct anycclConn* sc = s->send >= 0 ? l->conns[s->send] : NULL;
    if ((rc && !recvReady(rc)) || (sc && !sendReady(sc))) {
      traceBlocked(tb, l, rc && !recvReady(rc));
      break;
    }
    double t0 = tb ? anycclNowSec() * 1e6 : 0;
    /* Elements this step moves: the slice of block `chunk` at pos. */
    size_t len = blockLen(l->lenTotal, l->lenStride, s->chunk);
    if (len > l->end) len = l->end; /* this lane's share of the block ends there */
    size_t n = len > l->pos ? len - l->pos : 0;
    if (n > l->slice) n = l->slice;
    size_t bytes = n * ph->elemSize;
    const void* in0;
    if (rc) {
      uint64_t got = rc->ctrl->sizes[rc->step % rc->nslots], want = anycclSizeWord(bytes, ph->tag);
      if (!slotMatches(got, want)) {
        if (!anycclMismatchSlot(comm, ph, rc, want, got)) return -1;
        recvDone(rc); /* a remote peer's signature, not data */
        continue;
      }
      in0 = recvAt(rc);
    } else {
      in0 = bufPtr(ph, l, s->in0, s);
    }
    const void* in1 = s->in1 != BUF_NONE ? bufPtr(ph, l, s->in1, s) : NULL;
    void* out0 = s->out != BUF_NONE ? bufPtr(ph, l, s->out, s) : NULL;
    if (n > 0 && s->out == BUF_OUT && refs->n > 0 && refBusy(refs, out0, bytes)) {
      traceBlocked(tb, l, 0); /* the user's buffer is still being sent from */
      break;
    }
    void* out1 = sc ? slotPtr(sc) : NULL;
    unsigned flags = 0;
    if (ph->reduce && ph->op.op == anycclDevPreMulSum) {
      if (!rc && s->in0 == BUF_IN) flags |= ANYCCL_RED_PREMUL_IN0;
      if (s->in1 == BUF_IN) flags |= ANYCCL_RED_PREMUL_IN1;
    }
    /* The send's bytes already sit in the user's buffer: an unchanged input,
     * or the output this step writes (unless only the output is divided). */
    const char* ref = NULL;
    if (sc && refOk(refs, sc, bytes)) {
      if (!rc && in1 == NULL && flags == 0 && (s->in0 == BUF_IN || s->in0 == BUF_OUT)) ref = in0;
      else if (s->out == BUF_OUT && !(ph->reduce && ph->op.op == anycclDevSumPostDiv)) ref = out0;
      if (ref) out1 = NULL;
    }
    if (out0 == NULL) {
      out0 = out1;
      out1 = NULL;
    } else if (s->out == BUF_OUT && ph->reduce && ph->op.op == anycclDevSumPostDiv) {
      flags |= ANYCCL_RED_POSTDIV_OUT0;
    }
    if (n > 0 && out0 != NULL && !(out0 == in0 && in1 == NULL && out1 == NULL && flags == 0))
      anycclReduce(&ph->op, n, in0, in1, out0, out1, flags);
    if (rc && l->bind) bindSteps(ph, l, rc, rc->step + 1 + (uint64_t)rc->nslots);
    if (rc) recvDone(rc);
    if (ref) refPost(refs, sc, ref, bytes);
    if (sc) sendDone(sc, bytes, ph->tag);
    if (tb) traceStep(tb, l, li, seq, t0, rc, sc, bytes);
    done++;
    if (++l->cur == l->nsteps) {
      l->cur = 0;
      l->pos += l->slice;
      if (l->pos >= l->end) l->done = 1;
    }
  }
  return done;
}

static int p2pLaneProgress(struct anycclPhase* ph, struct anycclLane* l, int li, struct ncclComm* comm,
                           uint64_t seq, struct refs* refs) {
  int done = 0;
  struct anycclConn* c = l->conn;
  struct anycclTraceBuf* tb = comm->trace;
  while (!l->done) {
    if (l->pos == (size_t)l->nops) {
      l->done = 1;
      break;
    }
    struct anycclP2pOp* op = &l->ops[l->pos];
    size_t n = op->bytes - l->sub;
    if (n > c->slotBytes) n = c->slotBytes;
    /* a collective's tag, or the send's bytes */
    uint32_t tag = ph->func == FUNC_SEND ? anycclP2pTag(op->bytes) : ph->tag;
    int send = l->kind == LANE_P2P_SEND;
    if (send ? !sendReady(c) : !recvReady(c)) {
      traceBlocked(tb, l, !send);
      break;
    }
    double t0 = tb ? anycclNowSec() * 1e6 : 0;
    if (!send && refs->n > 0 && refBusy(refs, op->ptr + l->sub, n)) {
      traceBlocked(tb, l, 0); /* the user's buffer is still being sent from */
      break;
    }
    if (send) {
      if (refOk(refs, c, n)) refPost(refs, c, op->ptr + l->sub, n);
      else memcpy(slotPtr(c), op->ptr + l->sub, n);
      sendDone(c, n, tag);
    } else {
      uint64_t got = c->ctrl->sizes[c->step % c->nslots], want = anycclSizeWord(n, tag);
      if (!slotMatches(got, want)) {
        if (!anycclMismatchSlot(comm, ph, c, want, got)) return -1;
        recvDone(c); /* a remote peer's signature, not data */
        continue;
      }
      char* at = recvAt(c);
      if (at != op->ptr + l->sub) memcpy(op->ptr + l->sub, at, n);
      if (l->bind) bindP2p(ph, l, c, c->step + 1 + (uint64_t)c->nslots);
      recvDone(c);
    }
    if (tb) traceStep(tb, l, li, seq, t0, send ? NULL : c, send ? c : NULL, n);
    done++;
    l->sub += n;
    if (l->sub >= op->bytes) {
      l->sub = 0;
      l->pos++;
    }
  }
  return done;
}

static void copyLaneRun(struct anycclLane* l) {
  for (int i = 0; i + 1 < l->nops; i += 2)
    if (l->ops[i].ptr != l->ops[i + 1].ptr) memmove(l->ops[i + 1].ptr, l->ops[i].ptr, l->ops[i].bytes);
  l->done = 1;
}

/* Sleep on the doorbell until it moves past `seen` (or a short timeout). */
void anycclBellWait(struct anycclBell* b, uint32_t seen) {
  struct timespec ts = {0, 20 * 1000 * 1000};
  __atomic_add_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &b->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
  __atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
}

static inline int stopped(struct ncclComm* comm) {
  return __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE);
}

/* Is the process of a same-host peer gone (or a zombie)? */
static int processDead(int pid) {
  if (kill(pid, 0) == 0) {
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (f == NULL) return 0;
    size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[got] = '\0';
    const char* p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
  }
  return errno == ESRCH;
}

ncclResult_t anycclCheckPeers(struct ncclComm* comm, const char* what) {
  int me = getpid();
  for (int q = 0; q < comm->nRanks; q++) {
    const struct anycclPeerInfo* p = &comm->peerInfo[q];
    if (p->pid == me || p->hostHash != comm->peerInfo[comm->rank].hostHash) continue;
    if (processDead(p->pid)) {
      WARN("%s: rank %d's peer rank %d (pid %d) has exited; the communicator is in error (ncclCommAbort it)", what,
           comm->rank, q, p->pid);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

static ncclResult_t runLanes(struct ncclComm* comm, struct anycclPhase* ph, uint64_t seq, double t0);

static ncclResult_t runPhase(struct ncclComm* comm, struct anycclPhase* ph, uint64_t seq) {
  struct anycclTraceBuf* tb = comm->trace;
  double t0 = tb ? anycclNowSec() * 1e6 : 0;
  ncclResult_t res = ncclSuccess;
  anycclOpPublish(comm, ph);
  if (!ph->peerFunc || !(anycclCpuPeerPhase(comm, ph, &res) || res != ncclSuccess)) res = runLanes(comm, ph, seq, t0);
  if (tb)
    anycclTraceAddRec(tb, TR_COLL, t0, anycclNowSec() * 1e6, seq, 0, -1, 0, (double)ph->count * ph->elemSize,
                      ph->func, 0);
  return res;
}

static ncclResult_t runLanes(struct ncclComm* comm, struct anycclPhase* ph, uint64_t seq, double t0) {
  struct anycclTraceBuf* tb = comm->trace;
  int remaining = ph->nlanes;
  int spins = 0;
  if (ph->scalarPtr) memcpy(&ph->op.scalar, ph->scalarPtr, ph->elemSize);
  double lastProgress = 0, lastCheck = 0;
  int sigSent = 0;
  struct refs refs;
  refs.n = 0;
  refs.min = comm->zcopyMin;
  for (int i = 0; i < ph->nlanes; i++) {
    struct anycclLane* l = &ph->lanes[i];
    if (l->kind == LANE_COPY) copyLaneRun(l);
    if (l->kind == LANE_STEPS && l->begin >= l->end) l->done = 1;
    if (l->done) {
      remaining--;
      continue;
    }
    struct anycclConn* bc = refs.min >= 0 ? bindStart(ph, l) : NULL; /* then the messages already postable */
    if (bc && l->kind == LANE_STEPS) bindSteps(ph, l, bc, bc->step + (uint64_t)bc->nslots);
    else if (bc) bindP2p(ph, l, bc, bc->step + (uint64_t)bc->nslots);
  }
  /* the lanes, then the sends still reading the user's buffers */
  while (remaining > 0 || refs.n > 0) {
    uint32_t seen = __atomic_load_n(&comm->bell->bell, __ATOMIC_SEQ_CST);
    int progress = remaining == 0 ? refsPrune(&refs) : 0;
    for (int i = 0; i < ph->nlanes; i++) {
      struct anycclLane* l = &ph->lanes[i];
      if (l->done) continue;
      int d = l->kind == LANE_STEPS ? stepLaneProgress(ph, l, i, comm, seq, &refs)
                                    : p2pLaneProgress(ph, l, i, comm, seq, &refs);
      if (d < 0) return ncclInvalidUsage;
      progress += d;
      if (l->done) {
        remaining--;
        if (tb) anycclTraceAddRec(tb, TR_LANE, t0, anycclNowSec() * 1e6, seq, i, -1, 0, 0, 0, 0);
      }
    }
    if (progress) {
      spins = 0;
      lastProgress = 0;
      continue;
    }
    if (stopped(comm)) return ncclSuccess;
    ncclResult_t async = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
    if (async != ncclSuccess && async != ncclInProgress) return async; /* e.g. the proxy lost a peer */
    if (++spins < comm->spinCount) {
      if (comm->yieldSpin) sched_yield();
      else anycclCpuRelax();
      continue;
    }
    double t = anycclNowSec();
    if (lastProgress == 0) lastProgress = lastCheck = t;
    if (comm->peerCheckMs > 0 && (t - lastCheck) * 1000 >= comm->peerCheckMs) {
      lastCheck = t;
      ncclResult_t dead = anycclCheckPeers(comm, ph->what);
      if (dead != ncclSuccess) return dead;
    }
    ncclResult_t bad = anycclMismatchPoll(comm, ph);
    if (bad != ncclSuccess) return bad;
    if (!sigSent && comm->proxy && (t - lastProgress) * 1000 >= (comm->peerCheckMs > 0 ? comm->peerCheckMs : 500)) {
      sigSent = 1;
      anycclSigSend(comm, ph);
    }
    if (comm->opTimeoutSec > 0 && t - lastProgress > comm->opTimeoutSec) {
      WARN("%s: rank %d made no progress for %lld s (ANYCCL_OP_TIMEOUT): a peer is gone or did not call the "
           "same operation; the communicator is now in error",
           ph->what, comm->rank, (long long)comm->opTimeoutSec);
      return ncclSystemError;
    }
    anycclBellWait(comm->bell, seen);
  }
  return ncclSuccess;
}

/* Plans of one communicator run in launch order even when they were
 * launched on different streams (they share the connections). */
static int waitTurn(struct ncclComm* comm, uint64_t seq) {
  while (__atomic_load_n(&comm->execNext, __ATOMIC_ACQUIRE) != seq) {
    uint32_t seen = __atomic_load_n(&comm->bell->bell, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&comm->execNext, __ATOMIC_ACQUIRE) == seq) break;
    if (stopped(comm)) return 0;
    anycclBellWait(comm->bell, seen);
  }
  return 1;
}

void anycclCpuExecute(void* arg) {
  struct anycclPlan* plan = arg;
  struct ncclComm* comm = plan->comm;
  ncclResult_t res = ncclSuccess;
  if (waitTurn(comm, plan->seq)) {
    for (int p = 0; p < plan->nphases && res == ncclSuccess; p++) {
      if (stopped(comm)) break;
      res = runPhase(comm, &plan->phases[p], plan->seq);
    }
    __atomic_store_n(&comm->execNext, plan->seq + 1, __ATOMIC_RELEASE);
    anycclBellRing(comm->bell);
  }
  if (res != ncclSuccess && !stopped(comm)) anycclCommSetError(comm, res);
  anycclPlanFree(plan);
  anycclCommWorkDone(comm);
}
