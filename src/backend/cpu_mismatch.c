/* Ranks that call different operations (cpu backend).
 *
 * NCCL leaves a mismatch (another count, type, op or root on one rank, a
 * send whose size is not the receive's) to hang or to corrupt memory. Here
 * every rank ends the operation with ncclInvalidUsage and one WARN that
 * names the ranks and what each called, on every path, at no cost on the
 * fast path:
 *
 *   - every slot's size word carries a tag of the operation (collective
 *     number and a hash of its signature; for send/recv the bytes of the
 *     send), checked by the receiving lane with the size it already checked;
 *     the network proxy carries the tag in its message header;
 *   - every collective phase publishes its signature in the rank's exchange
 *     entry (a seqlock; a few stores): the single-copy exchange compares all
 *     entries before touching any peer's buffer, and a waiting rank (FIFO
 *     lanes or the exchange) compares its peers' entries on its slow path,
 *     which is how two ranks on different paths (one in the exchange, one
 *     in the FIFO lanes) notice each other;
 *   - the rank that finds a mismatch writes a report into its entry (local
 *     peers adopt it) and sends it as a poisoned slot to its remote peers
 *     (their proxies adopt it), so that a rank whose part already completed
 *     (a broadcast root, a sender) learns it through ncclCommGetAsyncError.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "checks.h"
#include "comm.h"
#include "plan.h"

struct sig {
  uint64_t num, count;
  int32_t func, type, red, root;
};

static int isReduce(int f) { return f == FUNC_ALLREDUCE || f == FUNC_REDUCE || f == FUNC_REDUCESCATTER; }
static int isRooted(int f) { return f == FUNC_BROADCAST || f == FUNC_REDUCE || f == FUNC_GATHER || f == FUNC_SCATTER; }

static struct sig sigOf(const struct ncclComm* comm, const struct anycclPhase* ph) {
  struct sig s = {comm->collNum, ph->count, ph->func, (int32_t)ph->op.type, -1, -1};
  if (isReduce(ph->func)) s.red = (int32_t)ph->op.op;
  if (isRooted(ph->func)) s.root = ph->root;
  return s;
}

static int sigEqual(const struct sig* a, const struct sig* b) {
  return a->num == b->num && a->count == b->count && a->func == b->func && a->type == b->type && a->red == b->red &&
         a->root == b->root;
}

uint64_t anycclMix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

uint32_t anycclP2pTag(size_t bytes) {
  if (bytes < (1u << 29)) return ANYCCL_TAG_P2P | (uint32_t)bytes;
  uint32_t h = (uint32_t)anycclMix64(bytes) & 0x1fffffffu;
  if ((ANYCCL_TAG_P2P | 1u << 29 | h) == 0xffffbda7u) h ^= 1; /* never the socket's goodbye tag */
  return ANYCCL_TAG_P2P | 1u << 29 | h;
}

static uint64_t sigHash(const struct sig* s) {
  return anycclMix64(s->count ^ anycclMix64((uint64_t)s->func << 48 ^ (uint64_t)(s->type & 0xffff) << 32 ^
                                            (uint64_t)(s->red & 0xffff) << 16 ^ (uint64_t)(s->root & 0xffff)));
}

uint64_t anycclSigHash(const struct ncclComm* comm, const struct anycclPhase* ph) {
  struct sig s = sigOf(comm, ph);
  return sigHash(&s);
}

void anycclOpPublish(struct ncclComm* comm, struct anycclPhase* ph) {
  ph->tag = 0;
  if (ph->func == FUNC_SEND) return; /* send/recv: a tag per transfer */
  comm->collNum++;
  struct sig s = sigOf(comm, ph);
  uint64_t h = sigHash(&s);
  ph->tag = ANYCCL_TAG_COLL | (uint32_t)(s.num & 0xff) << 22 | (uint32_t)(h & 0x3fffff);
  if (comm->peerBase == NULL) return;
  struct anycclXchg* x = anycclXchgOf(comm, comm->rank);
  uint64_t v = x->opVer;
  /* fields stored with release after the odd version, loaded with acquire
   * before the second version load: a seqlock without fences (x86: plain
   * moves; ThreadSanitizer understands it) */
  __atomic_store_n(&x->opVer, v + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&x->opNum, s.num, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opCount, s.count, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opFunc, s.func, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opType, s.type, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opRed, s.red, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opRoot, s.root, __ATOMIC_RELEASE);
  __atomic_store_n(&x->opVer, v + 2, __ATOMIC_RELEASE);
}

