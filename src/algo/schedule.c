/* Algorithms, written once as schedules (see plan.h): each function turns
 * one task into a phase of lanes. Nothing here touches memory or transports
 * beyond picking which connection a lane uses. */
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "param.h"
#include "plan.h"

#define STEP(rv, sd, i0, i1, o, ch, ic, oc) \
  (struct anycclStep) { (rv), (sd), (i0), (i1), (o), 0, (int16_t)(ch), (int16_t)(ic), (int16_t)(oc) }

static inline int mod(int a, int n) { /* one division: plans of thousands of ranks (sim) are built per launch */
  int r = a % n;
  return r < 0 ? r + n : r;
}

static ncclResult_t allocLanes(struct anycclPhase* ph, int n) {
  ANYCCL_CALLOC(ph->lanes, n > 0 ? n : 1);
  ph->nlanes = 0;
  return ncclSuccess;
}

/* ---- ring programs (one slice; conn 0 = recv from prev, 1 = send to next) -- */
enum { RV = 0, SD = 1, NO = -1 };

/* Reduce-scatter around the ring: position p ends holding the full
 * reduction of block ring[p], which goes to BUF_OUT block `outChunk`
 * (-1: BUF_OUT block ring[p], as all-reduce wants) and, if `forward`, on to
 * the next rank. */
static int ringReduceScatterInto(const struct ncclComm* comm, int ch, int outChunk, int forward,
                                 struct anycclStep* s) {
  int n = comm->nRanks, p = comm->ringPos[ch], k = 0;
  const int* ring = comm->ringOrder + ch * n;
  int c = ring[mod(p - 1, n)];
  s[k++] = STEP(NO, SD, BUF_IN, BUF_NONE, BUF_NONE, c, c, 0);
  for (int j = 1; j < n - 1; j++) {
    c = ring[mod(p - 1 - j, n)];
    s[k++] = STEP(RV, SD, BUF_NONE, BUF_IN, BUF_NONE, c, c, 0);
  }
  c = ring[p];
  s[k++] = STEP(RV, forward ? SD : NO, BUF_NONE, BUF_IN, BUF_OUT, c, c, outChunk < 0 ? c : outChunk);
  return k;
}

/* All-reduce: reduce-scatter, then the reduced blocks travel on around the
 * ring (all-gather) without being reduced again. */
static int ringAllReduce(const struct ncclComm* comm, int ch, struct anycclStep* s) {
  int n = comm->nRanks, p = comm->ringPos[ch];
  const int* ring = comm->ringOrder + ch * n;
  if (n == 1) {
    s[0] = STEP(NO, NO, BUF_IN, BUF_NONE, BUF_OUT, 0, 0, 0);
    return 1;
  }
  int k = ringReduceScatterInto(comm, ch, -1, 1, s);
  for (int j = 1; j < n; j++) {
    int c = ring[mod(p - j, n)];
    s[k++] = STEP(RV, j < n - 1 ? SD : NO, BUF_NONE, BUF_NONE, BUF_OUT, c, c, c);
  }
  return k;
}

static int ringReduceScatter(const struct ncclComm* comm, int ch, struct anycclStep* s) {
  if (comm->nRanks == 1) {
    s[0] = STEP(NO, NO, BUF_IN, BUF_NONE, BUF_OUT, 0, 0, 0);
    return 1;
  }
  return ringReduceScatterInto(comm, ch, 0, 0, s);
}

/* All-gather: each block travels n-1 hops; BUF_IN is one block. */
static int ringAllGather(const struct ncclComm* comm, int ch, struct anycclStep* s) {
  int n = comm->nRanks, p = comm->ringPos[ch], k = 0;
  const int* ring = comm->ringOrder + ch * n;
  int c = ring[p];
  s[k++] = STEP(NO, n > 1 ? SD : NO, BUF_IN, BUF_NONE, BUF_OUT, c, 0, c);
  for (int j = 1; j < n; j++) {
    c = ring[mod(p - j, n)];
    s[k++] = STEP(RV, j < n - 1 ? SD : NO, BUF_NONE, BUF_NONE, BUF_OUT, c, 0, c);
  }
  return k;
}

