/*
 * anyccl -- NCCL 2.28's device API: a barrier over the world team, as an
 * LSA barrier (ranks of this host) followed by a GIN barrier over the rail
 * team (one rank per host). Written for anyccl from NCCL's published
 * interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_BARRIER_H
#define ANYCCL_NCCL_DEVICE_BARRIER_H

#include "core.h"
#include "gin.h"
#include "lsa_barrier.h"

#if defined(__CUDACC__)
template <typename Coop>
struct ncclBarrierSession {
  Coop coop;
  ncclLsaBarrierSession<Coop> inner;
  ncclGinBarrierSession<Coop> outer;

  NCCL_DEVICE_INLINE ncclBarrierSession(Coop c, ncclTeam innerTeam, ncclTeam outerTeam, ncclGin gin,
                                        ncclLsaBarrierHandle innerBarHandle, ncclGinBarrierHandle outerBarHandle,
                                        uint32_t index, bool multimem = false, ncclMultimemHandle innerMmHandle = {})
      : coop(c), inner(c, gin.comm, innerTeam, innerBarHandle, index, multimem, innerMmHandle),
        outer(c, gin, outerTeam, outerBarHandle, index) {}
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop c, ncclTeamTagWorld, ncclGin gin, uint32_t index, bool multimem = false)
      : ncclBarrierSession(c, ncclTeamLsa(gin.comm), ncclTeamRail(gin.comm), gin, gin.comm.lsaBarrier,
                           gin.comm.railGinBarrier, index, multimem, gin.comm.lsaMultimem) {}
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop c, ncclTeamTagLsa, ncclDevComm const& comm, uint32_t index,
                                        bool multimem = false)
      : coop(c), inner(c, comm, ncclTeamLsa(comm), comm.lsaBarrier, index, multimem, comm.lsaMultimem),
        outer(anycclAbsent{}, c, ncclGin(comm, 0)) {}
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop c, ncclTeamTagRail, ncclGin gin, uint32_t index)
      : coop(c), inner(anycclAbsent{}, c, gin.comm), outer(c, gin, ncclTeamRail(gin.comm), gin.comm.railGinBarrier, index) {}
  ncclBarrierSession(ncclBarrierSession const&) = delete;

  NCCL_DEVICE_INLINE ncclLsaBarrierSession<Coop>& lsaBarrier() { return inner; }
  NCCL_DEVICE_INLINE ncclGinBarrierSession<Coop>& ginBarrier() { return outer; }
  NCCL_DEVICE_INLINE void sync(Coop c, cuda::memory_order ord, ncclGinFenceLevel fence) {
    inner.sync(c, outer.active ? nccl::utility::releaseOrderOf(ord) : ord);
    outer.sync(c, inner.active ? nccl::utility::acquireOrderOf(ord) : ord, fence);
  }
};
#endif

#endif