/* A local peer's published collective; 0 if none yet or being rewritten. */
static int readSig(struct ncclComm* comm, int q, struct sig* s) {
  struct anycclXchg* x = anycclXchgOf(comm, q);
  uint64_t v1 = __atomic_load_n(&x->opVer, __ATOMIC_ACQUIRE);
  s->num = __atomic_load_n(&x->opNum, __ATOMIC_ACQUIRE);
  s->count = __atomic_load_n(&x->opCount, __ATOMIC_ACQUIRE);
  s->func = __atomic_load_n(&x->opFunc, __ATOMIC_ACQUIRE);
  s->type = __atomic_load_n(&x->opType, __ATOMIC_ACQUIRE);
  s->red = __atomic_load_n(&x->opRed, __ATOMIC_ACQUIRE);
  s->root = __atomic_load_n(&x->opRoot, __ATOMIC_ACQUIRE);
  uint64_t v2 = __atomic_load_n(&x->opVer, __ATOMIC_RELAXED);
  return v1 == v2 && !(v1 & 1) && s->num > 0;
}

static const char* redName(int red) {
  static const char* names[] = {"sum", "prod", "max", "min", "premulsum", "avg"};
  return red >= 0 && red < (int)(sizeof(names) / sizeof(names[0])) ? names[red] : "?";
}

/* "count 100000 float sum" (and the root of rooted collectives). */
static void describe(char* buf, size_t cap, const struct sig* s, int withFunc) {
  int k = snprintf(buf, cap, "%s%scount %llu %s", withFunc ? anycclFuncName(s->func) : "", withFunc ? " " : "",
                   (unsigned long long)s->count, anycclTypeName((ncclDataType_t)s->type));
  if (k > 0 && (size_t)k < cap && s->red >= 0) k += snprintf(buf + k, cap - k, " %s", redName(s->red));
  if (k > 0 && (size_t)k < cap && s->root >= 0) snprintf(buf + k, cap - k, " root %d", s->root);
}

