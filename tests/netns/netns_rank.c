/* One rank of a multi-host run: `netns_rank [options]`, started once per rank
 * by a launcher (scripts/netns-2host.sh, mpirun, ...).
 *
 * Rank and size come from the environment: ANYCCL_TEST_RANK / ANYCCL_TEST_NRANKS
 * (else OMPI_COMM_WORLD_RANK / _SIZE, PMIX_RANK, PMI_RANK / PMI_SIZE, SLURM_PROCID /
 * SLURM_NTASKS); the device is ANYCCL_TEST_LOCAL_RANK (else LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK, else the rank). NCCL_COMM_ID must be set: every
 * rank then calls ncclGetUniqueId itself and gets the same id (the address),
 * and rank 0 starts the bootstrap root inside ncclCommInitRank.
 *
 * Then:
 *  1. --trials N randomized trials: each picks a collective (all-reduce,
 *     all-gather, reduce-scatter, broadcast, reduce, all-to-all, gather,
 *     scatter, grouped send/recv), a type, an op, a count (1 element to
 *     several FIFO slots, across the direct/ring threshold), a root and
 *     in-place or not, from a seed every rank shares; inputs are a pure
 *     function of (trial, rank, index), so each rank checks its output
 *     against a host reference of everyone's inputs. Floats reduce small
 *     integers (exact in any order), except avg (tolerance).
 *  2. --bw BYTES: cross-host send/recv bandwidth: rank r sends BYTES to
 *     r+S and receives BYTES from r-S (S = ANYCCL_TEST_RANKS_PER_HOST, else
 *     n/2), one group per iteration; prints the algorithm bandwidth of the
 *     slowest rank (GB/s) and the link's share (all ranks of a host).
 *  3. --until-error SECONDS: a connection that drops (scripts/netns-2host.sh
 *     --drop-after-ready). Prints a line "READY ..." (flushed) and then runs
 *     all-reduces in a loop, waiting for each with cudaStreamQuery and
 *     polling ncclCommGetAsyncError in between, until the call or the
 *     communicator reports an error, or SECONDS pass. The error must be
 *     ncclRemoteError or ncclSystemError and come at most --detect-limit
 *     seconds (default 15) after the last all-reduce that completed; then
 *     ncclCommAbort must return within 5 s. Prints one line "LINK-ERROR
 *     rank R: ..." with the timings, ending "epoch=E abort=A" (the wall-clock
 *     time of the error, to compare with the launcher's drop time, and the
 *     abort's seconds), and exits 0 when all held.
 *
 * Exit 0 when every trial passed on this rank. Uses only nccl.h and the CUDA
 * runtime API (buffers through cudaMemcpy), so it builds against real NCCL. */
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank = -1, nranks = 0;

#define CK(x)                                                                                  \
  do {                                                                                         \
    ncclResult_t r_ = (x);                                                                     \
    if (r_ != ncclSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #x, ncclGetErrorString(r_),      \
              ncclGetLastError(NULL));                                                         \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)
#define CUCK(x)                                                                                \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, cudaGetErrorString(e_));           \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int envInt(const char* const* names, int dflt) {
  for (; *names; names++) {
    const char* v = getenv(*names);
    if (v && *v) return atoi(v);
  }
  return dflt;
}

/* ---- deterministic randomness: splitmix64 of (seed, a, b, c) ---------------- */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

/* ---- types and ops -------------------------------------------------------------- */
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, NT };
static const ncclDataType_t ncclType[NT] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32,
                                            ncclInt64, ncclUint64, ncclFloat32, ncclFloat64};
static const size_t tsize[NT] = {1, 1, 4, 4, 8, 8, 4, 8};
static const char* const tname[NT] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float", "double"};
static const char* const opname[5] = {"sum", "prod", "max", "min", "avg"};
static int isFloat(int t) { return t == T_F32 || t == T_F64; }

