/* reduce_perf: ncclReduce to -r root (-r -1: every root in turn).
 * size = count * eltsize; busbw = algbw. Other ranks' receive buffers must
 * stay untouched. */
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
  *srcIdx = j;
  return rank == root ? PERF_REDUCE : PERF_KEEP;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclReduce(sendbuff, recvbuff, count, type, op, root, comm, stream);
}

static const struct perfColl coll = {
    .name = "Reduce", .reduces = 1, .loopsOps = 1, .rooted = 1, .checkInPlace = 1,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
