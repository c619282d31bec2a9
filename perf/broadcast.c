/* broadcast_perf: ncclBroadcast from -r root (-r -1: every root in turn).
 * size = count * eltsize; busbw = algbw. */
#include "perf.h"

static void counts(size_t count, size_t es, int n, struct perfCounts* c) {
  *c = (struct perfCounts){.send = count, .recv = count, .param = count};
}

static void bw(size_t count, size_t es, double sec, int n, double* algBw, double* busBw) {
  *algBw = (double)(count * es) / 1.0e9 / sec;
  *busBw = *algBw;
}

static int hasInput(int rank, int root) { return rank == root; }

static enum perfExpect expect(int rank, int n, int root, const struct perfCounts* c, size_t j, int* srcRank,
                              size_t* srcIdx) {
  *srcRank = root;
  *srcIdx = j;
  return PERF_COPY;
}

static ncclResult_t run(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perfColl coll = {
    .name = "Broadcast", .reduces = 0, .loopsOps = 0, .rooted = 1, .checkInPlace = 1,
    .counts = counts, .bw = bw, .hasInput = hasInput, .expect = expect, .run = run,
};

int main(int argc, char** argv) { return perfMain(argc, argv, &coll); }
