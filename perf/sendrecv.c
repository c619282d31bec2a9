/* sendrecv_perf: every rank sends to rank+1 and receives from rank-1 (a ring),
 * in one group. size = count * eltsize; busbw = algbw. The op column follows
 * -o as in nccl-tests (the op is not used). In-place is timed, not checked. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  *c = (struct perfCounts){.send = count, .recv = count, .param = count};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * es) / 1.0e9 / sec;
  *busBw = *algBw;
}

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcRank = (rank - 1 + n) % n;
  *srcIdx = j;
  return PERF_COPY;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  int n, rank;
  ncclResult_t r;
  if ((r = ncclCommCount(comm, &n)) != ncclSuccess) return r;
  if ((r = ncclCommUserRank(comm, &rank)) != ncclSuccess) return r;
  if ((r = ncclGroupStart()) != ncclSuccess) return r;
  ncclResult_t s = ncclSend(sendbuff, count, type, (rank + 1) % n, comm, stream);
  ncclResult_t v = ncclRecv(recvbuff, count, type, (rank - 1 + n) % n, comm, stream);
  r = ncclGroupEnd();
  return s != ncclSuccess ? s : v != ncclSuccess ? v : r;
}

static const struct perfColl coll = {
    .name = "SendRecv", .reduces = 0, .loopsOps = 1, .rooted = 0, .checkInPlace = 0,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
