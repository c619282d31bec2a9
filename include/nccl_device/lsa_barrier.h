/*
 * anyccl -- NCCL 2.28's device API: barriers among the ranks of an LSA team
 * (ranks whose memory this GPU reaches by load/store).
 *
 * Resource buffer of nBarriers barriers over a team of n ranks (uint32_t):
 *   inbox[nBarriers][n]     inbox[b][q]: epoch that rank q reached on barrier b
 *   epoch[nBarriers]        this rank's count of completed syncs (local only),
 *                           from the next 128-byte line on (anycclLsaEpochWord):
 *                           the peers' stores never share a line with them
 * arrive(): a store of epoch+1 into every peer's inbox[b][me] (release
 * when the sync's order asks for it); wait(): loads of my inbox[b][q] (acquire
 * when asked) until each peer's reached epoch+1. Every wait is bounded
 * (ANYCCL_DEV_TIMEOUT) and watches the abort flag.
 * Written for anyccl from NCCL's published interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_LSA_BARRIER_H
#define ANYCCL_NCCL_DEVICE_LSA_BARRIER_H

#include "core.h"

#if defined(__CUDACC__)
struct anycclAbsent {};

template <typename Coop>
struct ncclLsaBarrierSession {
  Coop coop;
  ncclDevComm const& comm;
  ncclTeam team;
  ncclLsaBarrierHandle handle;
  int index;
  bool active;
  uint32_t epoch;
  int lsa0; /* the LSA rank of the team's member 0 */

  NCCL_DEVICE_INLINE uint32_t* state() const {
    return (uint32_t*)ncclGetResourceBufferLocalPointer(comm, handle.bufHandle);
  }
  NCCL_DEVICE_INLINE uint32_t* epochWord() const {
    return state() + anycclLsaEpochWord(handle.nBarriers, team.nRanks) + index;
  }
  NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop c, ncclDevComm const& dc, ncclTeam t, ncclLsaBarrierHandle h,
                                           uint32_t idx, bool multimem = false, ncclMultimemHandle mm = {})
      : coop(c), comm(dc), team(t), handle(h), index((int)idx), active(true), epoch(0),
        lsa0(dc.lsaRank - t.rank * t.stride) {
    const int last = lsa0 + (t.nRanks - 1) * t.stride; /* members are lsa0 + q * stride */
    if (multimem || index >= h.nBarriers || dc.resourceWindow == nullptr || t.nRanks < 1 || lsa0 < 0 ||
        lsa0 >= dc.lsaSize || last < 0 || last >= dc.lsaSize) {
      /* multicast is unsupported; an index past the handle's count or a
       * member outside the LSA team is a bug: report it, then do nothing */
      anycclDevReport(dc, ANYCCL_DEV_ERR_UNREACHABLE);
      active = false;
      team.nRanks = 1;
      return;
    }
    epoch = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*epochWord()).load(cuda::memory_order_relaxed);
  }
  NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop c, ncclDevComm const& dc, ncclTeamTagLsa, uint32_t idx,
                                           bool multimem = false)
      : ncclLsaBarrierSession(c, dc, ncclTeamLsa(dc), dc.lsaBarrier, idx, multimem, dc.lsaMultimem) {}
  /* an absent member of ncclBarrierSession */
  NCCL_DEVICE_INLINE ncclLsaBarrierSession(anycclAbsent, Coop c, ncclDevComm const& dc)
      : coop(c), comm(dc), team{1, 0, 1}, handle{0, 0}, index(0), active(false), epoch(0), lsa0(0) {}
  ncclLsaBarrierSession(ncclLsaBarrierSession const&) = delete;
  NCCL_DEVICE_INLINE ~ncclLsaBarrierSession() {
    if (active && coop.thread_rank() == 0)
      cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*epochWord()).store(epoch, cuda::memory_order_relaxed);
  }

  /* The order says what the barrier publishes and what it takes in: an
   * acquire-only barrier stores its count relaxed (no system fence), a
   * release-only one waits with relaxed loads. An inactive session has a
   * team of one: no stores, no waits. */
  NCCL_DEVICE_INLINE void arrive(Coop, cuda::memory_order order) {
    coop.sync(); /* the coop's writes before the barrier come before the store below */
    const int n = team.nRanks;
#pragma unroll 1
    for (int i = coop.thread_rank(); i < n - 1; i += coop.size()) {
      const int q = i + (team.rank <= i ? 1 : 0); /* the peers, not me */
      uint32_t* box = (uint32_t*)ncclGetResourceBufferLsaPointer(comm, handle.bufHandle, lsa0 + q * team.stride);
      box += index * n + team.rank;
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*box).store(epoch + 1,
                                                                        nccl::utility::releaseOrderOf(order));
    }
  }
  NCCL_DEVICE_INLINE void wait(Coop, cuda::memory_order order) {
    const int n = team.nRanks;
    uint32_t* box = state() + index * n;
#pragma unroll 1
    for (int i = coop.thread_rank(); i < n - 1; i += coop.size()) {
      const int q = i + (team.rank <= i ? 1 : 0);
      anycclDevWaitAtLeast<uint32_t>(comm, box + q, epoch + 1, 32, nccl::utility::acquireOrderOf(order));
    }
    epoch++;
    coop.sync();
  }
  NCCL_DEVICE_INLINE void sync(Coop c, cuda::memory_order ord) {
    arrive(c, ord);
    wait(c, ord);
  }
};
#endif

#endif
