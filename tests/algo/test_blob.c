/* The cuda backend's kernel-parameter blob, checked on a machine without a
 * GPU: plans are built by the real schedules for a communicator configured
 * as on GPUs, encoded by the real encoder (cuda_backend.c), then decoded the
 * way the kernel does (exec.cu: parse, then each block rebuilds its lane
 * from the 40-byte wire lane and its shape) and compared with the plan.
 * Also checks the ring channel count chosen per size, and that mid-size
 * phases fit the 4 KB entry point (a larger blob costs every launch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "cuda_exec.h"
#include "plan.h"

static int fails, checks;
#define EXPECT(c, ...)                                             \
  do {                                                             \
    checks++;                                                      \
    if (!(c)) {                                                    \
      fails++;                                                     \
      fprintf(stderr, "FAIL %s:%d (%s): ", __FILE__, __LINE__, #c); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, "\n");                                       \
    }                                                              \
  } while (0)

#define SLOT (512u << 10)

/* A communicator as the cuda backend sets one up (4 ranks by default): two
 * ring shapes alternating over the channels, so that lanes of different
 * channels run different step programs and equal ones can be shared. */
static struct ncclComm* fakeComm(int n, int r, int nch) {
  struct ncclComm* c = calloc(1, sizeof(*c));
  c->nRanks = n;
  c->rank = r;
  c->nChannels = nch;
  c->nHosts = 1;
  c->cuda = 1;
  c->ringOrder = calloc((size_t)n * nch, sizeof(int));
  for (int ch = 0; ch < nch; ch++)
    for (int i = 0; i < n; i++) {
      int q = ch % 2 ? (n - i) % n : i;
      c->ringOrder[ch * n + i] = q;
      if (q == r) c->ringPos[ch] = i;
    }
  c->nslots = 8;
  c->slotBytes = SLOT;
  c->sliceBytes = SLOT;
  c->llThreshold = 128 << 10;
  c->directThreshold = 128 << 10;
  c->minChannelBytes = 8 << 10;
  c->channelBytes = 64 << 10;
  c->chainBytes = 256 << 10;
  c->chainBytesPast64 = 1 << 20;
  c->baseChannels = 16;
  c->forceAlgo = -1;
  c->peerThreshold = (size_t)-1;
  c->p2pChannels = 32;
  c->scratch = (char*)(uintptr_t)0x10000000;    /* only offsets from it are used */
  c->devScratch = (char*)(uintptr_t)0x700000000;
  c->p2pSend = calloc(n, sizeof(*c->p2pSend));
  c->p2pRecv = calloc(n, sizeof(*c->p2pRecv));
  return c;
}

static void freeComm(struct ncclComm* c) {
  free(c->encoder);
  free(c->ringOrder);
  free(c->p2pSend);
  free(c->p2pRecv);
  free(c);
}

static size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

/* The kernel's view of a blob. */
struct decoded {
  const struct acuPhase* h;
  const struct acuLaneWire* lanes;
  const struct acuShape* shapes;
  const struct acuStep* steps;
  const uint16_t* conns;
  const struct acuOp* ops;
};
static struct decoded parse(const unsigned char* b) {
  struct decoded d;
  d.h = (const struct acuPhase*)b;
  size_t off = sizeof(struct acuPhase);
  d.lanes = (const struct acuLaneWire*)(b + off);
  off += sizeof(struct acuLaneWire) * d.h->nlanes;
  d.shapes = (const struct acuShape*)(b + off);
  off += sizeof(struct acuShape) * d.h->nshapes;
  d.steps = (const struct acuStep*)(b + off);
  off += pad8(sizeof(struct acuStep) * d.h->nsteps);
  d.conns = (const uint16_t*)(b + off);
  off += pad8(sizeof(uint16_t) * d.h->nconns);
  d.ops = (const struct acuOp*)(b + off);
  off += sizeof(struct acuOp) * d.h->nops;
  EXPECT(off == d.h->bytes, "blob layout %zu bytes, header says %u", off, d.h->bytes);
  return d;
}
static struct acuLane rebuild(const struct decoded* d, int i) {
  const struct acuLaneWire* w = &d->lanes[i];
  const struct acuShape* sh = &d->shapes[w->shape];
  struct acuLane l;
  memset(&l, 0, sizeof(l));
  l.kind = w->kind;
  l.nsteps = w->nsteps;
  l.nops = w->nops;
  l.stepOff = w->stepOff;
  l.connOff = w->connOff;
  l.opOff = w->opOff;
  l.conn = w->conn;
  l.ll = w->ll;
  l.begin = w->begin;
  l.end = w->end;
  l.scratch = w->scratch;
  l.lenTotal = sh->lenTotal;
  l.lenStride = sh->lenStride;
  l.inStride = sh->inStride;
  l.outStride = sh->outStride;
  l.slice = sh->slice;
  return l;
}

