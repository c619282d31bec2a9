/*
 * anyccl -- NCCL 2.28's device API: the LL all-to-all session (small
 * messages among the ranks of an LSA team, flags in the data: no fences).
 *
 * Resource buffer, per block: a 16-byte line holding the epoch, then two
 * halves of nSlots lines (the half is picked by the epoch's parity). A line
 * carries 8 data bytes and the epoch twice: {data lo, epoch, data hi,
 * epoch}; an element of s bytes takes ceil(s/8) lines, `pitch` (maxElts)
 * lines apart. Written for anyccl from NCCL's published interface.
 */
#ifndef ANYCCL_NCCL_DEVICE_LL_A2A_H
#define ANYCCL_NCCL_DEVICE_LL_A2A_H

#include "core.h"

#if defined(__CUDACC__)
template <typename Coop>
struct ncclLLA2ASession {
  Coop coop;
  ncclDevComm const& comm;
  ncclTeam team;
  ncclLLA2AHandle handle;
  int block;
  int pitch;
  uint32_t epoch;
  uint32_t slotsOffset;

  NCCL_DEVICE_INLINE uint4* blockLine() const {
    return (uint4*)ncclGetResourceBufferLocalPointer(comm, handle.bufHandle) + block * (1 + 2 * handle.nSlots);
  }
  NCCL_DEVICE_INLINE uint32_t calcSlotOffset() const {
    return block * (1 + 2 * handle.nSlots) + 1 + (epoch & 1) * handle.nSlots;
  }
  NCCL_DEVICE_INLINE ncclLLA2ASession(Coop c, ncclDevComm const& dc, ncclTeam t, ncclLLA2AHandle h, uint32_t blk,
                                      int maxElts, bool multimem = false, ncclMultimemHandle mm = {})
      : coop(c), comm(dc), team(t), handle(h), block((int)blk), pitch(maxElts), epoch(0), slotsOffset(0) {
    if (multimem) anycclDevReport(dc, ANYCCL_DEV_ERR_UNREACHABLE);
    epoch = blockLine()->x + 2;
    slotsOffset = calcSlotOffset();
  }
  ncclLLA2ASession(ncclLLA2ASession const&) = delete;
  NCCL_DEVICE_INLINE ~ncclLLA2ASession() {
    if (coop.thread_rank() == 0) blockLine()->x = epoch - 2;
    coop.sync();
  }

  template <typename T>
  NCCL_DEVICE_INLINE void store(uint4* buf, T data) const {
    constexpr int lines = (sizeof(T) + 7) / 8;
    union { T v; uint32_t u[lines][2]; } x;
    x.v = data;
#pragma unroll
    for (int k = 0; k < lines; k++)
      asm volatile("st.volatile.v4.u32 [%0], {%1,%3,%2,%3};" ::"l"(buf + k * pitch), "r"(x.u[k][0]),
                   "r"(x.u[k][1]), "r"(epoch)
                   : "memory");
  }
  template <typename T>
  NCCL_DEVICE_INLINE void send(int peer, int elt, T data) {
    uint4* buf = (uint4*)ncclGetResourceBufferPeerPointer(comm, handle.bufHandle, team, peer);
    if (buf == nullptr) {
      anycclDevReport(comm, ANYCCL_DEV_ERR_UNREACHABLE);
      return;
    }
    store(buf + slotsOffset + elt, data);
  }
  template <typename T>
  NCCL_DEVICE_INLINE void bcast(int elt, T data) {
    for (int q = 0, r = team.rank; q < team.nRanks; q++, r = r + 1 == team.nRanks ? 0 : r + 1) send(r, elt, data);
  }
  template <typename T>
  NCCL_DEVICE_INLINE T recv(int elt) {
    constexpr int lines = (sizeof(T) + 7) / 8;
    union { T v; uint32_t u[lines][2]; } x;
    uint4* buf = (uint4*)ncclGetResourceBufferLocalPointer(comm, handle.bufHandle) + slotsOffset + elt;
#pragma unroll
    for (int k = 0; k < lines; k++) {
      uint64_t t0 = 0;
      for (uint32_t spins = 0;; spins++) {
        uint32_t a, f1, b, f2;
        asm volatile("ld.volatile.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a), "=r"(f1), "=r"(b), "=r"(f2)
                     : "l"(buf + k * pitch)
                     : "memory");
        if (f1 == epoch && f2 == epoch) {
          x.u[k][0] = a;
          x.u[k][1] = b;
          break;
        }
        if ((spins & 1023) == 1023 && anycclDevGiveUp(comm, &t0)) break;
      }
    }
    return x.v;
  }
  template <int MinEltCount, int MaxEltCount, typename T>
  NCCL_DEVICE_INLINE void recvUnrolled(int eltStart, int eltCount, int eltStride, T (&vals)[MaxEltCount]) {
#pragma unroll
    for (int i = 0; i < MaxEltCount; i++)
      if (i < MinEltCount || i < eltCount) vals[i] = recv<T>(eltStart + i * eltStride);
  }
  template <int Unroll, typename Elt, typename EltToAcc, typename Reduce>
  NCCL_DEVICE_INLINE auto recvReduce(int eltStart, int eltCount, int eltStride, EltToAcc eltToAcc, Reduce red)
      -> decltype(eltToAcc(nccl::utility::declval<Elt>())) {
    auto acc = eltToAcc(recv<Elt>(eltStart));
    for (int i = 1; i < eltCount; i++) acc = red(acc, eltToAcc(recv<Elt>(eltStart + i * eltStride)));
    return acc;
  }
  /* Every peer of the team was sent to and received from in this epoch. */
  NCCL_DEVICE_INLINE void endEpoch(Coop) {
    coop.sync();
    epoch++;
    slotsOffset = calcSlotOffset();
  }
};
#endif

#endif
