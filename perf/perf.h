/* anyccl performance tools: the part shared by every *_perf program.
 *
 * The tools follow nccl-tests (names, flags, output table, JSON, busbw
 * factors, size/count conventions) so that their numbers line up with what
 * everyone reads from nccl-tests on GPUs. The code is anyccl's own.
 *
 * Only the public nccl.h and cuda_runtime.h API is used, and data is
 * initialised and checked through host buffers and cudaMemcpy/cudaMemset
 * (no kernels), so the same sources build against real CUDA + NCCL with a
 * plain C compiler:
 *
 *   cc -O2 -std=gnu11 -o all_reduce_perf perf/all_reduce.c perf/common.c \
 *      perf/options.c perf/data.c perf/report.c -I$CUDA/include -L$CUDA/lib64 -lcudart -lnccl -lpthread -lm
 *
 * (add -DANYCCL_PERF_MPI and build with mpicc for one rank per MPI process).
 *
 * Layout:
 *   perf.h      this file: the collective description and the shared API
 *   options.c   the flags (-b -e -f -g -t -n -w -c -d -o -r -z -a -m -J ...)
 *   common.c    processes/threads/communicators, timing, main loop, header/footer
 *   data.c      element types, deterministic inputs, expected outputs, check
 *   report.c    the nccl-tests table on stdout, JSON (-J), progress line
 *   <coll>.c    one small file per collective: counts, bandwidth, expectation
 */
#ifndef ANYCCL_PERF_H
#define ANYCCL_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <nccl.h>

/* The nccl-tests release whose output format the tools follow. */
#define PERF_FORMAT_VERSION "2.19.6"
#define PERF_VERSION "0.1.0"

/* ---- a collective -------------------------------------------------------- */

/* Element counts of one call for a given size (nccl-tests' conventions). */
struct perfCounts {
  size_t send;              /* elements a rank sends (its send buffer) */
  size_t recv;              /* elements a rank receives (its checked output) */
  size_t param;             /* the count argument of the NCCL call */
  size_t sendInplaceOffset; /* in-place: send = recvbuff + rank * this */
  size_t recvInplaceOffset; /* in-place: recv = recvbuff + rank * this */
};

/* What output element j of a rank must hold. */
enum perfExpect {
  PERF_KEEP = 0,   /* what was there before the call (untouched) */
  PERF_COPY = 1,   /* input element srcIdx of rank srcRank */
  PERF_REDUCE = 2, /* the reduction over all ranks of input element srcIdx */
};

struct perfColl {
  const char* name;  /* "AllReduce" */
  int reduces;       /* inputs are reduced (else only moved: any bits) */
  int loopsOps;      /* iterates over -o ops (else the op column says "none") */
  int rooted;        /* iterates over -r roots (else the root column says -1) */
  int checkInPlace;  /* 0: in-place results are not checked ("N/A") */
  int sameOutput;    /* every rank expects the same output (checked against one reference) */
  void (*counts)(size_t count, size_t eltSize, int nranks, struct perfCounts* c);
  /* algbw and busbw in GB/s (1e9) for one call of `count` elements taking `sec` */
  void (*bw)(size_t count, size_t eltSize, double sec, int nranks, double* algBw, double* busBw);
  /* 1 when `rank` supplies input data (NULL: every rank) */
  int (*hasInput)(int rank, int root);
  enum perfExpect (*expect)(int rank, int nranks, int root, const struct perfCounts* c, size_t j, int* srcRank,
                            size_t* srcIdx);
  ncclResult_t (*run)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                      int root, ncclComm_t comm, cudaStream_t stream);
};

/* Per-rank count of the collectives that split a size over ranks: a multiple
 * of 16 bytes, as nccl-tests uses. */
static inline size_t perfPerRank(size_t count, size_t eltSize, int nranks) {
  return (count / (size_t)nranks) & ~(16 / eltSize - 1);
}

/* The program: parse flags, run every size/type/op/root, print, exit status. */
int perfMain(int argc, char** argv, const struct perfColl* coll);

/* ---- flags (options.c) ---------------------------------------------------- */

#define PERF_MAX_GPUS 65536 /* -g (the sim backend runs thousands of ranks in one process) */