/* Element values are kept as double (floats) or uint64 bits (integers). */
static double loadF(int t, const void* p, size_t i) {
  return t == T_F32 ? (double)((const float*)p)[i] : ((const double*)p)[i];
}
static void storeF(int t, void* p, size_t i, double v) {
  if (t == T_F32) ((float*)p)[i] = (float)v;
  else ((double*)p)[i] = v;
}
static int64_t loadI(int t, const void* p, size_t i) { /* sign- or zero-extended */
  switch (t) {
    case T_I8: return ((const int8_t*)p)[i];
    case T_U8: return ((const uint8_t*)p)[i];
    case T_I32: return ((const int32_t*)p)[i];
    case T_U32: return ((const uint32_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}
static void storeI(int t, void* p, size_t i, int64_t v) {
  switch (t) {
    case T_I8: ((int8_t*)p)[i] = (int8_t)v; break;
    case T_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case T_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case T_U32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((int64_t*)p)[i] = v; break;
  }
}

/* ---- a trial ----------------------------------------------------------------------- */
enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_GATHER, C_SCATTER,
       C_SENDRECV, NC };
static const char* const cname[NC] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                      "alltoall", "gather", "scatter", "sendrecv"};

struct trial {
  uint64_t seed;
  int coll, type, op, root, inPlace;
  size_t count;  /* the count argument of the call */
  int shift[2];  /* sendrecv: send to rank+shift[k], receive from rank-shift[k] */
};

static size_t pickCount(uint64_t r, size_t maxCount) {
  size_t c;
  switch (r % 4) {
    case 0: c = 1 + (r >> 8) % 7; break;                 /* a few elements */
    case 1: c = 100 + (r >> 8) % 5000; break;            /* around the direct/ring threshold */
    case 2: c = 5000 + (r >> 8) % 60000; break;          /* a few slots */
    default: c = maxCount / 2 + (r >> 8) % (maxCount / 2 + 1); break; /* many slots, every channel */
  }
  return c > maxCount ? maxCount : c;
}

static struct trial makeTrial(uint64_t seed, int index, size_t maxCount) {
  struct trial t;
  memset(&t, 0, sizeof(t));
  t.seed = h4(seed, (uint64_t)index, 0x7472, 0);
  uint64_t r = t.seed;
  t.coll = index < NC ? index : (int)(mix(r ^ 1) % NC); /* every collective at least once */
  t.type = (int)(mix(r ^ 2) % NT);
  t.op = (int)(mix(r ^ 3) % 5);
  t.root = (int)(mix(r ^ 4) % (uint64_t)nranks);
  t.inPlace = mix(r ^ 5) % 4 == 0;
  size_t mc = maxCount;
  if (t.coll == C_ALLGATHER || t.coll == C_REDUCESCATTER || t.coll == C_ALLTOALL || t.coll == C_GATHER ||
      t.coll == C_SCATTER)
    mc = maxCount / (size_t)nranks; /* the big side holds n blocks */
  if (mc < 8) mc = 8;
  t.count = pickCount(mix(r ^ 6), mc);
  t.shift[0] = (int)(mix(r ^ 7) % (uint64_t)nranks); /* 0: to itself */
  t.shift[1] = nranks > 1 ? 1 + (int)(mix(r ^ 8) % (uint64_t)(nranks - 1)) : 0;
  if (t.coll == C_REDUCE || t.coll == C_GATHER || t.coll == C_SCATTER || t.coll == C_ALLTOALL ||
      t.coll == C_SENDRECV)
    t.inPlace = 0;
  return t;
}

/* Input element i of rank q: any bits for copies and integer sum/prod/max/min
 * (wraparound is order-independent); bounded for integer avg (no overflow of
 * the sum); small integers for float sum/avg/max/min, {1,-1,2,0.5} for prod. */
static void inputValue(const struct trial* t, int q, size_t i, void* out, size_t oi, int reduces) {
  uint64_t r = h4(t->seed, (uint64_t)q, (uint64_t)i, 0x696e);
  int ty = t->type;
  if (!isFloat(ty)) {
    int64_t v = (int64_t)r;
    if (reduces && t->op == ncclAvg) {
      int64_t lim = ty == T_I8 || ty == T_U8 ? 15 : 1000000;
      v = (int64_t)(r % (uint64_t)(2 * lim + 1)) - lim;
      if (ty == T_U8 || ty == T_U32 || ty == T_U64) v = (int64_t)(r % (uint64_t)lim);
    }
    storeI(ty, out, oi, v);
    return;
  }
  double v;
  if (!reduces) {
    /* copies: any finite value, with a fractional part */
    v = (double)(int64_t)(r % 2000001) / 1024.0 - 976.0;
  } else if (t->op == ncclProd) {
    static const double p[4] = {1.0, -1.0, 2.0, 0.5};
    v = p[r % 4];
  } else {
    v = (double)((int64_t)(r % 129) - 64);
  }
  storeF(ty, out, oi, v);
}

/* The reduction over all ranks of input element i (integers wrap in the type). */
static void reduceRef(const struct trial* t, size_t i, void* out, size_t oi, double* tol) {
  int ty = t->type;
  unsigned char tmp[8];
  *tol = 0;
  if (isFloat(ty)) {
    double acc = 0, mag = 0;
    for (int q = 0; q < nranks; q++) {
      inputValue(t, q, i, tmp, 0, 1);
      double v = loadF(ty, tmp, 0);
      mag += fabs(v);
      if (q == 0) acc = v;
      else if (t->op == ncclSum || t->op == ncclAvg) acc += v;
      else if (t->op == ncclProd) acc *= v;
      else if (t->op == ncclMax) acc = v > acc ? v : acc;
      else acc = v < acc ? v : acc;
    }
    if (t->op == ncclAvg) {
      acc /= nranks;
      *tol = (nranks + 2) * (ty == T_F32 ? 1.2e-7 : 2.3e-16) * mag + 1e-30;
    }
    storeF(ty, out, oi, acc);
    return;
  }
  int sgn = ty == T_I8 || ty == T_I32 || ty == T_I64;
  int bits = (int)tsize[ty] * 8;
  uint64_t mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
  uint64_t acc = 0;
  int64_t sacc = 0; /* avg: exact sum (bounded inputs) */
  for (int q = 0; q < nranks; q++) {
    inputValue(t, q, i, tmp, 0, 1);
    int64_t v = loadI(ty, tmp, 0);
    uint64_t u = (uint64_t)v & mask;
    if (q == 0) {
      acc = u;
      sacc = v;
      continue;
    }
    sacc += v;
    switch (t->op) {
      case ncclSum: acc = (acc + u) & mask; break;
      case ncclProd: acc = (acc * u) & mask; break;
      case ncclMax:
      case ncclMin: {
        int gt;
        if (sgn) { /* acc: the low `bits` bits, sign-extend them */
          int64_t a = bits == 64 ? (int64_t)acc : (int64_t)(acc << (64 - bits)) >> (64 - bits);
          gt = v > a;
        } else {
          gt = u > acc;
        }
        if ((t->op == ncclMax) == gt) acc = u;
        break;
      }
      default: break;
    }
  }
  if (t->op == ncclAvg) acc = (uint64_t)(sacc / nranks) & mask; /* C truncation, as NCCL */
  storeI(ty, out, oi, (int64_t)acc);
}

static int sameElem(int ty, const void* got, size_t gi, const void* want, size_t wi, double tol) {
  if (isFloat(ty)) {
    double g = loadF(ty, got, gi), w = loadF(ty, want, wi);
    if (tol == 0) return memcmp((const char*)got + gi * tsize[ty], (const char*)want + wi * tsize[ty], tsize[ty]) == 0 ||
                         g == w; /* +0 / -0 */
    return fabs(g - w) <= tol;
  }
  return memcmp((const char*)got + gi * tsize[ty], (const char*)want + wi * tsize[ty], tsize[ty]) == 0;
}

#define GUARD 64 /* bytes after every device buffer that must stay untouched */

static int runTrial(const struct trial* t, ncclComm_t comm, cudaStream_t s, int verbose) {
  int n = nranks, ty = t->type;
  size_t es = tsize[ty], c = t->count;
  int reduces = t->coll == C_ALLREDUCE || t->coll == C_REDUCESCATTER || t->coll == C_REDUCE;
  size_t sendCount = c, recvCount = c;
  switch (t->coll) {
    case C_ALLGATHER: recvCount = c * n; break;
    case C_REDUCESCATTER: sendCount = c * n; break;
    case C_ALLTOALL: sendCount = recvCount = c * n; break;
    case C_GATHER: recvCount = c * n; break;
    case C_SCATTER: sendCount = c * n; break;
    case C_SENDRECV: sendCount = recvCount = 2 * c; break;
    default: break;
  }
  /* in place: the send view lies inside the receive buffer, as NCCL defines it */
  size_t inOff = 0; /* elements into recv */
  if (t->inPlace) {
    if (t->coll == C_ALLGATHER) inOff = (size_t)rank * c;
    if (t->coll == C_REDUCESCATTER) recvCount = sendCount; /* recv = send + rank*c */
  }
  size_t recvAlloc = recvCount * es + GUARD, sendAlloc = sendCount * es + GUARD;
  char *dsend = NULL, *drecv = NULL;
  CUCK(cudaMalloc((void**)&drecv, recvAlloc));
  if (!t->inPlace) CUCK(cudaMalloc((void**)&dsend, sendAlloc));
  char* hin = malloc(sendCount * es);
  char* hout = malloc(recvAlloc);
  char* hwant = malloc(recvCount * es);
  double* tol = calloc(recvCount ? recvCount : 1, sizeof(double));
  char* hpoison = malloc(recvAlloc);
  if (!hin || !hout || !hwant || !tol || !hpoison) {
    fprintf(stderr, "rank %d: out of host memory\n", rank);
    exit(2);
  }
  for (size_t i = 0; i < sendCount; i++) inputValue(t, rank, i, hin, i, reduces);
  for (size_t b = 0; b < recvAlloc; b++) hpoison[b] = (char)(0xA5 ^ (b * 131));
  CUCK(cudaMemcpy(drecv, hpoison, recvAlloc, cudaMemcpyHostToDevice));
  const char* sendPtr;
  char* recvPtr = drecv;
  if (t->inPlace) {
    size_t off = t->coll == C_ALLGATHER ? inOff * es : 0;
    CUCK(cudaMemcpy(drecv + off, hin, sendCount * es, cudaMemcpyHostToDevice));
    sendPtr = drecv + off;
    if (t->coll == C_REDUCESCATTER) recvPtr = drecv + (size_t)rank * c * es;
  } else {
    CUCK(cudaMemcpy(dsend, hin, sendCount * es, cudaMemcpyHostToDevice));
    sendPtr = dsend;
  }

  ncclDataType_t dt = ncclType[ty];
  ncclRedOp_t op = (ncclRedOp_t)t->op;
  switch (t->coll) {
    case C_ALLREDUCE: CK(ncclAllReduce(sendPtr, recvPtr, c, dt, op, comm, s)); break;
    case C_ALLGATHER: CK(ncclAllGather(sendPtr, recvPtr, c, dt, comm, s)); break;
    case C_REDUCESCATTER: CK(ncclReduceScatter(sendPtr, recvPtr, c, dt, op, comm, s)); break;
    case C_BROADCAST: CK(ncclBroadcast(sendPtr, recvPtr, c, dt, t->root, comm, s)); break;
    case C_REDUCE: CK(ncclReduce(sendPtr, recvPtr, c, dt, op, t->root, comm, s)); break;
    case C_ALLTOALL: CK(ncclAlltoAll(sendPtr, recvPtr, c, dt, comm, s)); break;
    case C_GATHER: CK(ncclGather(sendPtr, recvPtr, c, dt, t->root, comm, s)); break;
    case C_SCATTER: CK(ncclScatter(sendPtr, recvPtr, c, dt, t->root, comm, s)); break;
    case C_SENDRECV:
      CK(ncclGroupStart());
      for (int k = 0; k < 2; k++) {
        CK(ncclSend(sendPtr + k * c * es, c, dt, (rank + t->shift[k]) % n, comm, s));
        CK(ncclRecv(recvPtr + k * c * es, c, dt, (rank - t->shift[k] + n) % n, comm, s));
      }
      CK(ncclGroupEnd());
      break;
  }
  CUCK(cudaStreamSynchronize(s));
  CUCK(cudaMemcpy(hout, drecv, recvAlloc, cudaMemcpyDeviceToHost));

  /* the expected contents of the whole receive allocation */
  size_t checkFrom = 0, checkCount = 0; /* elements of drecv that hold results */
  char* want = hwant;
  switch (t->coll) {
    case C_ALLREDUCE:
      checkCount = c;
      for (size_t i = 0; i < c; i++) reduceRef(t, i, want, i, &tol[i]);
      break;
    case C_REDUCE:
      if (rank == t->root) {
        checkCount = c;
        for (size_t i = 0; i < c; i++) reduceRef(t, i, want, i, &tol[i]);
      }
      break;
    case C_REDUCESCATTER:
      checkFrom = t->inPlace ? (size_t)rank * c : 0;
      checkCount = c;
      for (size_t i = 0; i < c; i++) reduceRef(t, (size_t)rank * c + i, want, i, &tol[i]);
      break;
    case C_ALLGATHER:
      checkCount = c * n;
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < c; i++) inputValue(t, q, i, want, q * c + i, 0);
      break;
    case C_BROADCAST:
      checkCount = c;
      for (size_t i = 0; i < c; i++) inputValue(t, t->root, i, want, i, 0);
      break;
    case C_ALLTOALL:
      checkCount = c * n;
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < c; i++) inputValue(t, q, (size_t)rank * c + i, want, q * c + i, 0);
      break;
    case C_GATHER:
      if (rank == t->root) {
        checkCount = c * n;
        for (int q = 0; q < n; q++)
          for (size_t i = 0; i < c; i++) inputValue(t, q, i, want, q * c + i, 0);
      }
      break;
    case C_SCATTER:
      checkCount = c;
      for (size_t i = 0; i < c; i++) inputValue(t, t->root, (size_t)rank * c + i, want, i, 0);
      break;
    case C_SENDRECV:
      checkCount = 2 * c;
      for (int k = 0; k < 2; k++) {
        int from = (rank - t->shift[k] + n) % n;
        for (size_t i = 0; i < c; i++) inputValue(t, from, k * c + i, want, k * c + i, 0);
      }
      break;
  }
  int bad = 0;
  for (size_t i = 0; i < checkCount; i++) {
    if (!sameElem(ty, hout, checkFrom + i, want, i, tol[i])) {
      if (bad < 3) {
        if (isFloat(ty))
          fprintf(stderr, "rank %d: %s element %zu = %.17g, want %.17g\n", rank, cname[t->coll], i,
                  loadF(ty, hout, checkFrom + i), loadF(ty, want, i));
        else
          fprintf(stderr, "rank %d: %s element %zu = %lld, want %lld\n", rank, cname[t->coll], i,
                  (long long)loadI(ty, hout, checkFrom + i), (long long)loadI(ty, want, i));
      }
      bad++;
    }
  }
  /* nothing outside the results may change: the guard, and (in place) the rest of the buffer */
  size_t lo = checkFrom * es, hi = (checkFrom + checkCount) * es;
  if (t->coll == C_ALLGATHER && t->inPlace) lo = 0, hi = recvCount * es; /* own block rewritten with itself */
  if (t->inPlace && checkCount == 0) lo = hi = 0;
  for (size_t b = 0; b < recvAlloc; b++) {
    if (b >= lo && b < hi) continue;
    if (t->inPlace && b < recvCount * es) continue; /* in place: the input lives there */
    if (hout[b] != hpoison[b]) {
      if (bad < 3) fprintf(stderr, "rank %d: %s wrote byte %zu outside its result\n", rank, cname[t->coll], b);
      bad++;
      break;
    }
  }
  if (bad || verbose)
    fprintf(bad ? stderr : stdout, "rank %d: trial %s %s %s count %zu root %d%s: %s\n", rank, cname[t->coll],
            tname[ty], reduces ? opname[t->op] : "-", c, t->root, t->inPlace ? " in-place" : "",
            bad ? "WRONG" : "ok");
  free(hin), free(hout), free(hwant), free(tol), free(hpoison);
  CUCK(cudaFree(drecv));
  if (dsend) CUCK(cudaFree(dsend));
  return bad ? 1 : 0;
}