/* Broadcast: a pipelined chain from the root along the ring. */
static int chainBroadcast(const struct ncclComm* comm, int ch, int root, int inPlace, struct anycclStep* s) {
  int n = comm->nRanks;
  int rootPos = 0;
  for (int i = 0; i < n; i++)
    if (comm->ringOrder[ch * n + i] == root) rootPos = i;
  int d = mod(comm->ringPos[ch] - rootPos, n);
  if (d == 0) s[0] = STEP(NO, n > 1 ? SD : NO, BUF_IN, BUF_NONE, inPlace ? BUF_NONE : BUF_OUT, 0, 0, 0);
  else s[0] = STEP(RV, d < n - 1 ? SD : NO, BUF_NONE, BUF_NONE, BUF_OUT, 0, 0, 0);
  if (d == 0 && n == 1 && inPlace) s[0].out = BUF_OUT; /* a no-op copy, kept for uniformity */
  return 1;
}

/* Reduce: a pipelined chain along the ring that ends at the root. */
static int chainReduce(const struct ncclComm* comm, int ch, int root, struct anycclStep* s) {
  int n = comm->nRanks;
  int rootPos = 0;
  for (int i = 0; i < n; i++)
    if (comm->ringOrder[ch * n + i] == root) rootPos = i;
  int d = mod(comm->ringPos[ch] - rootPos - 1, n); /* root is last (d = n-1) */
  if (n == 1) s[0] = STEP(NO, NO, BUF_IN, BUF_NONE, BUF_OUT, 0, 0, 0);
  else if (d == 0) s[0] = STEP(NO, SD, BUF_IN, BUF_NONE, BUF_NONE, 0, 0, 0);
  else if (d < n - 1) s[0] = STEP(RV, SD, BUF_NONE, BUF_IN, BUF_NONE, 0, 0, 0);
  else s[0] = STEP(RV, NO, BUF_NONE, BUF_IN, BUF_OUT, 0, 0, 0);
  return 1;
}

/* ---- direct (one-shot) programs over the all-pairs mesh ------------------
 * conn q = recv from rank q, conn n+q = send to rank q. Reductions run in
 * rank order on every rank so that all ranks get bitwise the same result. */
static int directReduceInto(const struct ncclComm* comm, struct anycclStep* s, int k) {
  int n = comm->nRanks, r = comm->rank;
  for (int j = 0; j < n; j++) {
    int last = j == n - 1;
    uint8_t out = last ? BUF_OUT : BUF_SCRATCH;
    uint8_t acc = j == 0 ? BUF_NONE : BUF_SCRATCH;
    if (j == r) s[k++] = STEP(NO, NO, BUF_IN, acc, out, 0, 0, 0);
    else s[k++] = STEP(j, NO, BUF_NONE, acc, out, 0, 0, 0);
  }
  return k;
}

static int directAllReduce(const struct ncclComm* comm, int root, int inPlace, struct anycclStep* s) {
  int n = comm->nRanks, r = comm->rank, k = 0;
  for (int i = 1; i < n; i++) {
    int q = (r + i) % n;
    s[k++] = STEP(NO, n + q, BUF_IN, BUF_NONE, BUF_NONE, 0, 0, 0);
  }
  return directReduceInto(comm, s, k);
}

static int directReduce(const struct ncclComm* comm, int root, int inPlace, struct anycclStep* s) {
  int n = comm->nRanks;
  if (comm->rank != root) {
    s[0] = STEP(NO, n + root, BUF_IN, BUF_NONE, BUF_NONE, 0, 0, 0);
    return 1;
  }
  return directReduceInto(comm, s, 0);
}

/* Reduce-scatter: chunk q of the input goes straight to rank q; every rank
 * reduces its own chunk from all n inputs (lane geometry: n blocks of
 * `count`, BUF_OUT one block). */