/* Encode one phase and check every GPU lane against the plan lane it came
 * from (a plan lane is cut into GPU lanes, or none if empty; the blob holds
 * them cut-major: every lane's cut 0, then every lane's cut 1, ...). */
static void checkPhase(struct ncclComm* comm, const struct anycclPhase* ph, const char* what, size_t maxBlob,
                       int wantCuts) {
  static unsigned char buf[ACU_BLOB_LARGE];
  static int from[1024], cut[1024];
  ncclResult_t res = anycclCudaEncodeForTest(comm, ph, buf, sizeof(buf), from, cut);
  EXPECT(res == ncclSuccess, "%s: encode failed (%d)", what, res);
  if (res != ncclSuccess) return;
  struct decoded d = parse(buf);
  EXPECT(d.h->bytes <= maxBlob, "%s: %u-byte blob, wanted at most %zu (%u lanes)", what, d.h->bytes, maxBlob,
         d.h->nlanes);
  EXPECT(d.h->elemSize == ph->elemSize, "%s: element size", what);
  /* Each connection belongs to one GPU lane of a phase: lanes keep their
   * counters in shared memory and write them back at the end. */
  static unsigned char owner[65536];
  memset(owner, 0, sizeof(owner));
  for (int i = 0; i < (int)d.h->nlanes; i++) {
    const struct acuLaneWire* w = &d.lanes[i];
    if (w->kind == ACU_LANE_STEPS) {
      for (int c = 0; c < ANYCCL_MAX_LANE_CONNS; c++) {
        int used = 0;
        for (int s = 0; s < w->nsteps; s++) used |= d.steps[w->stepOff + s].recv == c || d.steps[w->stepOff + s].send == c;
        if (!used) continue;
        uint16_t x = d.conns[w->connOff + c];
        EXPECT(x == 0xffff || !owner[x]++, "%s: connection %u in two lanes (lane %d)", what, x, i);
      }
    } else if (w->kind == ACU_LANE_SEND || w->kind == ACU_LANE_RECV) {
      EXPECT(!owner[w->conn]++, "%s: connection %u in two lanes (lane %d)", what, w->conn, i);
    }
  }
  /* cut-major: blocks are scheduled in blob order, and a rank must not
   * fill the GPU with blocks whose partners (cut k of the peer's lane) come
   * after all of the peer's other lanes (deadlock once lanes x cuts > SMs) */
  for (int i = 1; i < (int)d.h->nlanes; i++)
    EXPECT(cut[i] >= cut[i - 1], "%s: GPU lane %d is cut %d after cut %d (not cut-major)", what, i, cut[i], cut[i - 1]);
  int maxSteps = 0, seen = 0;
  for (int i = 0; i < ph->nlanes; i++) {
    const struct anycclLane* pl = &ph->lanes[i];
    /* this plan lane's GPU lanes, in blob order */
    int mine[1024], nm = 0, at = 0;
    for (int j = 0; j < (int)d.h->nlanes; j++)
      if (from[j] == i) mine[nm++] = j;
    seen += nm;
    int g = nm ? mine[0] : 0;
    if (pl->kind == LANE_STEPS) {
      if (pl->nsteps > maxSteps) maxSteps = pl->nsteps;
      uint64_t next = pl->begin;
      while (at < nm && next < pl->end) {
        g = mine[at];
        struct acuLane l = rebuild(&d, g);
        EXPECT(l.kind == ACU_LANE_STEPS, "%s lane %d: kind %d", what, g, l.kind);
        EXPECT(l.begin == next, "%s lane %d: begins at %llu, the last ended at %llu", what, g,
               (unsigned long long)l.begin, (unsigned long long)next);
        EXPECT(l.end > l.begin && l.end <= pl->end, "%s lane %d: range [%llu, %llu) outside the plan's", what, g,
               (unsigned long long)l.begin, (unsigned long long)l.end);
        EXPECT(l.lenTotal == pl->lenTotal && l.lenStride == pl->lenStride && l.inStride == pl->inStride &&
                   l.outStride == pl->outStride,
               "%s lane %d: geometry", what, g);
        uint64_t slice = pl->slice * ph->elemSize > comm->sliceBytes ? comm->sliceBytes / ph->elemSize : pl->slice;
        EXPECT(l.slice >= 1 && l.slice <= slice, "%s lane %d: slice %llu (plan %zu)", what, g,
               (unsigned long long)l.slice, pl->slice);
        EXPECT(!l.ll || l.slice * ph->elemSize <= (64u << 10) / 2, "%s lane %d: LL slice too large", what, g);
        EXPECT(l.nsteps == pl->nsteps, "%s lane %d: %d steps, plan %d", what, g, l.nsteps, pl->nsteps);
        for (int s = 0; s < pl->nsteps && s < l.nsteps; s++) {
          const struct acuStep* a = &d.steps[l.stepOff + s];
          const struct anycclStep* b = &pl->steps[s];
          EXPECT(a->recv == b->recv && a->send == b->send && a->in0 == b->in0 && a->in1 == b->in1 && a->out == b->out &&
                     a->chunk == b->chunk && a->inChunk == b->inChunk && a->outChunk == b->outChunk,
                 "%s lane %d step %d differs from the plan", what, g, s);
        }
        /* a lane lists the connections its steps use, no others: it writes
         * their counters back at its end (two lanes listing one would race) */
        int nc = anycclLaneConns(pl);
        for (int c = 0; c < nc; c++) {
          int used = 0;
          for (int s = 0; s < pl->nsteps; s++) used |= pl->steps[s].recv == c || pl->steps[s].send == c;
          EXPECT((d.conns[l.connOff + c] == 0xffff) == (pl->conns[c] == NULL || !used), "%s lane %d conn %d", what,
                 g, c);
        }
        next = l.end;
        at++;
      }
      EXPECT(next >= pl->end || pl->end == pl->begin, "%s: plan lane %d not covered ([%zu, %zu) up to %llu)", what,
             i, pl->begin, pl->end, (unsigned long long)next);
    } else {
      /* p2p lanes and copies: the cuts' op bytes add up to the plan's */
      uint64_t want = 0, got = 0;
      for (int j = 0; j < pl->nops; j++) want += pl->ops[j].bytes;
      if (pl->kind == LANE_COPY) want /= 2; /* ops[2i] = src, ops[2i+1] = dst: count the sources */
      /* wantCuts (p2p cases): how many GPU lanes each send and receive lane becomes */
      if (wantCuts > 0 && pl->kind != LANE_COPY)
        EXPECT(nm == wantCuts, "%s: plan lane %d cut %d ways, want %d", what, i, nm, wantCuts);
      for (; at < nm; at++) {
        g = mine[at];
        EXPECT(d.lanes[g].kind == (pl->kind == LANE_P2P_SEND   ? ACU_LANE_SEND
                                   : pl->kind == LANE_P2P_RECV ? ACU_LANE_RECV
                                                               : ACU_LANE_COPY),
               "%s lane %d: kind %d", what, g, d.lanes[g].kind);
        struct acuLane l = rebuild(&d, g);
        for (int k = 0; k < l.nops; k += pl->kind == LANE_COPY ? 2 : 1)
          got += d.ops[l.opOff + k].bytes & ACU_OP_BYTES_MASK; /* bits 40-63: the send/recv tag */
      }
      EXPECT(got == want, "%s: plan lane %d moves %llu bytes, its GPU lanes %llu", what, i, (unsigned long long)want,
             (unsigned long long)got);
    }
  }
  EXPECT(seen == (int)d.h->nlanes, "%s: %d GPU lanes checked of %u", what, seen, d.h->nlanes);
  /* two ring shapes: at most two distinct programs per phase of one kind */
  EXPECT(d.h->nsteps <= 2 * maxSteps, "%s: %u steps in the blob (sharing failed?)", what, d.h->nsteps);
}

