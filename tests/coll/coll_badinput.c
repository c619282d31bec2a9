/* Bad inputs and their exact error codes (NCCL's), plus the message that
 * ncclGetLastError returns afterwards: it must not be empty and must name
 * the offending argument (one of a few words, matched as a whole word,
 * case-insensitively). Afterwards the communicators must still work.
 *
 *   coll_badinput          all cases; exit status 0 pass, 1 fail
 *
 * Only nccl.h and cuda_runtime.h are used. */
#include "coll_common.h"

#include <ctype.h>

static int nfail, nchecks;

static int isWordChar(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* `words` is a '|'-separated list; true if any of them is a word of s. */
static int namesAny(const char* s, const char* words) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", words);
  char* save = NULL;
  for (char* w = strtok_r(buf, "|", &save); w; w = strtok_r(NULL, "|", &save)) {
    size_t wl = strlen(w);
    for (const char* p = s; *p; p++)
      if (strncasecmp(p, w, wl) == 0 && (p == s || !isWordChar(p[-1])) && !isWordChar(p[wl])) return 1;
  }
  return 0;
}

static void expect(const char* what, ncclResult_t got, ncclResult_t want, ncclComm_t comm, const char* words) {
  nchecks++;
  if (got != want) {
    nfail++;
    say("FAIL %s: returned %s (%d), expected %s (%d)\n", what, ncclGetErrorString(got), (int)got,
        ncclGetErrorString(want), (int)want);
    return;
  }
  const char* msg = ncclGetLastError(comm);
  if (msg == NULL || msg[0] == '\0') {
    nfail++;
    say("FAIL %s: ncclGetLastError(%s) is empty after the error\n", what, comm ? "comm" : "NULL");
    return;
  }
  if (words && !namesAny(msg, words)) {
    nfail++;
    say("FAIL %s: ncclGetLastError says \"%s\", which names none of: %s\n", what, msg, words);
    return;
  }
}

enum { A_COMM, A_TYPE, A_SEND, A_RECV, A_OP, A_ROOT, A_STREAM };

/* One call of collective f with all arguments valid (2 ranks, rank 0, count
 * 8, root/peer 1, float, sum) except the ones overridden. */
typedef struct {
  ncclComm_t comm;
  const void* sb;
  void* rb;
  size_t count;
  ncclDataType_t dt;
  ncclRedOp_t op;
  int root;
  cudaStream_t stream;
} args_t;

static ncclResult_t call(int f, const args_t* a) {
  switch (f) {
    case F_ALLREDUCE: return ncclAllReduce(a->sb, a->rb, a->count, a->dt, a->op, a->comm, a->stream);
    case F_BROADCAST: return ncclBroadcast(a->sb, a->rb, a->count, a->dt, a->root, a->comm, a->stream);
    case F_BCAST: return ncclBcast(a->rb, a->count, a->dt, a->root, a->comm, a->stream);
    case F_REDUCE: return ncclReduce(a->sb, a->rb, a->count, a->dt, a->op, a->root, a->comm, a->stream);
    case F_ALLGATHER: return ncclAllGather(a->sb, a->rb, a->count, a->dt, a->comm, a->stream);
    case F_REDUCESCATTER: return ncclReduceScatter(a->sb, a->rb, a->count, a->dt, a->op, a->comm, a->stream);
    case F_ALLTOALL: return ncclAlltoAll(a->sb, a->rb, a->count, a->dt, a->comm, a->stream);
    case F_GATHER: return ncclGather(a->sb, a->rb, a->count, a->dt, a->root, a->comm, a->stream);
    case F_SCATTER: return ncclScatter(a->sb, a->rb, a->count, a->dt, a->root, a->comm, a->stream);
    case F_SENDRECV: return ncclSend(a->sb, a->count, a->dt, a->root, a->comm, a->stream);
    default: return ncclRecv(a->rb, a->count, a->dt, a->root, a->comm, a->stream);
  }
}
static const char* callName(int f) { return f == F_PAIRS ? "ncclRecv" : f == F_SENDRECV ? "ncclSend" : funcName[f]; }
static int usesSend(int f) { return f != F_PAIRS && f != F_BCAST; }
static int usesRecv(int f) { return f != F_SENDRECV; }

