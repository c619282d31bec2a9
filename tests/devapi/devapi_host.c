/* The device API's host side on the cpu backend, from plain C through
 * nccl_device.h: teams, the team arithmetic of the header, requirement
 * helpers, windows (a record of the range there), and ncclDevCommCreate's
 * refusal (no kernels on the cpu backend: only a trivial device communicator,
 * ranks and teams, is made there) and argument checks.
 *   devapi_host        exit status 0 pass, 1 fail */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "nccl.h"
#include "nccl_device.h"

#ifndef ANYCCL_NCCL_DEVICE_API
#error "nccl_device.h is not anyccl's"
#endif

static int nfail;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
      nfail++;                                                             \
    }                                                                      \
  } while (0)

static int teamEq(ncclTeam_t t, int n, int r, int s) { return t.nRanks == n && t.rank == r && t.stride == s; }

int main(void) {
  enum { N = 4 };
  ncclComm_t comms[N];
  if (ncclCommInitAll(comms, N, NULL) != ncclSuccess) {
    fprintf(stderr, "FAIL: ncclCommInitAll\n");
    return 1;
  }
  for (int r = 0; r < N; r++) {
    CHECK(teamEq(ncclTeamWorld(comms[r]), N, r, 1));
    CHECK(teamEq(ncclTeamLsa(comms[r]), N, r, 1)); /* one host: the LSA team is everyone */
    CHECK(teamEq(ncclTeamRail(comms[r]), 1, 0, N));
    CHECK(ncclTeamRankToWorld(comms[r], ncclTeamLsa(comms[r]), 2) == 2);
    CHECK(ncclTeamRankToLsa(comms[r], ncclTeamWorld(comms[r]), 3) == 3);
    CHECK(ncclTeamRankToWorld(comms[r], ncclTeamWorld(comms[r]), N) == -1);
  }
  /* team arithmetic (header inline functions): world of 8, rank 5, LSA of 4 */
  ncclTeam_t world = {8, 5, 1};
  ncclTeam_t inner = ncclTeamInnerFactor(world, 4), outer = ncclTeamOuterFactor(world, 4);
  CHECK(teamEq(inner, 4, 1, 1));
  CHECK(teamEq(outer, 2, 1, 4));
  CHECK(ncclTeamRankIsMember(inner, world, 7) && !ncclTeamRankIsMember(inner, world, 3));
  CHECK(ncclTeamRankToTeam(inner, world, 6) == 2 && ncclTeamRankToTeam(outer, world, 1) == 0);
  CHECK(ncclTeamRankToTeam(outer, world, 2) == -1);
  CHECK(ncclTeamRankInDifference(world, inner, 0) == 0 && ncclTeamRankInDifference(world, inner, 3) == 3);
  CHECK(ncclTeamRankInDifference(world, inner, 4) == -1);
  CHECK(ncclGetResourceBufferOffset(3) == 384);

  /* requirement helpers: sizes of anyccl's layouts */
  ncclDevResourceRequirements_t req;
  ncclLsaBarrierHandle_t lb;
  CHECK(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comms[0]), 16, &lb, &req) == ncclSuccess);
  /* the inboxes, then the epochs from the next 128-byte line */
  CHECK(lb.nBarriers == 16 && req.bufferSize == ((16 * N + 31) / 32 * 32 + 16) * 4 && req.bufferAlign == 128 &&
        req.outBufferHandle == &lb.bufHandle);
  CHECK(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comms[0]), 3, &lb, &req) == ncclSuccess &&
        req.bufferSize == ((3 * N + 31) / 32 * 32 + 3) * 4);
  ncclGinBarrierHandle_t gb;
  CHECK(ncclGinBarrierCreateRequirement(comms[0], ncclTeamRail(comms[0]), 5, &gb, &req) == ncclSuccess);
  CHECK(req.ginSignalCount == 5 && req.outGinSignalStart == &gb.signal0);
  ncclLLA2AHandle_t ll;
  CHECK(ncclLLA2ACalcSlots(10, 12) == 20);
  CHECK(ncclLLA2ACreateRequirement(2, 20, &ll, &req) == ncclSuccess && req.bufferSize == 2 * 41 * 16);
  CHECK(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comms[0]), -1, &lb, &req) == ncclInvalidArgument);

  /* windows on the cpu backend: a record of the range */
  void* buf[N];
  ncclWindow_t win[N];
  for (int r = 0; r < N; r++) {
    cudaSetDevice(r);
    CHECK(ncclMemAlloc(&buf[r], 1 << 16) == ncclSuccess);
  }
  CHECK(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < N; r++)
    CHECK(ncclCommWindowRegister(comms[r], buf[r], 1 << 16, &win[r], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclCommWindowRegister(comms[0], NULL, 16, &win[0], 0) == ncclInvalidArgument);
  for (int r = 0; r < N; r++) CHECK(ncclCommWindowDeregister(comms[r], win[r]) == ncclSuccess);
  CHECK(ncclCommWindowDeregister(comms[0], (ncclWindow_t)buf[0]) == ncclInvalidArgument);

  /* device communicators: none on the cpu backend; bad arguments first */
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.lsaBarrierCount = 4;
  ncclDevComm_t dc;
  CHECK(ncclDevCommCreate(comms[0], NULL, &dc) == ncclInvalidArgument);
  CHECK(ncclDevCommCreate(comms[0], &reqs, NULL) == ncclInvalidArgument);
  CHECK(ncclDevCommCreate(comms[0], &reqs, &dc) == ncclInvalidUsage);
  CHECK(strstr(ncclGetLastError(comms[0]), "cuda backend") != NULL);
  CHECK(ncclDevCommDestroy(comms[0], NULL) == ncclInvalidArgument);
  /* nothing asked for: ranks and teams only, also on the cpu backend */
  memset(&reqs, 0, sizeof(reqs));
  CHECK(ncclDevCommCreate(comms[2], &reqs, &dc) == ncclSuccess);
  CHECK(dc.rank == 2 && dc.nRanks == N && dc.lsaRank == 2 && dc.lsaSize == N && dc.resourceWindow == NULL);
  CHECK(ncclDevCommDestroy(comms[1], &dc) == ncclInvalidArgument); /* another comm's */
  CHECK(ncclDevCommDestroy(comms[2], &dc) == ncclSuccess);

  for (int r = 0; r < N; r++) {
    ncclMemFree(buf[r]);
    ncclCommDestroy(comms[r]);
  }
  if (nfail) fprintf(stderr, "%d checks failed\n", nfail);
  else printf("ok\n");
  return nfail ? 1 : 0;
}