static struct anycclTask task(anycclFunc f, size_t count, int root) {
  struct anycclTask t;
  memset(&t, 0, sizeof(t));
  t.func = f;
  t.count = count;
  t.type = ncclFloat;
  t.op = ncclSum;
  t.root = root;
  t.redop.type = ncclFloat;
  t.redop.op = anycclDevSum;
  t.sendbuff = (void*)(uintptr_t)0x100000000;
  t.recvbuff = (void*)(uintptr_t)0x300000000;
  return t;
}

/* Channels a ring collective should use: one per 64 KB of block, at least
 * 16, at most 128, each at least 8 KB of the block. */
static int wantChannels(size_t blockBytes, int nch) {
  size_t w = blockBytes / (64 << 10);
  if (w > 64) w = blockBytes / (128 << 10) > 64 ? blockBytes / (128 << 10) : 64; /* 128 KB each past 64 */
  if (w < 16) w = 16;
  if (w > blockBytes / (8 << 10)) w = blockBytes / (8 << 10);
  if (w > (size_t)nch) w = nch;
  return w < 1 ? 1 : (int)w;
}

static void collCase(struct ncclComm* comm, anycclFunc f, size_t count, const char* name, size_t maxBlob,
                     int wantLanes) {
  struct anycclTask t = task(f, count, comm->nRanks - 1);
  struct anycclPlan* plan = calloc(1, sizeof(*plan));
  plan->phases = calloc(1, sizeof(*plan->phases));
  plan->nphases = 1;
  ncclResult_t res = anycclAlgoPhase(comm, &t, &plan->phases[0]);
  char what[96];
  snprintf(what, sizeof(what), "%s count %zu rank %d", name, count, comm->rank);
  EXPECT(res == ncclSuccess, "%s: schedule failed", what);
  if (res == ncclSuccess) {
    if (wantLanes > 0)
      EXPECT(plan->phases[0].nlanes == wantLanes, "%s: %d ring lanes, want %d", what, plan->phases[0].nlanes,
             wantLanes);
    checkPhase(comm, &plan->phases[0], what, maxBlob, 0);
  }
  anycclPlanFree(plan);
}