/* ---- bandwidth: cross-host send/recv ------------------------------------------------ */
static void bandwidth(ncclComm_t comm, cudaStream_t s, size_t bytes, int iters, int shift) {
  char *sb, *rb;
  CUCK(cudaMalloc((void**)&sb, bytes));
  CUCK(cudaMalloc((void**)&rb, bytes));
  CUCK(cudaMemset(sb, rank, bytes));
  int to = (rank + shift) % nranks, from = (rank - shift + nranks) % nranks;
  double* dt;
  CUCK(cudaMalloc((void**)&dt, sizeof(double)));
  double t0 = 0, sec = 0;
  for (int it = -1; it < iters; it++) { /* iteration -1: warm-up */
    if (it == 0) t0 = now();
    CK(ncclGroupStart());
    CK(ncclSend(sb, bytes, ncclUint8, to, comm, s));
    CK(ncclRecv(rb, bytes, ncclUint8, from, comm, s));
    CK(ncclGroupEnd());
    CUCK(cudaStreamSynchronize(s));
  }
  sec = now() - t0;
  /* the slowest rank's time */
  CUCK(cudaMemcpy(dt, &sec, sizeof(double), cudaMemcpyHostToDevice));
  CK(ncclAllReduce(dt, dt, 1, ncclFloat64, ncclMax, comm, s));
  CUCK(cudaStreamSynchronize(s));
  double slow;
  CUCK(cudaMemcpy(&slow, dt, sizeof(double), cudaMemcpyDeviceToHost));
  unsigned char first = 0;
  CUCK(cudaMemcpy(&first, rb, 1, cudaMemcpyDeviceToHost));
  if (first != (unsigned char)from) {
    fprintf(stderr, "rank %d: bandwidth receive holds %d, want %d\n", rank, first, from);
    exit(1);
  }
  double algbw = (double)bytes * iters / slow / 1e9;
  int rph = envInt((const char* const[]){"ANYCCL_TEST_RANKS_PER_HOST", NULL}, nranks / 2);
  if (rank == 0)
    printf("netns_rank: sendrecv %zu bytes x %d iters, rank r -> r+%d: %.3f s, algbw %.4f GB/s per rank, "
           "%.4f GB/s per direction between hosts (%s=%s %s=%s %s=%s)\n",
           bytes, iters, shift, slow, algbw, algbw * rph, "NCCL_SOCKET_NTHREADS",
           getenv("NCCL_SOCKET_NTHREADS") ? getenv("NCCL_SOCKET_NTHREADS") : "default", "NCCL_NSOCKS_PERTHREAD",
           getenv("NCCL_NSOCKS_PERTHREAD") ? getenv("NCCL_NSOCKS_PERTHREAD") : "default", "NCCL_MAX_NCHANNELS",
           getenv("NCCL_MAX_NCHANNELS") ? getenv("NCCL_MAX_NCHANNELS") : "default");
  CUCK(cudaFree(sb));
  CUCK(cudaFree(rb));
  CUCK(cudaFree(dt));
}

