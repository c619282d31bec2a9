/* all_reduce_perf: ncclAllReduce. size = count * eltsize; busbw = algbw * 2(n-1)/n. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  *c = (struct perfCounts){.send = count, .recv = count, .param = count};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * es) / 1.0e9 / sec;
  *busBw = *algBw * (2.0 * (n - 1) / n);
}

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcIdx = j;
  return PERF_REDUCE;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclAllReduce(sendbuff, recvbuff, count, type, op, comm, stream);
}

static const struct perfColl coll = {
    .name = "AllReduce", .reduces = 1, .loopsOps = 1, .rooted = 0, .checkInPlace = 1, .sameOutput = 1,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
