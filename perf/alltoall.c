/* alltoall_perf: ncclAlltoAll. count = elements per peer (a multiple of 16
 * bytes); size = count * n * eltsize per rank; busbw = algbw * (n-1)/n.
 * In-place all-to-all is timed but, as in nccl-tests, not checked. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  size_t base = perfPerRank(count, es, n);
  *c = (struct perfCounts){.send = base * n, .recv = base * n, .param = base};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * n * es) / 1.0e9 / sec;
  *busBw = *algBw * ((double)(n - 1) / n);
}

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcRank = (int)(j / c->param);
  *srcIdx = (size_t)rank * c->param + j % c->param;
  return PERF_COPY;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclAlltoAll(sendbuff, recvbuff, count, type, comm, stream);
}

static const struct perfColl coll = {
    .name = "AlltoAll", .reduces = 0, .loopsOps = 0, .rooted = 0, .checkInPlace = 0,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