/* Send/recv in one group: with every rank (self included: a copy), or a
 * ring (send to r+1, receive from r-1, as nccl-tests' sendrecv). */
/* wantCuts: how many GPU lanes each send and receive lane becomes (the
 * measured rule, as a table: 1 below 64 KB, else one per 128 KB
 * (ANYCCL_CUDA_P2P_CUT_BYTES), at least 8 (ANYCCL_CUDA_P2P_CUTS_MIN), at
 * most the 32 p2p connections of a peer pair). */
static void p2pCase(struct ncclComm* comm, size_t bytes, int allPairs, size_t maxBlob, int wantCuts) {
  int n = comm->nRanks, r = comm->rank;
  struct anycclTask ts[64];
  struct anycclTask* tp[64];
  int k = 0;
  for (int q = 0; q < n; q++) {
    if (allPairs || q == (r + 1) % n) {
      ts[k] = task(FUNC_SEND, bytes / sizeof(float), q);
      tp[k] = &ts[k];
      k++;
    }
    if (allPairs || q == (r + n - 1) % n) {
      ts[k] = task(FUNC_RECV, bytes / sizeof(float), q);
      tp[k] = &ts[k];
      k++;
    }
  }
  struct anycclPlan* plan = calloc(1, sizeof(*plan));
  plan->phases = calloc(1, sizeof(*plan->phases));
  plan->nphases = 1;
  char what[64];
  snprintf(what, sizeof(what), "send/recv %s %zu B rank %d", allPairs ? "all pairs" : "ring", bytes, comm->rank);
  ncclResult_t res = anycclP2pPhase(comm, tp, k, &plan->phases[0]);
  EXPECT(res == ncclSuccess, "%s: schedule failed", what);
  if (res == ncclSuccess) checkPhase(comm, &plan->phases[0], what, maxBlob, wantCuts);
  anycclPlanFree(plan);
}

/* Collective numbers: each collective phase of a plan gets its own, the
 * same on every rank whatever send/recv phases a rank's plan also holds
 * (these get none). A rank runs a plan's phases as separate kernels, and
 * peers compare its op word (number, tag) with their own: two phases under
 * one number would read as "another operation" to a peer one phase behind. */
