/* Device-side helpers shared by the kernels (exec.cu, symm.cu): memory
 * accesses at system scope, the bound every wait checks, the op-word
 * comparison that finds mismatched collectives (cuda_exec.h), and 8-byte
 * words at any alignment. Header-only: each translation unit keeps its own
 * copy (no relocatable device code). */
#ifndef ANYCCL_CUDA_WAIT_CUH
#define ANYCCL_CUDA_WAIT_CUH

#include <stdint.h>
#include "cuda_exec.h"

static __device__ __forceinline__ uint64_t ldAcquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void stVolatile(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
/* a / b and a % b for counts and steps: 32-bit arithmetic (inline) when
 * both fit, which they do but for the largest buffers and the longest-lived
 * FIFOs; 64-bit division is a called routine of about a hundred
 * instructions, once per block setup and once per FIFO step otherwise. */
static __device__ __forceinline__ uint64_t acuDiv(uint64_t a, uint64_t b) {
  return ((a | b) >> 32) == 0 ? (uint64_t)((uint32_t)a / (uint32_t)b) : a / b;
}
static __device__ __forceinline__ uint64_t acuRem(uint64_t a, uint64_t b) {
  return ((a | b) >> 32) == 0 ? (uint64_t)((uint32_t)a % (uint32_t)b) : a % b;
}
/* 8 bytes (or the `len` < 8 left) at any alignment. A partial or unaligned
 * word goes byte by byte, assembled in registers: a memcpy of a variable
 * length would put the word in local memory, and with it every array its
 * callers index. */
static __device__ __forceinline__ uint2 ld8(const char* p, int len) {
  if (len == 8 && ((uintptr_t)p & 7) == 0) return *(const uint2*)p;
  uint64_t v = 0;
#pragma unroll
  for (int k = 0; k < 8; k++)
    if (k < len) v |= (uint64_t)(unsigned char)p[k] << (8 * k);
  return make_uint2((uint32_t)v, (uint32_t)(v >> 32));
}
static __device__ __forceinline__ void st8(char* p, uint2 v, int len) {
  if (len == 8 && ((uintptr_t)p & 7) == 0) {
    *(uint2*)p = v;
    return;
  }
  const uint64_t x = (uint64_t)v.y << 32 | v.x;
#pragma unroll
  for (int k = 0; k < 8; k++)
    if (k < len) p[k] = (char)(x >> (8 * k));
}
static __device__ __forceinline__ uint64_t ldRelaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* Called every so many spins of a wait: false once the communicator is
 * aborted, a lane of it reported an error, or the wait has lasted timeoutNs
 * (0: no bound; reported in `sh`, naming `peer`, -1 if unknown). *start is 0
 * before the first call. */
static __device__ bool acuKeepWaiting(acuShared* sh, uint64_t timeoutNs, uint64_t* start, int peer) {
  /* abort, or an error any lane of this communicator reported: one
   * host-mapped load for both words */
  if (*(volatile const uint64_t*)&sh->abort) return false;
  if (timeoutNs == 0) return true;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (*start == 0) *start = t;
  else if (t - *start > timeoutNs) {
    sh->errPeer = peer;
    sh->err = ACU_ERR_TIMEOUT;
    __threadfence_system();
    return false;
  }
  return true;
}

/* A same-host peer's op word (its mailbox + 1) names the same collective
 * number with another tag: the ranks called this collective differently. */
static __device__ __forceinline__ bool acuOpDiffers(uint32_t collSeq, uint32_t sig, const uint64_t* peerMailbox) {
  if (collSeq == 0 || peerMailbox == nullptr) return false;
  const uint64_t w = ldRelaxed(peerMailbox + 1);
  return (uint32_t)(w >> 32) == collSeq && (uint32_t)w != sig;
}

#endif
