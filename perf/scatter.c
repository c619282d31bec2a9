/* scatter_perf: ncclScatter from -r root (-r -1: every root in turn). count =
 * elements per rank (a multiple of 16 bytes); size = count * n * eltsize;
 * busbw = algbw * (n-1)/n. In place: rank r receives into recvbuff + r * count. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  size_t base = perfPerRank(count, es, n);
  *c = (struct perfCounts){.send = base * n, .recv = base, .param = base, .recvInplaceOffset = base};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * n * es) / 1.0e9 / sec;
  *busBw = *algBw * ((double)(n - 1) / n);
}

static int hasInput(int rank, int root) { return rank == root; }

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcRank = root;
  *srcIdx = (size_t)rank * c->param + j;
  return PERF_COPY;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (count == 0) return ncclSuccess; /* as nccl-tests */
  return ncclScatter(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perfColl coll = {
    .name = "Scatter", .reduces = 0, .loopsOps = 0, .rooted = 1, .checkInPlace = 1,
    .counts = counts, .bw = bw, .hasInput = hasInput, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