/* Numbers plan `funcs` on comm as the launch does, phase by phase: the
 * collective phases' numbers and tags into num/tag; returns how many. A
 * phase's count follows from its function, so that ranks agree on it. */
static int numberPlan(struct ncclComm* comm, const int* funcs, int n, uint32_t* num, uint32_t* tag, int plan) {
  int k = 0;
  for (int p = 0; p < n; p++) {
    struct anycclPhase ph;
    memset(&ph, 0, sizeof(ph));
    ph.func = funcs[p];
    ph.count = 31 + (size_t)funcs[p];
    ph.root = 3;
    anycclCudaNumberPhase(comm, &ph);
    uint32_t t = anycclCudaPhaseTag(comm, &ph);
    if (ph.func == FUNC_SEND) {
      EXPECT(comm->cuCurCollSeq == 0 && t == ACU_TAG_COLL, "plan %d: a send/recv phase is unnumbered (%u, %#x)", plan,
             comm->cuCurCollSeq, t);
      continue;
    }
    num[k] = comm->cuCurCollSeq;
    tag[k++] = t;
  }
  return k;
}

static void numberingCase(void) {
  static const int withSend[] = {FUNC_REDUCE, FUNC_REDUCESCATTER, FUNC_SEND, FUNC_SCATTER, FUNC_ALLTOALL};
  static const int without[] = {FUNC_REDUCE, FUNC_REDUCESCATTER, FUNC_SCATTER, FUNC_ALLTOALL};
  struct ncclComm* a = fakeComm(4, 0, 8);
  struct ncclComm* b = fakeComm(4, 1, 8);
  b->cuCollSeq = a->cuCollSeq = UINT32_MAX - 2; /* the numbers wrap past 0 within the second plan */
  for (int plan = 0; plan < 2; plan++) {
    uint32_t numA[5], numB[5], tagA[5], tagB[5];
    int ka = numberPlan(a, withSend, 5, numA, tagA, plan), kb = numberPlan(b, without, 4, numB, tagB, plan);
    EXPECT(ka == 4 && kb == 4, "plan %d: %d and %d collective phases", plan, ka, kb);
    for (int p = 0; p < 4; p++) {
      EXPECT(numA[p] == numB[p] && tagA[p] == tagB[p], "plan %d phase %d: ranks number it %u/%u, tags %#x/%#x",
             plan, p, numA[p], numB[p], tagA[p], tagB[p]);
      EXPECT(numA[p] != 0, "plan %d phase %d: a collective phase numbered 0", plan, p);
      if (p > 0)
        EXPECT(numA[p] != numA[p - 1] && (tagA[p] >> 22 & 0xff) != (tagA[p - 1] >> 22 & 0xff),
               "plan %d: phases %d and %d share number %u (tags %#x, %#x)", plan, p - 1, p, numA[p], tagA[p - 1],
               tagA[p]);
    }
  }
  freeComm(a);
  freeComm(b);
}