static int directReduceScatter(const struct ncclComm* comm, int root, int inPlace, struct anycclStep* s) {
  int n = comm->nRanks, r = comm->rank, k = 0;
  for (int i = 1; i < n; i++) {
    int q = (r + i) % n;
    s[k++] = STEP(NO, n + q, BUF_IN, BUF_NONE, BUF_NONE, q, q, 0);
  }
  for (int j = 0; j < n; j++) {
    uint8_t out = j == n - 1 ? BUF_OUT : BUF_SCRATCH;
    uint8_t acc = j == 0 ? BUF_NONE : BUF_SCRATCH;
    if (j == r) s[k++] = STEP(NO, NO, BUF_IN, acc, out, r, r, 0);
    else s[k++] = STEP(j, NO, BUF_NONE, acc, out, r, 0, 0);
  }
  return k;
}

static int directBroadcast(const struct ncclComm* comm, int root, int inPlace, struct anycclStep* s) {
  int n = comm->nRanks, r = comm->rank, k = 0;
  if (r != root) {
    s[0] = STEP(root, NO, BUF_NONE, BUF_NONE, BUF_OUT, 0, 0, 0);
    return 1;
  }
  for (int i = 1; i < n; i++) s[k++] = STEP(NO, n + (r + i) % n, BUF_IN, BUF_NONE, BUF_NONE, 0, 0, 0);
  if (!inPlace) s[k++] = STEP(NO, NO, BUF_IN, BUF_NONE, BUF_OUT, 0, 0, 0);
  return k;
}

/* ---- lanes --------------------------------------------------------------- */
int anycclLaneConns(const struct anycclLane* l) {
  int m = 0;
  for (int i = 0; i < l->nsteps; i++) {
    if (l->steps[i].recv + 1 > m) m = l->steps[i].recv + 1;
    if (l->steps[i].send + 1 > m) m = l->steps[i].send + 1;
  }
  return m;
}

static size_t alignElems(size_t elemSize) { return 512 / elemSize; }

/* A ring program for channel ch (rings may differ per channel). */
struct ringProg {
  int kind; /* FUNC_* */
  int root, inPlace;
};

static int ringProgram(const struct ncclComm* comm, int ch, const struct ringProg* rp, struct anycclStep* s) {
  switch (rp->kind) {
    case FUNC_ALLREDUCE: return ringAllReduce(comm, ch, s);
    case FUNC_REDUCESCATTER: return ringReduceScatter(comm, ch, s);
    case FUNC_ALLGATHER: return ringAllGather(comm, ch, s);
    case FUNC_BROADCAST: return chainBroadcast(comm, ch, rp->root, rp->inPlace, s);
    default: return chainReduce(comm, ch, rp->root, s);
  }
}

/* comm->ringProgs: [kind][channel], kind 0 all-reduce, 1 reduce-scatter, 2 all-gather */
struct anycclRingProgs {
  struct anycclStep* steps[3][ANYCCL_MAX_CHANNELS];
  int nsteps[3][ANYCCL_MAX_CHANNELS];
};

void anycclRingProgsFree(struct ncclComm* comm) {
  struct anycclRingProgs* rp = comm->ringProgs;
  if (rp == NULL) return;
  for (int k = 0; k < 3; k++)
    for (int c = 0; c < ANYCCL_MAX_CHANNELS; c++) free(rp->steps[k][c]);
  free(rp);
  comm->ringProgs = NULL;
}

/* One lane per channel, each taking a share of every block's offsets and
 * running its channel's ring program. */