static void collectiveCases(ncclComm_t comm, ncclComm_t other, cudaStream_t stream, cudaStream_t otherStream,
                            void* sb, void* rb) {
  char what[160];
  args_t ok = {comm, sb, rb, 8, ncclFloat, ncclSum, 1, stream};
  for (int f = 0; f < NFUNCS; f++) {
    args_t a;
    /* NULL comm */
    a = ok;
    a.comm = NULL;
    snprintf(what, sizeof(what), "%s with a NULL comm", callName(f));
    expect(what, call(f, &a), ncclInvalidArgument, NULL, "comm");
    /* datatype out of range */
    int badTypes[] = {99, -1, ncclNumTypes};
    for (int k = 0; k < 3; k++) {
      a = ok;
      a.dt = (ncclDataType_t)badTypes[k];
      snprintf(what, sizeof(what), "%s with datatype %d", callName(f), badTypes[k]);
      expect(what, call(f, &a), ncclInvalidArgument, comm, "datatype|type");
    }
    /* NULL buffers with count > 0 (roots at rank 0 where the buffer is root-only) */
    if (usesSend(f)) {
      a = ok;
      a.sb = NULL;
      if (f == F_BROADCAST || f == F_SCATTER) a.root = 0;
      snprintf(what, sizeof(what), "%s with a NULL sendbuff", callName(f));
      expect(what, call(f, &a), ncclInvalidArgument, comm, "sendbuff|buff");
    }
    if (usesRecv(f)) {
      a = ok;
      a.rb = NULL;
      if (f == F_REDUCE || f == F_GATHER || f == F_BCAST) a.root = 0;
      snprintf(what, sizeof(what), "%s with a NULL recvbuff", callName(f));
      expect(what, call(f, &a), ncclInvalidArgument, comm, f == F_BCAST ? "buff|sendbuff|recvbuff" : "recvbuff|buff");
    }
    /* root / peer out of range */
    if (rootedF(f) || f == F_SENDRECV || f == F_PAIRS) {
      int badRoots[] = {-1, 2, 1000};
      for (int k = 0; k < 3; k++) {
        a = ok;
        a.root = badRoots[k];
        snprintf(what, sizeof(what), "%s with %s %d of 2 ranks", callName(f), rootedF(f) ? "root" : "peer",
                 badRoots[k]);
        expect(what, call(f, &a), ncclInvalidArgument, comm, rootedF(f) ? "root" : "peer");
      }
    }
    /* a stream of another device */
    a = ok;
    a.stream = otherStream;
    snprintf(what, sizeof(what), "%s with a stream of another device", callName(f));
    expect(what, call(f, &a), ncclInvalidUsage, comm, "stream");
  }

  /* ops; `dead` is tested while no user op is live, so that its slot is not reused */
  int reduceF[] = {F_ALLREDUCE, F_REDUCE, F_REDUCESCATTER};
  ncclRedOp_t dead, wrongType, foreign;
  float fs = 2.0f;
  NCCLOK(ncclRedOpCreatePreMulSum(&dead, &fs, ncclFloat, ncclScalarHostImmediate, comm));
  NCCLOK(ncclRedOpDestroy(dead, comm));
  struct badOp {
    ncclRedOp_t op;
    ncclDataType_t dt;
    const char* desc;
  } badOps[] = {{(ncclRedOp_t)99, ncclFloat, "op 99"},
                {(ncclRedOp_t)-1, ncclFloat, "op -1"},
                {(ncclRedOp_t)ncclNumOps, ncclFloat, "op ncclNumOps (no user op is live)"},
                {ncclMaxRedOp, ncclFloat, "op ncclMaxRedOp"},
                {dead, ncclFloat, "a destroyed premulsum op"}};
  for (size_t k = 0; k < sizeof(badOps) / sizeof(badOps[0]); k++)
    for (int i = 0; i < 3; i++) {
      args_t a = ok;
      a.op = badOps[k].op;
      a.dt = badOps[k].dt;
      snprintf(what, sizeof(what), "%s with %s", funcName[reduceF[i]], badOps[k].desc);
      expect(what, call(reduceF[i], &a), ncclInvalidArgument, comm, "op|ncclRedOp_t|datatype");
    }
  NCCLOK(ncclRedOpCreatePreMulSum(&wrongType, &fs, ncclFloat, ncclScalarHostImmediate, comm));
  NCCLOK(ncclRedOpCreatePreMulSum(&foreign, &fs, ncclFloat, ncclScalarHostImmediate, other));
  struct badOp badOps2[] = {{wrongType, ncclInt32, "a float premulsum op on int32 data"},
                            {wrongType, ncclHalf, "a float premulsum op on half data"}};
  for (size_t k = 0; k < sizeof(badOps2) / sizeof(badOps2[0]); k++)
    for (int i = 0; i < 3; i++) {
      args_t a = ok;
      a.op = badOps2[k].op;
      a.dt = badOps2[k].dt;
      snprintf(what, sizeof(what), "%s with %s", funcName[reduceF[i]], badOps2[k].desc);
      expect(what, call(reduceF[i], &a), ncclInvalidArgument, comm, "op|ncclRedOp_t|datatype");
    }
  NCCLOK(ncclRedOpDestroy(wrongType, comm));
  /* an op of another comm, after this comm's last op was destroyed */
  for (int i = 0; i < 3; i++) {
    args_t a = ok;
    a.op = foreign;
    snprintf(what, sizeof(what), "%s with a premulsum op of another comm", funcName[reduceF[i]]);
    expect(what, call(reduceF[i], &a), ncclInvalidArgument, comm, "op|ncclRedOp_t");
  }
  NCCLOK(ncclRedOpDestroy(foreign, other));

  /* creating and destroying ops */
  ncclRedOp_t op;
  expect("ncclRedOpCreatePreMulSum with datatype 99",
         ncclRedOpCreatePreMulSum(&op, &fs, (ncclDataType_t)99, ncclScalarHostImmediate, comm), ncclInvalidArgument,
         comm, "datatype|type");
  expect("ncclRedOpCreatePreMulSum with residence 7",
         ncclRedOpCreatePreMulSum(&op, &fs, ncclFloat, (ncclScalarResidence_t)7, comm), ncclInvalidArgument, comm,
         "residence");
  expect("ncclRedOpCreatePreMulSum with a NULL scalar",
         ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, comm), ncclInvalidArgument, comm,
         "scalar");
  expect("ncclRedOpCreatePreMulSum with a NULL comm",
         ncclRedOpCreatePreMulSum(&op, &fs, ncclFloat, ncclScalarHostImmediate, NULL), ncclInvalidArgument, NULL,
         "comm");
  expect("ncclRedOpDestroy(ncclSum)", ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, comm, "op");
  expect("ncclRedOpDestroy of a destroyed op", ncclRedOpDestroy(dead, comm), ncclInvalidArgument, comm, "op");
}

