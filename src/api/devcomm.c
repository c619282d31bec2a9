/* The device API's host entry points (NCCL 2.28, nccl_device.h): device
 * communicators, teams, and the requirement helpers of LSA barriers, GIN
 * barriers and LL all-to-all sessions. Device communicators exist on the
 * cuda backend (backend/cuda_devcomm.c). */
#include <string.h>
#include "api.h"
#include "checks.h"
#include "comm.h"
#include "nccl_device/core.h"

NCCL_API(ncclResult_t, ncclDevCommCreate,
         (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclDevCommCreate", 1));
  if (reqs == NULL || outDevComm == NULL) {
    WARN("ncclDevCommCreate: reqs %p, outDevComm %p: pass both (reqs zeroed, then the counts you need)",
         (const void*)reqs, (void*)outDevComm);
    return ncclInvalidArgument;
  }
  if (reqs->barrierCount < 0 || reqs->lsaBarrierCount < 0 || reqs->railGinBarrierCount < 0 ||
      reqs->ginSignalCount < 0 || reqs->ginCounterCount < 0 || reqs->lsaLLA2ABlockCount < 0 ||
      reqs->lsaLLA2ASlotCount < 0) {
    WARN("ncclDevCommCreate: a count in reqs is negative: zero the requirements before setting them");
    return ncclInvalidArgument;
  }
  if (!comm->cuda) {
    const ncclDevCommRequirements_t* r = reqs;
    int trivial = !r->lsaMultimem && !r->ginForceEnable && r->barrierCount == 0 && r->lsaBarrierCount == 0 &&
                  r->railGinBarrierCount == 0 && r->lsaLLA2ABlockCount == 0 && r->ginSignalCount == 0 &&
                  r->ginCounterCount == 0 && r->resourceRequirementsList == NULL && r->teamRequirementsList == NULL;
    if (!trivial) {
      WARN("ncclDevCommCreate: comm %p runs on the cpu backend, which runs no kernels: barriers, signals, counters "
           "and resource buffers need the cuda backend (GPUs)", (void*)comm);
      return ncclInvalidUsage;
    }
    /* Nothing asked for: the ranks and teams alone (no resource window). */
    memset(outDevComm, 0, sizeof(*outDevComm));
    outDevComm->rank = comm->rank;
    outDevComm->nRanks = comm->nRanks;
    anycclLsaTeam(comm, &outDevComm->lsaSize, &outDevComm->lsaRank);
    return ncclSuccess;
  }
  return anycclDevCommCreate(comm, reqs, outDevComm);
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm)) {
  NCCLCHECK(anycclCommCheck(comm, "ncclDevCommDestroy", 0));
  if (devComm == NULL) {
    WARN("ncclDevCommDestroy: devComm is NULL");
    return ncclInvalidArgument;
  }
  if (!comm->cuda) {
    if (devComm->resourceWindow == NULL && devComm->rank == comm->rank && devComm->nRanks == comm->nRanks)
      return ncclSuccess; /* a trivial one (above) */
    WARN("ncclDevCommDestroy: devComm %p was not made by ncclDevCommCreate on comm %p", (const void*)devComm,
         (void*)comm);
    return ncclInvalidArgument;
  }
  return anycclDevCommDestroy(comm, devComm);
}

/* ---- teams ------------------------------------------------------------------- */
/* Teams of a bad communicator are empty (these return no error code). */
static int teamComm(ncclComm_t comm, const char* fn) {
  if (anycclCommCheck(comm, fn, 1) != ncclSuccess) return 0;
  return 1;
}

NCCL_API(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm)) {
  ncclTeam_t t = {0, 0, 1};
  if (!teamComm(comm, "ncclTeamWorld")) return t;
  t.nRanks = comm->nRanks;
  t.rank = comm->rank;
  return t;
}

NCCL_API(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm)) {
  ncclTeam_t t = {0, 0, 1};
  if (!teamComm(comm, "ncclTeamLsa")) return t;
  anycclLsaTeam(comm, &t.nRanks, &t.rank);
  return t;
}