/* ---- reports ---------------------------------------------------------------- */
static int warnOnce(struct ncclComm* comm) {
  uint32_t no = 0;
  return __atomic_compare_exchange_n(&comm->mismatchWarned, &no, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Publish `text` for my local peers (once). */
static void publish(struct ncclComm* comm, const char* text) {
  if (comm->peerBase == NULL) return;
  struct anycclXchg* me = anycclXchgOf(comm, comm->rank);
  uint32_t no = 0;
  if (!__atomic_compare_exchange_n(&me->reported, &no, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  snprintf(me->report, sizeof(me->report), "%s", text);
  __atomic_store_n(&me->reported, 1, __ATOMIC_RELEASE);
  for (int q = 0; q < comm->nRanks; q++)
    if (q != comm->rank && comm->peerBase[q]) anycclBellRing((struct anycclBell*)comm->peerBase[q]);
}

/* Send `text` to every remote peer as a poisoned slot (executor thread:
 * the p2p send FIFOs are its own). A full FIFO skips that peer. The report
 * must leave before this rank's user aborts (an abort drops unsent slots and
 * the peer would wait on): wait up to 1 s for the proxy to send it. */
static void poisonRemotes(struct ncclComm* comm, const char* text) {
  size_t len = strlen(text) + 1;
  int posted = 0;
  for (int q = 0; q < comm->nRanks && comm->p2pSend; q++) {
    struct anycclConn* c = &comm->p2pSend[q];
    if (q == comm->rank || !c->net || c->ctrl == NULL) continue;
    if (c->step - __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) >= (uint64_t)c->nslots) continue;
    size_t n = len < c->slotBytes ? len : c->slotBytes;
    memcpy(c->buf + (c->step % c->nslots) * c->slotBytes, text, n);
    c->ctrl->sizes[c->step % c->nslots] = anycclSizeWord(n, ANYCCL_TAG_POISON);
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
    anycclBellRing(c->peerBell);
    posted = 1;
  }
  for (double end = anycclNowSec() + 1; posted && anycclNowSec() < end;) {
    posted = 0;
    for (int q = 0; q < comm->nRanks; q++) {
      struct anycclConn* c = &comm->p2pSend[q];
      if (q != comm->rank && c->net && c->ctrl && __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) < c->step)
        posted = 1;
    }
    if (posted) usleep(500);
  }
}

/* This rank found the mismatch described by `text`. */
static void found(struct ncclComm* comm, const char* text) {
  if (warnOnce(comm))
    WARN("%s: the ranks called different operations; the communicator is in error (ncclCommAbort it)", text);
  anycclCommSetError(comm, ncclInvalidUsage); /* before a peer's abort can make it a network error */
  publish(comm, text);
  poisonRemotes(comm, text);
}

/* A peer found it: adopt its report. */
static void adopt(struct ncclComm* comm, int peer, const char* text) {
  if (warnOnce(comm))
    WARN("rank %d: rank %d reports that the ranks called different operations: %s; the communicator is in error "
         "(ncclCommAbort it)",
         comm->rank, peer, text);
  anycclCommSetError(comm, ncclInvalidUsage);
  publish(comm, text);
}

static int peerReport(struct ncclComm* comm, char* text, size_t cap) {
  for (int q = 0; q < comm->nRanks; q++) {
    if (q == comm->rank || comm->peerBase[q] == NULL) continue;
    struct anycclXchg* x = anycclXchgOf(comm, q);
    if (__atomic_load_n(&x->reported, __ATOMIC_ACQUIRE) == 1) {
      snprintf(text, cap, "%s", x->report);
      return q;
    }
  }
  return -1;
}

void anycclMismatchRemote(struct ncclComm* comm, int peer, const char* text, size_t len) {
  char buf[sizeof(((struct anycclXchg*)0)->report)];
  size_t n = len < sizeof(buf) ? len : sizeof(buf) - 1;
  memcpy(buf, text, n);
  buf[n] = '\0';
  if (n == 0) /* a GPU kernel's poison slot carries no text */
    snprintf(buf, sizeof(buf), "its kernel received data of another operation or a poisoned connection");
  adopt(comm, peer, buf);
  if (comm->cuda) anycclCudaPoisoned(comm, peer); /* this rank's kernels stop and poison their connections */
  if (comm->bell) anycclBellRing(comm->bell);
}

ncclResult_t anycclCpuAsyncError(struct ncclComm* comm) {
  /* READY: init (which sets peerBase) has finished; FAILED: already in error */
  if (__atomic_load_n(&comm->state, __ATOMIC_ACQUIRE) != COMM_READY || comm->cuda || comm->peerBase == NULL)
    return ncclSuccess;
  char text[256];
  int q = peerReport(comm, text, sizeof(text));
  if (q < 0) return ncclSuccess;
  adopt(comm, q, text);
  return ncclInvalidUsage;
}

/* ---- detection ---------------------------------------------------------------- */
/* Ranks a and b published different signatures sa, sb. */
static void sigsDiffer(struct ncclComm* comm, int a, const struct sig* sa, int b, const struct sig* sb) {
  char da[128], db[128], text[400];
  if (a > b) {
    int t = a;
    a = b;
    b = t;
    const struct sig* u = sa;
    sa = sb;
    sb = u;
  }
  int same = sa->func == sb->func && sa->num == sb->num;
  describe(da, sizeof(da), sa, !same);
  describe(db, sizeof(db), sb, !same);
  if (same)
    snprintf(text, sizeof(text), "%s: rank %d has %s, rank %d has %s", anycclFuncName(sa->func), a, da, b, db);
  else
    snprintf(text, sizeof(text), "collective #%llu on rank %d is %s, #%llu on rank %d is %s",
             (unsigned long long)sa->num, a, da, (unsigned long long)sb->num, b, db);
  found(comm, text);
}

/* A remote peer's signature in slot `s` of c: 1 if it disagrees with my
 * collective of the same number (reported), else 0. */
static int remoteSigDiffers(struct ncclComm* comm, const struct anycclPhase* ph, const struct anycclConn* c,
                            uint64_t s) {
  struct sig theirs, mine = sigOf(comm, ph);
  if (ph->func == FUNC_SEND || (uint32_t)c->ctrl->sizes[s % c->nslots] != sizeof(theirs)) return 0;
  memcpy(&theirs, c->buf + (s % c->nslots) * c->slotBytes, sizeof(theirs));
  if (theirs.num != mine.num || sigEqual(&mine, &theirs)) return 0;
  sigsDiffer(comm, comm->rank, &mine, c->peer, &theirs);
  return 1;
}

void anycclSigSend(struct ncclComm* comm, const struct anycclPhase* ph) {
  /* over a net that drops tags the peer could not tell the signature from
   * data (it would see a slot of the wrong size): send none */
  if (ph->func == FUNC_SEND || comm->p2pSend == NULL || !anycclNetCarriesTags(comm)) return;
  struct sig mine = sigOf(comm, ph);
  int sent = 0;
  for (int q = 0; q < comm->nRanks; q++) {
    struct anycclConn* c = &comm->p2pSend[q];
    if (q == comm->rank || !c->net || c->ctrl == NULL) continue;
    if (c->step - __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE) >= (uint64_t)c->nslots) continue;
    memcpy(c->buf + (c->step % c->nslots) * c->slotBytes, &mine, sizeof(mine));
    c->ctrl->sizes[c->step % c->nslots] = anycclSizeWord(sizeof(mine), ANYCCL_TAG_SIG);
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
    anycclBellRing(c->peerBell);
    sent++;
  }
  INFO(NCCL_COLL, "%s: rank %d stalled in collective #%llu: its signature went to %d remote peers",
       anycclFuncName(ph->func), comm->rank, (unsigned long long)mine.num, sent);
}

int anycclMismatchSlot(struct ncclComm* comm, const struct anycclPhase* ph, const struct anycclConn* c,
                       uint64_t want, uint64_t got) {
  uint32_t gtag = (uint32_t)(got >> 32), wtag = (uint32_t)(want >> 32);
  unsigned gbytes = (unsigned)got, wbytes = (unsigned)want;
  int r = comm->rank, q = c->peer;
  if (gtag == ANYCCL_TAG_SIG) return !remoteSigDiffers(comm, ph, c, c->step);
  if (gtag == ANYCCL_TAG_POISON) return 0; /* the proxy adopted the report */
  struct sig mine = sigOf(comm, ph), theirs;
  if (ph->func != FUNC_SEND && comm->peerBase && comm->peerBase[q] && readSig(comm, q, &theirs) &&
      theirs.num == mine.num && !sigEqual(&mine, &theirs)) {
    sigsDiffer(comm, r, &mine, q, &theirs);
    return 0;
  }
  /* A net without tags (an NCCL net plugin: NCCL's test() has no room for
   * anyccl's goodbye) shows the goodbye a peer sends when it destroys or
   * aborts its communicator as a receive of 0 bytes (the plans send no
   * empty slots): the peer is gone, it did not call another operation. */
  if (gbytes == 0 && gtag == 0 && wbytes != 0 && !anycclNetCarriesTags(comm)) {
    if (warnOnce(comm))
      WARN("%s: rank %d expected %u bytes from rank %d, which closed its connection (it destroyed or aborted its "
           "communicator); the communicator is in error (ncclCommAbort it)", anycclFuncName(ph->func), r, wbytes, q);
    anycclCommSetError(comm, ncclRemoteError);
    return 0;
  }
  char text[400], d[128];
  describe(d, sizeof(d), &mine, 0);
  if (ph->func == FUNC_SEND && ANYCCL_TAG_KIND(gtag) == ANYCCL_TAG_P2P && !(gtag & 1u << 29) && !(wtag & 1u << 29))
    snprintf(text, sizeof(text), "send/recv: rank %d receives %u bytes from rank %d, which sends %u", r,
             wtag & 0x1fffffffu, q, gtag & 0x1fffffffu);
  else if (ph->func == FUNC_SEND)
    snprintf(text, sizeof(text), "send/recv: rank %d receives from rank %d, which sent %s (a slot of %u bytes where "
             "%u were due)", r, q, ANYCCL_TAG_KIND(gtag) == ANYCCL_TAG_COLL ? "collective data" : "another size",
             gbytes, wbytes);
  else if (ANYCCL_TAG_KIND(gtag) == ANYCCL_TAG_P2P)
    snprintf(text, sizeof(text), "%s: rank %d has %s (collective #%llu), but rank %d sent point-to-point data",
             anycclFuncName(ph->func), r, d, (unsigned long long)mine.num, q);
  else if (gtag == 0 || wtag == 0)
    snprintf(text, sizeof(text), "%s: rank %d has %s and expected %u bytes from rank %d, which sent %u",
             anycclFuncName(ph->func), r, d, wbytes, q, gbytes);
  else
    snprintf(text, sizeof(text), "%s: rank %d has %s (collective #%llu), but rank %d sent data of %s (a slot of %u "
             "bytes where %u were due)", anycclFuncName(ph->func), r, d, (unsigned long long)mine.num, q,
             ((gtag >> 22) & 0xff) == ((wtag >> 22) & 0xff) ? "the same collective with another count, type, op or "
             "root" : "another collective", gbytes, wbytes);
  found(comm, text);
  return 0;
}

ncclResult_t anycclMismatchPoll(struct ncclComm* comm, const struct anycclPhase* ph) {
  if (comm->peerBase == NULL) return ncclSuccess;
  int n = comm->nRanks, r = comm->rank;
  char text[256];
  int q = peerReport(comm, text, sizeof(text));
  if (q >= 0) {
    adopt(comm, q, text);
    return ncclInvalidUsage;
  }
  if (__atomic_load_n(&comm->mismatchWarned, __ATOMIC_ACQUIRE)) return ncclInvalidUsage; /* the proxy got one */
  if (ph->func == FUNC_SEND) return ncclSuccess; /* send/recv: the lanes check sizes and tags */
  /* A local peer at the same collective with other arguments. */
  struct sig mine = sigOf(comm, ph), theirs;
  for (q = 0; q < n; q++) {
    if (q == r || comm->peerBase[q] == NULL) continue;
    if (readSig(comm, q, &theirs) && theirs.num == mine.num && !sigEqual(&mine, &theirs)) {
      sigsDiffer(comm, r, &mine, q, &theirs);
      return ncclInvalidUsage;
    }
  }
  /* Data of this collective number, but of another signature, waiting in
   * any of my FIFOs (a peer on another path: ring, direct, mesh). */
  for (int i = 0; i < comm->nChannels + n; i++) {
    struct anycclConn* c = i < comm->nChannels ? &comm->ringRecv[i] : &comm->p2pRecv[i - comm->nChannels];
    if (c->ctrl == NULL || c->peer == r) continue;
    uint64_t tail = __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE);
    for (uint64_t s = c->step; s < tail && s < c->step + (uint64_t)c->nslots; s++) {
      uint64_t w = c->ctrl->sizes[s % c->nslots];
      uint32_t t = (uint32_t)(w >> 32);
      if (t == ANYCCL_TAG_SIG) {
        if (remoteSigDiffers(comm, ph, c, s)) return ncclInvalidUsage;
        if (s == c->step) { /* consumed here, unless a lane reaches it first */
          __atomic_store_n(&c->ctrl->head, ++c->step, __ATOMIC_RELEASE);
          anycclBellRing(c->peerBell);
        }
        continue;
      }
      if (ANYCCL_TAG_KIND(t) == ANYCCL_TAG_COLL && ((t ^ ph->tag) & 0x3fc00000u) == 0 && t != ph->tag) {
        anycclMismatchSlot(comm, ph, c, anycclSizeWord(0, ph->tag), w);
        return ncclInvalidUsage;
      }
    }
  }
  return ncclSuccess;
}