/* ---- a dropped connection: all-reduces until the communicator fails ------------------ */
static double wallNow(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int untilError(ncclComm_t comm, cudaStream_t s, double seconds, double detectLimit) {
  const double abortLimit = 5.0;
  const size_t count = 1 << 16; /* 256 KiB of floats: data in flight when the link drops */
  float* buf;
  CUCK(cudaMalloc((void**)&buf, count * sizeof(float)));
  CUCK(cudaMemset(buf, 0, count * sizeof(float)));
  printf("READY rank %d: all-reducing %zu floats in a loop until an error (at most %.0f s)\n", rank, count, seconds);
  fflush(stdout);
  double start = now(), deadline = start + seconds, lastOk = start, maxOp = 0;
  long iters = 0, streamErrors = 0;
  ncclResult_t seen = ncclSuccess;
  const char* how = "none";
  while (seen == ncclSuccess && now() < deadline) {
    double t0 = now();
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, s);
    if (r != ncclSuccess) { /* the failure already known: the call refuses */
      seen = r, how = "ncclAllReduce returned it";
      break;
    }
    /* never block: the stream, and the communicator's error, polled under the deadline */
    int done = 0;
    while (now() < deadline) {
      cudaError_t q = cudaStreamQuery(s);
      ncclResult_t a = ncclSuccess;
      ncclResult_t g = ncclCommGetAsyncError(comm, &a);
      if (g != ncclSuccess) {
        seen = g, how = "ncclCommGetAsyncError returned it";
        break;
      }
      if (a != ncclSuccess && a != ncclInProgress) {
        seen = a, how = "ncclCommGetAsyncError";
        break;
      }
      if (q == cudaSuccess) {
        done = 1;
        break;
      }
      if (q != cudaErrorNotReady) { /* the work ended badly: the next call, or poll, tells why */
        if (streamErrors++ < 3)
          fprintf(stderr, "rank %d: cudaStreamQuery: %s (no communicator error yet)\n", rank, cudaGetErrorString(q));
        (void)cudaGetLastError();
        break;
      }
      usleep(1000);
    }
    if (done) {
      iters++;
      lastOk = now();
      if (lastOk - t0 > maxOp) maxOp = lastOk - t0;
    }
  }
  double tErr = now(), epoch = wallNow();
  double stall = tErr - lastOk;
  if (seen == ncclSuccess) {
    fprintf(stderr, "LINK-ERROR rank %d: FAIL: no error in %.1f s (%ld all-reduces, the last completed %.2f s ago)\n",
            rank, tErr - start, iters, stall);
    return 1;
  }
  int ok = seen == ncclRemoteError || seen == ncclSystemError;
  double t1 = now();
  ncclResult_t ar = ncclCommAbort(comm);
  double abortTime = now() - t1;
  /* the pending work has ended (the executor returns when the communicator fails) */
  double t2 = now();
  cudaError_t q;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now() - t2 < abortLimit) usleep(1000);
  double drain = now() - t2;
  int fail = !ok || stall > detectLimit || ar != ncclSuccess || abortTime > abortLimit || q == cudaErrorNotReady;
  printf("LINK-ERROR rank %d: %s: %s (%s) %.2f s after the last completed all-reduce (%ld before it, "
         "slowest %.3f s); ncclCommAbort: %s in %.3f s; stream %s in %.3f s; epoch=%.3f abort=%.3f\n",
         rank, fail ? "FAIL" : "ok", ncclGetErrorString(seen), how, stall, iters, maxOp, ncclGetErrorString(ar),
         abortTime, q == cudaErrorNotReady ? "STILL BUSY" : "idle", drain, epoch, abortTime);
  if (!ok) fprintf(stderr, "rank %d: want ncclRemoteError or ncclSystemError, got %d\n", rank, (int)seen);
  if (stall > detectLimit) fprintf(stderr, "rank %d: detection took %.2f s > %.0f s\n", rank, stall, detectLimit);
  if (abortTime > abortLimit)
    fprintf(stderr, "rank %d: ncclCommAbort took %.2f s > %.0f s\n", rank, abortTime, abortLimit);
  fflush(stdout);
  /* buf belongs to the runtime, not the aborted communicator */
  if (q != cudaErrorNotReady) CUCK(cudaFree(buf));
  return fail ? 1 : 0;
}