static ncclResult_t ringLanes(struct ncclComm* comm, struct anycclPhase* ph, const struct ringProg* rp,
                              size_t lenTotal, size_t lenStride, size_t inStride, size_t outStride) {
  size_t es = ph->elemSize;
  size_t align = alignElems(es);
  size_t slice = comm->slotBytes / es;
  /* The channel count for this size (measured on H200s: small blocks over
   * many channels pay per-step latency on every block; large ones need all
   * of them for bandwidth). */
  size_t perBlockBytes = lenStride * es;
  /* Past 64 channels each needs twice the bytes (4 x H200: all-gather,
   * reduce-scatter and all-reduce at 32 MB ran steadier and faster on 64
   * channels of 128 KB than on 128 of 64 KB; docs/performance.md). A chain
   * (broadcast, reduce) beyond two ranks has its own bytes per channel
   * (ANYCCL_CUDA_CHAIN_BYTES, 4x that past 64 channels): reduce at 16 MB on 4
   * x H200 ran at 163 GB/s on 128 channels of 128 KB, 256-265 on 16-64. */
  size_t per = comm->channelBytes, perPast64 = 2 * comm->channelBytes;
  if ((rp->kind == FUNC_BROADCAST || rp->kind == FUNC_REDUCE) && comm->nRanks > 2) {
    per = comm->chainBytes;
    perPast64 = comm->chainBytesPast64;
  }
  size_t want = perBlockBytes / per;
  if (want > 64) want = perBlockBytes / perPast64 > 64 ? perBlockBytes / perPast64 : 64;
  if (want < (size_t)comm->baseChannels) want = (size_t)comm->baseChannels;
  if (want > perBlockBytes / comm->minChannelBytes) want = perBlockBytes / comm->minChannelBytes;
  int nch = want < (size_t)comm->nChannels ? (int)want : comm->nChannels;
  if (nch < 1) nch = 1;
  size_t part = (lenStride + nch - 1) / nch;
  part = (part + align - 1) / align * align;
  int maxSteps = 2 * comm->nRanks + 2;
  /* A channel whose ring is channel 0's runs the same program: it shares
   * lane 0's (rings are all alike without a topology file; thousands of
   * ranks, as on the sim backend, would build and keep nch copies of 2n
   * steps). */
  size_t ringBytes = sizeof(int) * comm->nRanks;
  int own = 0;
  for (int ch = 0; ch < nch; ch++) {
    if (comm->ringLikeFirst[ch] == 0) /* once per communicator: rings do not change (O(n) each) */
      comm->ringLikeFirst[ch] =
          ch == 0 || memcmp(comm->ringOrder, comm->ringOrder + (size_t)ch * comm->nRanks, ringBytes) == 0 ? 1 : -1;
    own += ch == 0 || comm->ringLikeFirst[ch] < 0;
  }
  /* All-reduce, reduce-scatter and all-gather programs depend on nothing but
   * the rings: built once per communicator and channel and kept
   * (comm->ringProgs), not at every launch (2n steps per channel and rank:
   * the sim backend's thousands of ranks spent most of their time there). */
  int kept = rp->kind == FUNC_ALLREDUCE || rp->kind == FUNC_REDUCESCATTER || rp->kind == FUNC_ALLGATHER;
  if (kept && comm->ringProgs == NULL) ANYCCL_CALLOC(comm->ringProgs, 1);
  if (!kept) ANYCCL_CALLOC(ph->steps, (size_t)own * maxSteps);
  NCCLCHECK(allocLanes(ph, nch));
  own = 0;
  for (int ch = 0; ch < nch; ch++) {
    struct anycclLane* l = &ph->lanes[ph->nlanes++];
    l->kind = LANE_STEPS;
    if (ch > 0 && comm->ringLikeFirst[ch] > 0) {
      l->steps = ph->lanes[0].steps;
      l->nsteps = ph->lanes[0].nsteps;
    } else if (kept) {
      int k = rp->kind == FUNC_ALLREDUCE ? 0 : rp->kind == FUNC_REDUCESCATTER ? 1 : 2;
      struct anycclStep** prog = &comm->ringProgs->steps[k][ch];
      if (*prog == NULL) {
        ANYCCL_CALLOC(*prog, maxSteps);
        comm->ringProgs->nsteps[k][ch] = ringProgram(comm, ch, rp, *prog);
      }
      l->steps = *prog;
      l->nsteps = comm->ringProgs->nsteps[k][ch];
    } else {
      l->steps = ph->steps + (size_t)(own++) * maxSteps;
      l->nsteps = ringProgram(comm, ch, rp, l->steps);
    }
    l->conns[RV] = &comm->ringRecv[ch];
    l->conns[SD] = &comm->ringSend[ch];
    l->lenTotal = lenTotal;
    l->lenStride = lenStride;
    l->inStride = inStride;
    l->outStride = outStride;
    l->begin = l->pos = (size_t)ch * part;
    l->end = l->begin + part < lenStride ? l->begin + part : lenStride;
    l->slice = slice;
    l->scratch = comm->scratch + (size_t)ch * comm->slotBytes;
  }
  return ncclSuccess;
}

