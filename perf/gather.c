/* gather_perf: ncclGather to -r root (-r -1: every root in turn). count =
 * elements per rank (a multiple of 16 bytes); size = count * n * eltsize;
 * busbw = algbw * (n-1)/n. In place: rank r sends from recvbuff + r * count;
 * other ranks' receive buffers must stay untouched. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  size_t base = perfPerRank(count, es, n);
  *c = (struct perfCounts){.send = base, .recv = base * n, .param = base, .sendInplaceOffset = base};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * n * es) / 1.0e9 / sec;
  *busBw = *algBw * ((double)(n - 1) / n);
}

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcRank = (int)(j / c->param);
  *srcIdx = j % c->param;
  return rank == root ? PERF_COPY : PERF_KEEP;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (count == 0) return ncclSuccess; /* as nccl-tests */
  return ncclGather(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perfColl coll = {
    .name = "Gather", .reduces = 0, .loopsOps = 0, .rooted = 1, .checkInPlace = 1,
    .counts = counts, .bw = bw, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
