/* reduce_scatter_perf: ncclReduceScatter. count = elements each rank receives (a
 * multiple of 16 bytes); size = total bytes sent = count * n * eltsize;
 * busbw = algbw * (n-1)/n. In place: rank r receives into recvbuff + r * count. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  size_t base = perfPerRank(count, es, n);
  *c = (struct perfCounts){.send = base * n, .recv = base, .param = base, .recvInplaceOffset = base};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * es * n) / 1.0e9 / sec;
  *busBw = *algBw * ((double)(n - 1) / n);
}

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcIdx = (size_t)rank * c->param + j;
  return PERF_REDUCE;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclReduceScatter(sendbuff, recvbuff, count, type, op, comm, stream);
}

static const struct perfColl coll = {
    .name = "ReduceScatter", .reduces = 1, .loopsOps = 1, .rooted = 0, .checkInPlace = 1,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