/* One lane over the all-pairs mesh; geometry: `nblocks` blocks of `count`
 * elements (BUF_IN block c at c*count, BUF_OUT at c*outStride). */
static ncclResult_t directLane(struct ncclComm* comm, struct anycclPhase* ph,
                               int (*program)(const struct ncclComm*, int, int, struct anycclStep*), int root,
                               int inPlace, size_t count, int nblocks, size_t outStride) {
  struct anycclStep* steps;
  ANYCCL_CALLOC(steps, 2 * comm->nRanks + 2);
  ph->steps = steps;
  int nsteps = program(comm, root, inPlace, steps);
  int n = comm->nRanks;
  NCCLCHECK(allocLanes(ph, 1));
  struct anycclLane* l = &ph->lanes[ph->nlanes++];
  l->kind = LANE_STEPS;
  l->steps = steps;
  l->nsteps = nsteps;
  for (int q = 0; q < n; q++) {
    l->conns[q] = q == comm->rank ? NULL : &comm->p2pRecv[q];
    l->conns[n + q] = q == comm->rank ? NULL : &comm->p2pSend[q];
  }
  l->lenTotal = count * (size_t)nblocks;
  l->lenStride = l->inStride = count;
  l->outStride = outStride;
  l->begin = l->pos = 0;
  l->end = count;
  l->slice = comm->slotBytes / ph->elemSize;
  l->scratch = comm->scratch;
  return ncclSuccess;
}

static void addP2pLane(struct anycclPhase* ph, int kind, struct anycclConn* conn, struct anycclP2pOp* ops, int nops) {
  struct anycclLane* l = &ph->lanes[ph->nlanes++];
  l->kind = kind;
  l->conn = conn;
  l->ops = ops;
  l->nops = nops;
}

/* All-to-all, gather, scatter and the mesh all-gather: concurrent
 * transfers, one lane per peer (an all-gather sends its one block to every
 * peer: no transfer waits for another, unlike the ring's hops). */
static ncclResult_t p2pCollLanes(struct ncclComm* comm, struct anycclPhase* ph, const struct anycclTask* t) {
  int n = comm->nRanks, r = comm->rank;
  size_t bytes = t->count * ph->elemSize;
  struct anycclP2pOp* ops;
  ANYCCL_CALLOC(ops, 2 * n + 2);
  NCCLCHECK(allocLanes(ph, 2 * n + 1));
  ph->p2pOps = ops;
  int k = 0;
  int gather = t->func == FUNC_ALLGATHER;
  int sendTo = gather || t->func == FUNC_ALLTOALL || (t->func == FUNC_SCATTER && r == t->root);
  int recvFrom = gather || t->func == FUNC_ALLTOALL || (t->func == FUNC_GATHER && r == t->root);
  for (int i = 0; i < n; i++) {
    int q = (r + i) % n;
    char* src = NULL;
    char* dst = NULL;
    if (sendTo) src = gather ? ph->in : ph->in + (size_t)q * bytes;
    else if (t->func == FUNC_GATHER && q == t->root) src = ph->in;
    if (recvFrom) dst = ph->out + (size_t)q * bytes;
    else if (t->func == FUNC_SCATTER && q == t->root) dst = ph->out;
    if (q == r) {
      if (src && dst) {
        ops[k] = (struct anycclP2pOp){src, bytes};
        ops[k + 1] = (struct anycclP2pOp){dst, bytes};
        addP2pLane(ph, LANE_COPY, NULL, &ops[k], 2);
        k += 2;
      }
      continue;
    }
    if (bytes == 0) continue;
    if (src) {
      ops[k] = (struct anycclP2pOp){src, bytes};
      addP2pLane(ph, LANE_P2P_SEND, &comm->p2pSend[q], &ops[k++], 1);
    }
    if (dst) {
      ops[k] = (struct anycclP2pOp){dst, bytes};
      addP2pLane(ph, LANE_P2P_RECV, &comm->p2pRecv[q], &ops[k++], 1);
    }
  }
  return ncclSuccess;
}