static void initCases(void) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  NCCLOK(ncclGetUniqueId(&id));
  CUDAOK(cudaSetDevice(0));
  expect("ncclCommInitRank with nranks 0", ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, NULL, "nranks");
  expect("ncclCommInitRank with nranks -3", ncclCommInitRank(&c, -3, id, 0), ncclInvalidArgument, NULL, "nranks");
  expect("ncclCommInitRank with rank 2 of 2", ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, NULL, "rank");
  expect("ncclCommInitRank with rank -1", ncclCommInitRank(&c, 2, id, -1), ncclInvalidArgument, NULL, "rank");
  expect("ncclCommInitRank with a NULL comm pointer", ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument, NULL,
         "comm|newcomm");

  ncclConfig_t bad;
  memset(&bad, 0, sizeof(bad));
  bad.size = sizeof(bad);
  bad.blocking = 1;
  expect("ncclCommInitRankConfig with a config not from NCCL_CONFIG_INITIALIZER",
         ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument, NULL, "config|NCCL_CONFIG_INITIALIZER");
  ncclConfig_t good = NCCL_CONFIG_INITIALIZER;
  good.magic ^= 1;
  expect("ncclCommInitRankConfig with a wrong magic", ncclCommInitRankConfig(&c, 1, id, 0, &good),
         ncclInvalidArgument, NULL, "config|NCCL_CONFIG_INITIALIZER|magic");

  ncclComm_t comms[2];
  int dup[2] = {0, 0}, outOfRange[2] = {0, 999};
  expect("ncclCommInitAll with a device twice", ncclCommInitAll(comms, 2, dup), ncclInvalidUsage, NULL,
         "device|devlist|GPU");
  expect("ncclCommInitAll with device 999", ncclCommInitAll(comms, 2, outOfRange), ncclInvalidArgument, NULL,
         "device|devlist");
  expect("ncclCommInitAll with ndev -1", ncclCommInitAll(comms, -1, NULL), ncclInvalidArgument, NULL, "ndev");

  expect("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL), ncclInvalidArgument, NULL, "uniqueId|id");
  expect("ncclGetVersion(NULL)", ncclGetVersion(NULL), ncclInvalidArgument, NULL, "version");
  expect("ncclGroupEnd without ncclGroupStart", ncclGroupEnd(), ncclInvalidUsage, NULL,
         "ncclGroupStart|ncclGroupEnd|group");
}