int anycclPeerAgree(struct ncclComm* comm, const struct anycclPhase* ph, uint64_t seq) {
  int n = comm->nRanks, r = comm->rank;
  for (int q = 0; q < n; q++) {
    if (__atomic_load_n(&anycclXchgOf(comm, q)->failSeq, __ATOMIC_SEQ_CST) != seq) continue;
    char text[256];
    int p = peerReport(comm, text, sizeof(text));
    if (p >= 0) adopt(comm, p, text);
    else if (warnOnce(comm))
      WARN("%s: rank %d left the single-copy exchange on an error; the communicator is in error (ncclCommAbort it)",
           anycclFuncName(ph->func), q);
    return 0;
  }
  /* Everybody against rank 0, so that every rank prints the same pair. */
  struct sig first = sigOf(comm, ph), theirs;
  if (r != 0 && !readSig(comm, 0, &first)) first = (struct sig){0, 0, ph->func, -1, -1, -1};
  for (int q = 1; q < n; q++) {
    int ok = q == r ? (theirs = sigOf(comm, ph), 1) : readSig(comm, q, &theirs);
    if (ok && sigEqual(&first, &theirs)) continue;
    if (!ok) theirs = (struct sig){0, 0, ph->func, -1, -1, -1};
    sigsDiffer(comm, 0, &first, q, &theirs);
    return 0;
  }
  return 1;
}