static int pickDirect(struct ncclComm* comm, size_t bytes) {
  if (comm->nRanks < 2 || 2 * comm->nRanks > ANYCCL_MAX_LANE_CONNS) return 0;
  if (comm->forceAlgo >= 0) return comm->forceAlgo == ANYCCL_ALGO_DIRECT;
  return bytes <= comm->directThreshold;
}

/* The mesh form of all-gather (every peer at once, p2p lanes as all-to-all)
 * for messages up to comm->meshAgMax bytes in all (0 by default: on 4 GPUs
 * the ring is faster from 64 MB, docs/performance.md). */
static int pickMesh(struct ncclComm* comm, size_t bytes) {
  if (comm->nRanks < 2) return 0;
  if (comm->forceAlgo >= 0) return comm->forceAlgo == ANYCCL_ALGO_DIRECT;
  return bytes <= comm->meshAgMax;
}

static const char* funcNames[FUNC_COUNT] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                            "AlltoAll", "Gather", "Scatter", "Send", "Recv"};
const char* anycclFuncName(int func) { return funcNames[func]; }

ncclResult_t anycclAlgoPhase(struct ncclComm* comm, const struct anycclTask* t, struct anycclPhase* ph) {
  int n = comm->nRanks;
  size_t es = anycclTypeSize(t->type);
  size_t count = t->count;
  ph->elemSize = es;
  ph->in = (char*)t->sendbuff;
  ph->out = (char*)t->recvbuff;
  ph->op.type = t->type;
  ph->op.op = anycclDevSum;
  int reduceFunc = t->func == FUNC_ALLREDUCE || t->func == FUNC_REDUCE || t->func == FUNC_REDUCESCATTER;
  if (reduceFunc) {
    ph->op = t->redop; /* resolved at call time */
    ph->scalarPtr = t->scalarPtr;
    ph->reduce = 1;
  }
  /* Single-copy form for large messages when every rank shares this host
   * (the executor checks at run time that the buffers can be reached). */
  ph->count = count;
  ph->root = t->root;
  ph->func = t->func;
  size_t msgBytes = count * es * (t->func == FUNC_ALLTOALL ? (size_t)n : 1);
  if (comm->nHosts == 1 && n > 1 && comm->forceAlgo < 0 && comm->peerThreshold != (size_t)-1 &&
      msgBytes >= comm->peerThreshold && 2 * n <= ANYCCL_MAX_LANE_CONNS)
    ph->peerFunc = t->func + 1;
  if (t->func == FUNC_ALLTOALL || t->func == FUNC_GATHER || t->func == FUNC_SCATTER) {
    ph->what = funcNames[t->func];
    return p2pCollLanes(comm, ph, t);
  }
  size_t bytes = count * es;
  int direct = 0;
  int inPlace = t->sendbuff == t->recvbuff;
  struct ringProg rp = {t->func, t->root, inPlace};
  switch (t->func) {
    case FUNC_ALLREDUCE: {
      direct = pickDirect(comm, bytes);
      if (direct) {
        NCCLCHECK(directLane(comm, ph, directAllReduce, 0, inPlace, count, 1, 0));
      } else {
        size_t align = alignElems(es);
        size_t block = (count + n - 1) / n;
        if (block > align) block = (block + align - 1) / align * align;
        NCCLCHECK(ringLanes(comm, ph, &rp, count, block, block, block));
      }
      break;
    }
    case FUNC_REDUCESCATTER:
      direct = pickDirect(comm, bytes * n);
      if (direct) NCCLCHECK(directLane(comm, ph, directReduceScatter, 0, inPlace, count, n, 0));
      else NCCLCHECK(ringLanes(comm, ph, &rp, (size_t)n * count, count, count, 0));
      break;
    case FUNC_ALLGATHER:
      direct = pickMesh(comm, bytes * n);
      if (direct) {
        ph->what = funcNames[t->func];
        return p2pCollLanes(comm, ph, t);
      }
      NCCLCHECK(ringLanes(comm, ph, &rp, (size_t)n * count, count, 0, count));
      break;
    case FUNC_BROADCAST:
      direct = pickDirect(comm, bytes);
      if (direct) NCCLCHECK(directLane(comm, ph, directBroadcast, t->root, inPlace, count, 1, 0));
      else NCCLCHECK(ringLanes(comm, ph, &rp, count, count, 0, 0));
      break;
    case FUNC_REDUCE:
      direct = pickDirect(comm, bytes);
      if (direct) NCCLCHECK(directLane(comm, ph, directReduce, t->root, inPlace, count, 1, 0));
      else NCCLCHECK(ringLanes(comm, ph, &rp, count, count, 0, 0));
      break;
    default:
      WARN("internal: no algorithm for function %d", t->func);
      return ncclInternalError;
  }
  ph->what = funcNames[t->func];
  TRACE(NCCL_COLL, "%s count %zu type %d: %s, %d lanes, %d steps/slice", funcNames[t->func], count, t->type,
        direct ? "Direct" : "Ring", ph->nlanes, ph->nlanes ? ph->lanes[0].nsteps : 0);
  return ncclSuccess;
}