NCCL_API(ncclTeam_t, ncclTeamRail, (ncclComm_t comm)) {
  ncclTeam_t t = {0, 0, 1};
  if (!teamComm(comm, "ncclTeamRail")) return t;
  int lsaSize, lsaRank;
  anycclLsaTeam(comm, &lsaSize, &lsaRank);
  t.nRanks = comm->nRanks / lsaSize;
  t.rank = comm->rank / lsaSize;
  t.stride = lsaSize;
  return t;
}

NCCL_API(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank)) {
  if (!teamComm(comm, "ncclTeamRankToWorld")) return -1;
  if (rank < 0 || rank >= team.nRanks) return -1;
  int w = anycclTeamToWorld(comm->rank, team, rank);
  return w >= 0 && w < comm->nRanks ? w : -1;
}

NCCL_API(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank)) {
  if (!teamComm(comm, "ncclTeamRankToLsa")) return -1;
  int lsaSize, lsaRank;
  anycclLsaTeam(comm, &lsaSize, &lsaRank);
  int lsa = anycclTeamToWorld(comm->rank, team, rank) - (comm->rank - lsaRank);
  return lsa >= 0 && lsa < lsaSize ? lsa : -1;
}

/* ---- requirements ------------------------------------------------------------- */
/* Layouts: lsa_barrier.h, gin.h and ll_a2a.h say what the buffers hold. */
NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement,
         (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)) {
  if (outHandle == NULL || outReq == NULL || nBarriers < 0 || team.nRanks < 0) {
    WARN("ncclLsaBarrierCreateRequirement: nBarriers %d, team of %d, outHandle %p, outReq %p: counts >= 0 and both "
         "pointers", nBarriers, team.nRanks, (void*)outHandle, (void*)outReq);
    return ncclInvalidArgument;
  }
  memset(outReq, 0, sizeof(*outReq));
  outHandle->nBarriers = nBarriers;
  outHandle->bufHandle = 0;
  outReq->bufferSize = ((size_t)anycclLsaEpochWord(nBarriers, team.nRanks) + (size_t)nBarriers) * sizeof(uint32_t);
  outReq->bufferAlign = 128; /* the epochs on lines of their own */
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement,
         (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,
          ncclDevResourceRequirements_t* outReq)) {
  if (outHandle == NULL || outReq == NULL || nBarriers < 0) {
    WARN("ncclGinBarrierCreateRequirement: nBarriers %d, outHandle %p, outReq %p: a count >= 0 and both pointers",
         nBarriers, (void*)outHandle, (void*)outReq);
    return ncclInvalidArgument;
  }
  memset(outReq, 0, sizeof(*outReq));
  outHandle->signal0 = 0;
  outHandle->bufHandle = 0;
  outReq->bufferSize = (size_t)nBarriers * sizeof(uint32_t);
  outReq->bufferAlign = sizeof(uint32_t);
  outReq->outBufferHandle = &outHandle->bufHandle;
  outReq->ginSignalCount = nBarriers;
  outReq->outGinSignalStart = &outHandle->signal0;
  return ncclSuccess;
}

NCCL_API(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize)) {
  if (maxElts <= 0 || maxEltSize <= 0) return 0;
  return maxElts * ((maxEltSize + 7) / 8);
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement,
         (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)) {
  if (outHandle == NULL || outReq == NULL || nBlocks < 0 || nSlots < 0) {
    WARN("ncclLLA2ACreateRequirement: nBlocks %d, nSlots %d, outHandle %p, outReq %p: counts >= 0 and both pointers",
         nBlocks, nSlots, (void*)outHandle, (void*)outReq);
    return ncclInvalidArgument;
  }
  memset(outReq, 0, sizeof(*outReq));
  outHandle->nSlots = (uint32_t)nSlots;
  outHandle->bufHandle = 0;
  outReq->bufferSize = (size_t)nBlocks * (1 + 2 * (size_t)nSlots) * 16;
  outReq->bufferAlign = 16;
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
}