int main(void) {
  numberingCase();
  const size_t small = ACU_BLOB_SMALL, large = ACU_BLOB_LARGE, n = 4;
  for (int r = 0; r < (int)n; r++) {
    struct ncclComm* comm = fakeComm((int)n, r, 128);
    /* direct one-shot (cut into up to 32 lanes) */
    collCase(comm, FUNC_ALLREDUCE, 2, "allreduce", ACU_BLOB_TINY, 0);
    collCase(comm, FUNC_ALLREDUCE, 32 << 10, "allreduce", small, 0);
    collCase(comm, FUNC_REDUCESCATTER, 1000, "reducescatter", small, 0);
    collCase(comm, FUNC_BROADCAST, 5000, "broadcast", small, 0);
    collCase(comm, FUNC_REDUCE, 7, "reduce", ACU_BLOB_TINY, 0);
    /* rings: channels per size, mid sizes in the 4 KB blob */
    size_t sizes[] = {256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20, 128 << 20}; /* bytes per call */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
      size_t count = sizes[i] / sizeof(float);
      int arLanes = wantChannels(sizes[i] / n, 128);
      collCase(comm, FUNC_ALLREDUCE, count, "allreduce", arLanes <= 64 ? small : large, arLanes);
      int agLanes = wantChannels(sizes[i] / n, 128);
      collCase(comm, FUNC_ALLGATHER, count / n, "allgather", agLanes <= 64 ? small : large, agLanes);
      collCase(comm, FUNC_REDUCESCATTER, count / n, "reducescatter", agLanes <= 64 ? small : large, agLanes);
      /* chains beyond 2 ranks: one channel per 256 KB, 64 from 16 to 64 MB,
       * then one per MB (as measured; a table rather than the formula) */
      static const int chainLanes[] = {16, 16, 16, 64, 64, 128};
      int chLanes = chainLanes[i];
      collCase(comm, FUNC_BROADCAST, count, "broadcast", chLanes <= 64 ? small : large, chLanes);
      collCase(comm, FUNC_REDUCE, count, "reduce", chLanes <= 64 ? small : large, chLanes);
      collCase(comm, FUNC_ALLTOALL, count / n, "alltoall", large, 0);
    }
    /* the mesh form of all-gather (ANYCCL_CUDA_MESH_ALLGATHER): p2p lanes,
     * a send and a receive per peer and a copy */
    comm->meshAgMax = 64 << 20;
    collCase(comm, FUNC_ALLGATHER, (32 << 20) / sizeof(float) / n, "allgather mesh", large, 2 * (int)n - 1);
    comm->meshAgMax = 0;
    /* point-to-point, cut by size over the 32 connections of each peer
     * pair: one peer each way fits the 4 KB blob at any size; every peer
     * (alltoall's shape) fits it up to 4 MB per peer (8 cuts: 49 lanes at 4
     * ranks) and takes the 32 KB one from 8 MB (16 cuts) */
    p2pCase(comm, 8, 0, ACU_BLOB_TINY, 1);
    p2pCase(comm, 8, 1, ACU_BLOB_TINY, 1);
    p2pCase(comm, (64 << 10) - 64, 0, ACU_BLOB_TINY, 1);
    p2pCase(comm, 64 << 10, 0, small, 8);
    p2pCase(comm, 256 << 10, 0, small, 8);
    p2pCase(comm, 1 << 20, 0, small, 8);
    p2pCase(comm, (1 << 20) + (512 << 10), 0, small, 12);
    p2pCase(comm, 2 << 20, 0, small, 16);
    p2pCase(comm, (2 << 20) + 1024, 0, small, 17);
    p2pCase(comm, 4 << 20, 0, small, 32);
    p2pCase(comm, 8 << 20, 0, small, 32);
    p2pCase(comm, 64 << 20, 0, small, 32);
    /* all pairs (an all-to-all on 4 ranks): 7 lanes cut that many ways */
    p2pCase(comm, 256 << 10, 1, small, 8);
    p2pCase(comm, 2 << 20, 1, large, 16);
    p2pCase(comm, 4 << 20, 1, large, 32);
    p2pCase(comm, 64 << 20, 1, large, 32);
    collCase(comm, FUNC_REDUCE, (512 << 20) / sizeof(float), "reduce", large, 128);
    collCase(comm, FUNC_BROADCAST, (64 << 20) / sizeof(float), "broadcast", small, 64);
    collCase(comm, FUNC_BROADCAST, (96 << 20) / sizeof(float), "broadcast", large, 96);
    freeComm(comm);
  }
  /* NCCL_MAX_NCHANNELS caps the channels */
  struct ncclComm* comm = fakeComm(4, 1, 8);
  collCase(comm, FUNC_ALLREDUCE, (64 << 20) / sizeof(float), "allreduce 8 channels", ACU_BLOB_SMALL, 8);
  freeComm(comm);
  /* two ranks: a chain is one hop, it keeps the ring rule (128 KB each past 64) */
  comm = fakeComm(2, 0, 128);
  collCase(comm, FUNC_REDUCE, (16 << 20) / sizeof(float), "reduce 2 ranks", ACU_BLOB_LARGE, 128);
  collCase(comm, FUNC_BROADCAST, (4 << 20) / sizeof(float), "broadcast 2 ranks", ACU_BLOB_SMALL, 64);
  freeComm(comm);
  printf("%s: %d checks, %d failed\n", fails ? "FAIL" : "PASS", checks, fails);
  return fails ? 1 : 0;
}