/* Grouped send/recv: per peer, one send lane and one receive lane, each a
 * queue in call order; sends to self are matched with receives from self. */
ncclResult_t anycclP2pPhase(struct ncclComm* comm, struct anycclTask** tasks, int ntasks, struct anycclPhase* ph) {
  int n = comm->nRanks, r = comm->rank;
  struct anycclP2pOp* ops;
  ANYCCL_CALLOC(ops, 2 * ntasks + 2);
  ph->p2pOps = ops;
  NCCLCHECK(allocLanes(ph, 2 * n + 1));
  ph->what = "SendRecv";
  ph->func = FUNC_SEND;
  ph->elemSize = 1;
  int k = 0;
  for (int i = 0; i < n; i++) {
    int q = (r + i) % n;
    if (q == r) continue;
    for (int dir = 0; dir < 2; dir++) {
      anycclFunc f = dir == 0 ? FUNC_SEND : FUNC_RECV;
      int first = k;
      for (int j = 0; j < ntasks; j++) {
        const struct anycclTask* t = tasks[j];
        if (t->func != f || t->root != q || t->count == 0) continue;
        char* ptr = (char*)(f == FUNC_SEND ? t->sendbuff : t->recvbuff);
        ops[k++] = (struct anycclP2pOp){ptr, t->count * anycclTypeSize(t->type)};
      }
      if (k > first)
        addP2pLane(ph, dir == 0 ? LANE_P2P_SEND : LANE_P2P_RECV, dir == 0 ? &comm->p2pSend[q] : &comm->p2pRecv[q],
                   &ops[first], k - first);
    }
  }
  /* self: the i-th send to self pairs with the i-th receive from self */
  int nsend = 0, nrecv = 0;
  for (int j = 0; j < ntasks; j++)
    if (tasks[j]->root == r) { if (tasks[j]->func == FUNC_SEND) nsend++; else nrecv++; }
  if (nsend != nrecv) {
    WARN("ncclGroupEnd: rank %d has %d sends to itself but %d receives from itself in one group", r, nsend, nrecv);
    return ncclInvalidUsage;
  }
  int first = k;
  for (int s = 0, rv = 0; s < ntasks; s++) {
    const struct anycclTask* ts = tasks[s];
    if (ts->func != FUNC_SEND || ts->root != r) continue;
    while (rv < ntasks && !(tasks[rv]->func == FUNC_RECV && tasks[rv]->root == r)) rv++;
    const struct anycclTask* tr = tasks[rv++];
    size_t sb = ts->count * anycclTypeSize(ts->type), rb = tr->count * anycclTypeSize(tr->type);
    if (sb != rb) {
      WARN("ncclGroupEnd: rank %d sends %zu bytes to itself but receives %zu", r, sb, rb);
      return ncclInvalidUsage;
    }
    ops[k++] = (struct anycclP2pOp){(char*)ts->sendbuff, sb};
    ops[k++] = (struct anycclP2pOp){tr->recvbuff, rb};
  }
  if (k > first) addP2pLane(ph, LANE_COPY, NULL, &ops[first], k - first);
  return ncclSuccess;
}