struct perfOptions {
  int nThreads, nGpus;                                  /* -t -g */
  size_t minBytes, maxBytes, stepBytes, stepFactor;     /* -b -e -i -f */
  int datacheck, warmup, iters, aggIters, runCycles;    /* -c -w -n -m -N */
  int op, type, root;                                   /* -o -d -r (-1: all) */
  int parallelInit, blocking, streamNull, timeout;      /* -p -z -y -T */
  int cputime, timestamps, average, localRegister;      /* -C -S -a -R */
  int ctaPolicy, unalign;                               /* -x -u */
  char* jsonPath;                                       /* -J */
};
extern struct perfOptions perfOpt;
/* Returns -1 to go on, or the exit status (usage printed). */
int perfParseArgs(int argc, char** argv, const char* prog);

/* ---- data (data.c) ------------------------------------------------------- */

#define PERF_NUM_TYPES 12 /* int8 .. f8e5m2, in ncclDataType_t order */
#define PERF_OP_MULSUM 5  /* ncclRedOpCreatePreMulSum, as nccl-tests' "mulsum" */
#define PERF_NUM_OPS 6
#define PERF_OP_COPY (-1) /* inputs of collectives that only move data */

extern const char* const perfTypeNames[PERF_NUM_TYPES];
extern const char* const perfOpNames[PERF_NUM_OPS];
size_t perfTypeSize(int type);

/* How inputs are generated for one (type, op, nranks): chosen so that the
 * result of every reduction is exact where the type allows it. */
struct perfModel {
  int type, op, nranks;
  int isFloat, isSigned;
  size_t size;      /* bytes per element */
  uint64_t mask;    /* the element's bits */
  int window;       /* floats: ranks that contribute non-neutral values per element */
  int64_t range;    /* floats: values are integers in [-range, range] */
  uint64_t intMax;  /* integer avg: values in [-intMax, intMax] (signed) or [0, intMax] */
  double ulp;       /* 2^-mantissa bits */
  double tiny;      /* the smallest subnormal */
};

void perfDataInit(void);
void perfModelInit(struct perfModel* m, int type, int op, int nranks);
/* count input elements of `rank`, starting at element 0, into host memory */
void perfFill(const struct perfModel* m, uint64_t seed, int rank, size_t count, void* host);
/* the raw bits of the ncclRedOpCreatePreMulSum scalar of `rank` */
uint64_t perfPremulScalar(int type, int rank);

/* One rank's output check. */
struct perfCheckArgs {
  const struct perfColl* coll;
  const struct perfModel* red;  /* inputs of reductions */
  const struct perfModel* copy; /* inputs of data movement */
  uint64_t seed;
  int rank, nranks, root;
  struct perfCounts c;
  int inPlace;
  int hasInput;   /* this rank wrote its input */
  size_t sendOff; /* element offsets of the send and checked regions in recvbuff (in-place) */
  size_t recvOff;
};
extern int perfCheckReport; /* print up to this many mismatches per check (ANYCCL_PERF_DEBUG) */
/* Elements j0 .. j0+n-1 of the checked region (c.recv elements) that are
 * wrong, in each of ngot host copies: got[k] holds element j0 of rank
 * a->rank + k (ngot > 1 only where those ranks expect the same output). */
int64_t perfCheck(const struct perfCheckArgs* a, size_t j0, size_t n, const void* const* got, int ngot);

/* ---- output (report.c) --------------------------------------------------- */

struct perfOpts; /* common.c */
void perfJsonOpen(const char* path, int argc, char** argv, char** envp, int ncclVersion);
int perfJsonActive(void);
void perfJsonClose(void);
void perfJsonKey(const char* k);
void perfJsonStr(const char* s);
void perfJsonInt(long long v);
void perfJsonDouble(double v);
void perfJsonNull(void);
void perfJsonBool(int v);
void perfJsonBeginObject(void);
void perfJsonEndObject(void);
void perfJsonBeginList(void);
void perfJsonEndList(void);
void perfJsonDeviceLine(const char* line);

void perfRowStart(size_t bytes, size_t count, const char* type, const char* op, int root);
void perfRowBody(double timeUs, double algBw, double busBw, int reportErrors, int64_t wrong, int outOfPlace,
                 int cputime, int timestamps);
void perfRowEnd(int iters);
void perfFormatFloat(double v, int width, char* out);

/* A progress line on stderr ("\r..."), only when stdout is a terminal. */
void perfProgressInit(int enabled);
void perfProgress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void perfProgressClear(void);

#endif /* ANYCCL_PERF_H */