int main(int argc, char** argv) {
  int trials = 40, bwIters = 3, verbose = 0;
  uint64_t seed = 12345;
  size_t maxCount = 300000, bwBytes = 0;
  double untilErr = 0, detectLimit = 15;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--trials") && v) trials = atoi(v), i++;
    else if (!strcmp(a, "--seed") && v) seed = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--max-count") && v) maxCount = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--bw") && v) bwBytes = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--bw-iters") && v) bwIters = atoi(v), i++;
    else if (!strcmp(a, "--until-error") && v) untilErr = atof(v), i++;
    else if (!strcmp(a, "--detect-limit") && v) detectLimit = atof(v), i++;
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
    else {
      fprintf(stderr,
              "usage: %s [--trials N] [--seed S] [--max-count ELEMS] [--bw BYTES [--bw-iters N]]\n"
              "          [--until-error SECONDS [--detect-limit SECONDS]] [-v]\n"
              "  rank/size from ANYCCL_TEST_RANK/ANYCCL_TEST_NRANKS (or MPI/Slurm variables); needs NCCL_COMM_ID\n",
              argv[0]);
      return 2;
    }
  }
  rank = envInt((const char* const[]){"ANYCCL_TEST_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                      "SLURM_PROCID", NULL}, -1);
  nranks = envInt((const char* const[]){"ANYCCL_TEST_NRANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                        "SLURM_NTASKS", NULL}, 0);
  int local = envInt((const char* const[]){"ANYCCL_TEST_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "MPI_LOCALRANKID", "SLURM_LOCALID", NULL}, rank);
  if (rank < 0 || nranks < 1 || rank >= nranks) {
    fprintf(stderr, "netns_rank: set ANYCCL_TEST_RANK and ANYCCL_TEST_NRANKS (got rank %d of %d)\n", rank, nranks);
    return 2;
  }
  if (!getenv("NCCL_COMM_ID") || !*getenv("NCCL_COMM_ID")) {
    fprintf(stderr, "netns_rank: set NCCL_COMM_ID=host:port (rank 0's address): every rank derives the id from it\n");
    return 2;
  }
  CUCK(cudaSetDevice(local));
  ncclUniqueId id;
  CK(ncclGetUniqueId(&id)); /* the same bytes on every rank: NCCL_COMM_ID */
  ncclComm_t comm;
  double t0 = now();
  CK(ncclCommInitRank(&comm, nranks, id, rank));
  double tInit = now() - t0;
  cudaStream_t s;
  CUCK(cudaStreamCreate(&s));
  int fails = 0;
  t0 = now();
  for (int i = 0; i < trials; i++) {
    struct trial t = makeTrial(seed, i, maxCount);
    fails += runTrial(&t, comm, s, verbose);
  }
  double tTrials = now() - t0;
  /* everyone's verdict, so that rank 0's summary speaks for all */
  int* dfails;
  CUCK(cudaMalloc((void**)&dfails, sizeof(int)));
  CUCK(cudaMemcpy(dfails, &fails, sizeof(int), cudaMemcpyHostToDevice));
  CK(ncclAllReduce(dfails, dfails, 1, ncclInt32, ncclSum, comm, s));
  CUCK(cudaStreamSynchronize(s));
  int allFails = 0;
  CUCK(cudaMemcpy(&allFails, dfails, sizeof(int), cudaMemcpyDeviceToHost));
  CUCK(cudaFree(dfails));
  printf("netns_rank %d/%d (device %d, host %s): init %.2f s, %d trials (--seed %llu) in %.2f s, %d failed here, "
         "%d in all\n",
         rank, nranks, local, getenv("NCCL_HOSTID") ? getenv("NCCL_HOSTID") : "?", tInit, trials,
         (unsigned long long)seed, tTrials, fails, allFails);
  if (bwBytes > 0) {
    int shift = envInt((const char* const[]){"ANYCCL_TEST_RANKS_PER_HOST", NULL}, nranks / 2);
    if (shift <= 0 || shift >= nranks) shift = nranks > 1 ? 1 : 0;
    bandwidth(comm, s, bwBytes, bwIters, shift);
  }
  if (untilErr > 0) { /* ends with the communicator aborted */
    int bad = untilError(comm, s, untilErr, detectLimit);
    return fails || bad ? 1 : 0;
  }
  CK(ncclCommDestroy(comm));
  CUCK(cudaStreamDestroy(s));
  if (rank == 0) printf("%s: %d ranks, %d trials each\n", allFails ? "FAIL" : "PASS", nranks, trials);
  return fails ? 1 : 0;
}