/* Two ranks of one comm on the same device: init fails on both with ncclInvalidUsage. */
typedef struct {
  ncclUniqueId id;
  int rank;
  ncclResult_t res;
  char msg[512];
  ncclComm_t comm;
} dupArg_t;

static void* dupRank(void* p) {
  dupArg_t* a = p;
  CUDAOK(cudaSetDevice(3));
  a->res = ncclCommInitRank(&a->comm, 2, a->id, a->rank);
  const char* m = ncclGetLastError(NULL);
  snprintf(a->msg, sizeof(a->msg), "%s", m ? m : "");
  return NULL;
}

static void duplicateDeviceCase(void) {
  dupArg_t a[2];
  pthread_t th[2];
  ncclUniqueId id;
  NCCLOK(ncclGetUniqueId(&id));
  for (int r = 0; r < 2; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].id = id;
    a[r].rank = r;
    pthread_create(&th[r], NULL, dupRank, &a[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    nchecks++;
    if (a[r].res != ncclInvalidUsage) {
      nfail++;
      say("FAIL two ranks on device 3: rank %d's ncclCommInitRank returned %s (%d), expected ncclInvalidUsage\n", r,
          ncclGetErrorString(a[r].res), a[r].res);
      if (a[r].res == ncclSuccess) ncclCommDestroy(a[r].comm);
    } else if (!namesAny(a[r].msg, "device|GPU|devices")) {
      nfail++;
      say("FAIL two ranks on device 3: rank %d's last error \"%s\" does not name the device\n", r, a[r].msg);
    }
  }
}

/* A valid grouped all-reduce over both comms, checked against the reference. */
static long stillWorks(ctx_t* ctxs, int f, int op) {
  trial_t t = makeTrial(envU64("ANYCCL_TEST_SEED", 1), 1 + f * 8 + op, 2, f, T_F32, op, CC_SMALL);
  item_t items[2];
  for (int r = 0; r < 2; r++) itemPrepare(&items[r], &ctxs[r], &t);
  return runItems(items, 2, 1);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  refInit();
  corruptInit();
  int ndev = 0;
  CUDAOK(cudaGetDeviceCount(&ndev));
  if (ndev < 4) die("need 4 devices; cudaGetDeviceCount says %d", ndev);

  for (int r = 0; r < ncclNumResults; r++) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    nchecks++;
    if (s == NULL || s[0] == '\0') {
      nfail++;
      say("FAIL ncclGetErrorString(%d) is empty\n", r);
    }
  }

  initCases();
  duplicateDeviceCase();

  ncclComm_t comms[2];
  NCCLOK(ncclCommInitAll(comms, 2, NULL));
  ctx_t ctxs[2];
  for (int r = 0; r < 2; r++) {
    memset(&ctxs[r], 0, sizeof(ctxs[r]));
    ctxs[r].comm = comms[r];
    ctxs[r].rank = r;
    ctxs[r].nranks = 2;
    ctxs[r].dev = r;
    snprintf(ctxs[r].name, sizeof(ctxs[r].name), "initall");
    CUDAOK(cudaSetDevice(r));
    CUDAOK(cudaStreamCreate(&ctxs[r].stream));
    CUDAOK(cudaStreamCreate(&ctxs[r].stream2));
  }
  void *sb, *rb;
  CUDAOK(cudaSetDevice(0));
  CUDAOK(cudaMalloc(&sb, 4096));
  CUDAOK(cudaMalloc(&rb, 4096));

  collectiveCases(comms[0], comms[1], ctxs[0].stream, ctxs[1].stream, sb, rb);

  /* queries */
  int v;
  expect("ncclCommCount(NULL)", ncclCommCount(NULL, &v), ncclInvalidArgument, NULL, "comm");
  expect("ncclCommCount with a NULL count", ncclCommCount(comms[0], NULL), ncclInvalidArgument, comms[0], "count");
  expect("ncclCommUserRank(NULL)", ncclCommUserRank(NULL, &v), ncclInvalidArgument, NULL, "comm");
  expect("ncclCommUserRank with a NULL rank", ncclCommUserRank(comms[0], NULL), ncclInvalidArgument, comms[0], "rank");
  expect("ncclCommCuDevice(NULL)", ncclCommCuDevice(NULL, &v), ncclInvalidArgument, NULL, "comm");
  expect("ncclCommCuDevice with a NULL device", ncclCommCuDevice(comms[0], NULL), ncclInvalidArgument, comms[0],
         "device");
  ncclComm_t child;
  ncclConfig_t bad;
  memset(&bad, 0, sizeof(bad));
  bad.size = sizeof(bad);
  expect("ncclCommSplit with a config not from NCCL_CONFIG_INITIALIZER", ncclCommSplit(comms[0], 0, 0, &child, &bad),
         ncclInvalidArgument, comms[0], "config|NCCL_CONFIG_INITIALIZER");
  expect("ncclCommSplit with color -5", ncclCommSplit(comms[0], -5, 0, &child, NULL), ncclInvalidArgument, comms[0],
         "color");
  expect("ncclCommSplit(NULL)", ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument, NULL, "comm");

  /* an error inside a group: returned by the call and again by ncclGroupEnd */
  NCCLOK(ncclGroupStart());
  expect("ncclAllReduce with datatype 99 inside a group",
         ncclAllReduce(sb, rb, 8, (ncclDataType_t)99, ncclSum, comms[0], ctxs[0].stream), ncclInvalidArgument,
         comms[0], "datatype|type");
  expect("ncclGroupEnd after an invalid call in the group", ncclGroupEnd(), ncclInvalidArgument, NULL, NULL);

  /* the comms still work */
  long bad2 = 0;
  bad2 += stillWorks(ctxs, F_ALLREDUCE, OP_SUM);
  bad2 += stillWorks(ctxs, F_REDUCESCATTER, OP_PREMUL_HOST);
  bad2 += stillWorks(ctxs, F_PAIRS, OP_SUM);
  nchecks++;
  if (bad2) {
    nfail++;
    say("FAIL: collectives after the bad inputs gave %ld mismatches\n", bad2);
  }

  /* a destroyed comm */
  ncclUniqueId id;
  ncclComm_t one;
  NCCLOK(ncclGetUniqueId(&id));
  CUDAOK(cudaSetDevice(2));
  NCCLOK(ncclCommInitRank(&one, 1, id, 0));
  NCCLOK(ncclCommDestroy(one));
  CUDAOK(cudaSetDevice(0));
  expect("ncclAllReduce on a destroyed comm", ncclAllReduce(sb, rb, 8, ncclFloat, ncclSum, one, NULL),
         ncclInvalidArgument, NULL, "comm");
  expect("ncclSend on a destroyed comm", ncclSend(sb, 8, ncclFloat, 0, one, NULL), ncclInvalidArgument, NULL, "comm");
  expect("ncclCommCount on a destroyed comm", ncclCommCount(one, &v), ncclInvalidArgument, NULL, "comm");

  CUDAOK(cudaFree(sb));
  CUDAOK(cudaFree(rb));
  for (int r = 0; r < 2; r++) {
    CUDAOK(cudaSetDevice(r));
    CUDAOK(cudaStreamDestroy(ctxs[r].stream));
    CUDAOK(cudaStreamDestroy(ctxs[r].stream2));
    NCCLOK(ncclCommDestroy(comms[r]));
  }
  say("coll_badinput: %d checks, %d failed: %s\n", nchecks, nfail, nfail ? "FAIL" : "PASS");
  return nfail ? 1 : 0;
}
