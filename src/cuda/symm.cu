/* Collectives over symmetric windows (NCCL_WIN_COLL_SYMMETRIC, nccl-tests
 * -R 2): when every rank's buffers sit at the same offset of a window that
 * every GPU of the host has mapped, all-reduce, all-gather and
 * reduce-scatter need no FIFO: each block reads its peers' inputs and
 * writes results straight into their outputs over NVLink, between two
 * barriers.
 *
 *   one-shot all-reduce  each rank reduces the whole vector from every
 *                        rank's input into its own output (small sizes:
 *                        one round trip of loads);
 *   two-shot all-reduce  rank r reduces its 1/n of the vector and stores the
 *                        result into every rank's output;
 *   reduce-scatter       rank r reduces its block from every rank's input;
 *   all-gather           rank r stores its input into every rank's output.
 *
 * Block b of every rank covers the same part of the data, so it meets only
 * the blocks b of its peers: the start barrier (a peer's kernel has started:
 * its input is ready and its output free), the end barrier (every store into
 * my output has landed and nobody reads my input any more). A barrier is a
 * 64-bit count per (block, source) in each rank's segment (cuda_exec.h); the
 * counts grow by one a barrier, from a per-block epoch the kernel keeps in
 * device memory, so CUDA graph replays stay in step. Waits are bounded and
 * compare the peers' op words like every other wait (wait.cuh).
 *
 * Small and mid sizes need no window and no barrier (the LL kernels below):
 * one-shot (every rank stores its lines into every peer that needs them)
 * and two-shot (chunk q to rank q, which reduces or forwards it to every
 * peer) all-reduce, broadcast and reduce, one-shot all-gather,
 * reduce-scatter and all-to-all; in 16-byte LL lines of 8 data bytes or,
 * where NVLink joins the GPUs, in 128-byte LL128 lines of 120.
 *
 * Sums of 16-bit floats accumulate in float; every rank adds the inputs in
 * rank order, so all ranks hold bit-identical results. Instantiations: three
 * element types for the reductions, one byte copy for all-gather, each LL
 * kernel in the two line formats that use it. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "cuda_exec.h"
#include "wait.cuh"

namespace {

enum { T_F16 = 6, T_F32 = 7, T_BF16 = 9 }; /* ncclDataType_t values */

template <int TY> struct V; /* a 16-byte vector as up to 8 floats */
template <> struct V<T_F32> {
  static constexpr int N = 4;
  typedef float E;
  static __device__ __forceinline__ void add(float* a, uint4 x, bool first) {
    const float f[4] = {__uint_as_float(x.x), __uint_as_float(x.y), __uint_as_float(x.z), __uint_as_float(x.w)};
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = first ? f[i] : a[i] + f[i];
  }
  static __device__ __forceinline__ uint4 pack(const float* a) {
    return make_uint4(__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
  }
  static __device__ __forceinline__ float ld(const E* p) { return *p; }
  static __device__ __forceinline__ E st(float f) { return f; }
};
static __device__ __forceinline__ float2 toF2(__half2 h) { return __half22float2(h); }
static __device__ __forceinline__ float2 toF2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
static __device__ __forceinline__ void fromF2(float x, float y, __half2* h) { *h = __floats2half2_rn(x, y); }
static __device__ __forceinline__ void fromF2(float x, float y, __nv_bfloat162* h) { *h = __floats2bfloat162_rn(x, y); }
template <typename H2, typename H> struct V16 {
  static constexpr int N = 8;
  typedef H E;
  static __device__ __forceinline__ float2 up(uint32_t w) {
    H2 h;
    memcpy(&h, &w, 4);
    return toF2(h);
  }
  static __device__ __forceinline__ uint32_t down(float x, float y) {
    H2 h;
    fromF2(x, y, &h);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
  }
  static __device__ __forceinline__ void add(float* a, uint4 x, bool first) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float2 f = up(w[i]);
      a[2 * i] = first ? f.x : a[2 * i] + f.x;
      a[2 * i + 1] = first ? f.y : a[2 * i + 1] + f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float* a) {
    return make_uint4(down(a[0], a[1]), down(a[2], a[3]), down(a[4], a[5]), down(a[6], a[7]));
  }
  static __device__ __forceinline__ float ld(const E* p) { return (float)*p; }
  static __device__ __forceinline__ E st(float f) { return (E)f; }
};
template <> struct V<T_F16> : V16<__half2, __half> {};
template <> struct V<T_BF16> : V16<__nv_bfloat162, __nv_bfloat16> {};

/* A wait's slow path: true (reported) once `peer` started this collective
 * number with another tag (its op word), or on abort or timeout. */
__device__ bool stalled(const acuSymm& a, int peer, uint64_t* start) {
  if (acuOpDiffers(a.collSeq, a.sig, a.mailboxes[peer])) {
    if (a.shared->err == ACU_ERR_NONE) {
      a.shared->errPeer = peer;
      a.shared->err = ACU_ERR_MISMATCH;
      __threadfence_system();
    }
    return true;
  }
  return !acuKeepWaiting(a.shared, a.timeoutNs, start, peer);
}

/* The barrier of block b: signal every peer's count for (b, me), then wait
 * until each peer's count for (b, peer) in my pad reaches e. False (after
 * the report) on abort, timeout or a peer that started another collective. */
__device__ bool barrier(const acuSymm& a, uint64_t e, bool release, bool check = false) {
  __syncthreads();
  const int p = threadIdx.x;
  bool ok = true;
  if (p < a.nranks && p != a.rank) {
    /* the block's loads and its stores into peers (ordered by the barrier)
     * before the count; the start barrier orders nothing */
    if (release) asm volatile("fence.acq_rel.sys;" ::: "memory");
    stVolatile(a.pads[p] + blockIdx.x * ACU_SYMM_MAX_RANKS + a.rank, e);
    const uint64_t* mine = a.pads[a.rank] + blockIdx.x * ACU_SYMM_MAX_RANKS + p;
    uint64_t start = 0;
    for (uint32_t spins = 0; ldAcquire(mine) < e; spins++)
      if ((spins & 1023) == 1023 && stalled(a, p, &start)) {
        ok = false;
        break;
      }
    /* past the first barrier the peer runs this collective (it cannot start
     * another before the second): a peer that called it with other
     * arguments shows in its op word even when neither had to wait */
    if (ok && check && acuOpDiffers(a.collSeq, a.sig, a.mailboxes[p])) ok = !stalled(a, p, &start);
  }
  return __syncthreads_and(ok);
}

/* The block's share [beg, end) of `total` units; shares start at multiples
 * of `al` (a vector's elements), so that only the last may end mid-vector. */
__device__ __forceinline__ void share(uint64_t total, uint64_t al, uint64_t* beg, uint64_t* end) {
  const uint64_t per = acuDiv(acuDiv(total + gridDim.x - 1, gridDim.x) + al - 1, al) * al;
  *beg = per * blockIdx.x < total ? per * blockIdx.x : total;
  *end = *beg + per < total ? *beg + per : total;
}

/* Element k of the sum over ranks of in[inOff + k], stored at outOff + k in
 * every rank's output (`all`) or mine. */
template <int TY>
__device__ __forceinline__ void reduceOne(const acuSymm& a, uint64_t inOff, uint64_t outOff, uint64_t k, bool all) {
  typedef typename V<TY>::E E;
  float s = 0;
  for (int q = 0; q < a.nranks; q++) s += V<TY>::ld((const E*)a.in[q] + inOff + k);
  for (int q = all ? 0 : a.rank; q < (all ? a.nranks : a.rank + 1); q++) ((E*)a.out[q])[outOff + k] = V<TY>::st(s);
}

/* Elements [beg, end) (beg a whole vector's start when a.vec), for up to NR
 * ranks: the loads in flight take U x NR vectors of registers, 8 of them
 * a thread (2 rounds of 4 ranks, 1 of 8): more no longer fit beside the
 * rest (spills), so 2-4 ranks get a copy sized for 4. */
template <int TY, int NR>
__device__ void reduceRange(const acuSymm& a, uint64_t inOff, uint64_t outOff, uint64_t beg, uint64_t end, bool all) {
  typedef V<TY> W;
  typedef typename W::E E;
  constexpr int U = NR <= 4 ? 2 : 1;
  const int n = a.nranks;
  uint64_t tail = beg;
  if (a.vec) {
    const uint64_t vb = beg / W::N, ve = end / W::N;
    const uint4* in[NR];
#pragma unroll
    for (int q = 0; q < NR; q++) in[q] = q < n ? (const uint4*)((const E*)a.in[q] + inOff) : nullptr;
    for (uint64_t v = vb + threadIdx.x; v < ve; v += (uint64_t)blockDim.x * U) {
      uint4 x[U][NR];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < NR; q++)
          if (q < n && v + (uint64_t)u * blockDim.x < ve) x[u][q] = __ldcg(in[q] + v + (uint64_t)u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; u++) {
        const uint64_t j = v + (uint64_t)u * blockDim.x;
        if (j >= ve) continue;
        float acc[8];
#pragma unroll
        for (int q = 0; q < NR; q++)
          if (q < n) W::add(acc, x[u][q], q == 0);
        const uint4 r = W::pack(acc);
#pragma unroll
        for (int q = 0; q < NR; q++)
          if (q < n && (all || q == a.rank)) ((uint4*)((E*)a.out[q] + outOff))[j] = r;
      }
    }
    tail = ve * W::N > beg ? ve * W::N : beg;
  }
  for (uint64_t k = tail + threadIdx.x; k < end; k += blockDim.x) reduceOne<TY>(a, inOff, outOff, k, all);
}

/* Bytes [beg, end) of src to dst, 16 bytes a thread where the two share
 * their alignment. */
__device__ void copyBytes(char* dst, const char* src, uint64_t beg, uint64_t end) {
  uint64_t vb = end, ve = end;
  if ((((uintptr_t)dst ^ (uintptr_t)src) & 15) == 0) {
    vb = beg + ((16 - (((uintptr_t)dst + beg) & 15)) & 15);
    if (vb > end) vb = end;
    ve = vb + (end - vb) / 16 * 16;
    constexpr int U = 4;
    const uint64_t n16 = (ve - vb) / 16;
    const uint4* s4 = (const uint4*)(src + vb);
    uint4* d4 = (uint4*)(dst + vb);
    for (uint64_t v = threadIdx.x; v < n16; v += (uint64_t)blockDim.x * U) {
      uint4 x[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < n16) x[u] = __ldcg(s4 + v + (uint64_t)u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < n16) d4[v + (uint64_t)u * blockDim.x] = x[u];
    }
  }
  for (uint64_t k = beg + threadIdx.x; k < vb; k += blockDim.x) dst[k] = src[k];
  for (uint64_t k = ve + threadIdx.x; k < end; k += blockDim.x) dst[k] = src[k];
}

/* Staged collectives: block b of every rank handles the same share of the
 * data, so before the first barrier block b copies into my staging area
 * what blocks b of my peers will read (all-reduce: its share of every
 * rank's chunk; reduce-scatter: its share of every rank's block), and after
 * the second it copies out what they wrote. Units: elements of es bytes
 * (all-gather: bytes, es 1). */
enum { STAGE_AG, STAGE_AR, STAGE_RS };
__device__ void stageCopy(const acuSymm& a, uint64_t es, bool in, int kind) {
  uint64_t beg, end;
  const uint64_t al = a.vec ? 16 / es : 1;
  char* stage = a.in[a.rank];
  if (kind == STAGE_AG) {
    share(a.count, a.vec ? 16 : 1, &beg, &end);
    if (in) {
      copyBytes(stage, a.uin, beg, end);
    } else { /* (xptr) what every rank pushed into my staging area, at rank * count */
      for (int q = 0; q < a.nranks; q++) copyBytes(a.uout + a.count * q, stage + a.count * q, beg, end);
    }
    return;
  }
  for (int q = 0; q < a.nranks; q++) {
    uint64_t c0, len;
    if (kind == STAGE_AR) {
      c0 = a.chunk * q < a.count ? a.chunk * q : a.count;
      len = (c0 + a.chunk < a.count ? c0 + a.chunk : a.count) - c0;
    } else { /* reduce-scatter: rank q's block of my input */
      c0 = a.count * q;
      len = a.count;
    }
    share(len, al, &beg, &end);
    if (in) copyBytes(stage, a.uin, (c0 + beg) * es, (c0 + end) * es);
    else copyBytes(a.uout, stage, (c0 + beg) * es, (c0 + end) * es);
  }
}

/* Staged all-gather: every rank's staged input into my output. */
__device__ void stagedGather(const acuSymm& a) {
  uint64_t beg, end;
  share(a.count, a.vec ? 16 : 1, &beg, &end);
  for (int i = 0; i < a.nranks; i++) {
    const int q = (a.rank + i) % a.nranks; /* start at my own: no two ranks read one peer at once */
    copyBytes(a.uout + a.count * q, q == a.rank ? a.uin : a.in[q], beg, end);
  }
}

template <int TY>
__device__ __forceinline__ void reduceRangeN(const acuSymm& a, uint64_t inOff, uint64_t outOff, uint64_t beg,
                                             uint64_t end, bool all) {
  if (a.nranks <= 4) reduceRange<TY, 4>(a, inOff, outOff, beg, end, all);
  else reduceRange<TY, ACU_SYMM_MAX_RANKS>(a, inOff, outOff, beg, end, all);
}

template <int TY>
__device__ void reduceAlgo(const acuSymm& a) {
  uint64_t beg, end;
  const uint64_t al = a.vec ? V<TY>::N : 1;
  if (a.algo == ACU_SYMM_AR1) {
    share(a.count, al, &beg, &end);
    reduceRangeN<TY>(a, 0, 0, beg, end, false);
  } else if (a.algo == ACU_SYMM_AR2 || a.algo == ACU_SYMM_ST_AR) {
    const uint64_t c0 = a.chunk * a.rank < a.count ? a.chunk * a.rank : a.count;
    const uint64_t c1 = c0 + a.chunk < a.count ? c0 + a.chunk : a.count;
    share(c1 - c0, al, &beg, &end);
    reduceRangeN<TY>(a, c0, c0, beg, end, true);
  } else { /* reduce-scatter (ST_RS: out[rank] is my own output): my block of every input into my output */
    share(a.count, al, &beg, &end);
    reduceRangeN<TY>(a, a.count * a.rank, 0, beg, end, false);
  }
}

/* All-gather: my input's bytes into every rank's output at rank * count. */
__device__ void gatherPush(const acuSymm& a) {
  uint64_t beg, end;
  share(a.count, a.vec ? 16 : 1, &beg, &end); /* bytes */
  const int n = a.nranks;
  const uint64_t off = a.count * a.rank;
  const char* src = (const char*)a.in[a.rank];
  uint64_t tail = beg;
  if (a.vec) {
    constexpr int U = 4;
    const uint64_t vb = beg / 16, ve = end / 16;
    for (uint64_t v = vb + threadIdx.x; v < ve; v += (uint64_t)blockDim.x * U) {
      uint4 x[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v + (uint64_t)u * blockDim.x < ve) x[u] = ((const uint4*)src)[v + (uint64_t)u * blockDim.x];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < ACU_SYMM_MAX_RANKS; q++)
          if (q < n && v + (uint64_t)u * blockDim.x < ve) ((uint4*)(a.out[q] + off))[v + (uint64_t)u * blockDim.x] = x[u];
    }
    tail = ve * 16 > beg ? ve * 16 : beg;
  }
  for (uint64_t k = tail + threadIdx.x; k < end; k += blockDim.x)
    for (int q = 0; q < n; q++) a.out[q][off + k] = src[k];
}

/* ---- LL: small collectives without barriers ------------------------------
 * Rank r stores each 8 bytes its peer p needs as a 16-byte line {data, flag,
 * data, flag} into p's LL area (block b, parity, source r), in one store,
 * and polls its own area for its peers' lines. The flag is the block's LL
 * count + 1, so lines of an earlier use never match; when an area may be
 * stored into again is llReceiversFree's rule. Each thread (LL128: each
 * group of 8) reads what it stores, so no block ever waits at a barrier,
 * and there is no fence. */
__shared__ int sStop;

template <int TY> struct P; /* 8 bytes as floats */
template <> struct P<T_F32> {
  static __device__ __forceinline__ void add(float* a, uint2 x, bool first) {
    a[0] = first ? __uint_as_float(x.x) : a[0] + __uint_as_float(x.x);
    a[1] = first ? __uint_as_float(x.y) : a[1] + __uint_as_float(x.y);
  }
  static __device__ __forceinline__ uint2 pack(const float* a) {
    return make_uint2(__float_as_uint(a[0]), __float_as_uint(a[1]));
  }
};
template <class W> struct P16 {
  static __device__ __forceinline__ void add(float* a, uint2 x, bool first) {
    const float2 f = W::up(x.x), g = W::up(x.y);
    a[0] = first ? f.x : a[0] + f.x;
    a[1] = first ? f.y : a[1] + f.y;
    a[2] = first ? g.x : a[2] + g.x;
    a[3] = first ? g.y : a[3] + g.y;
  }
  static __device__ __forceinline__ uint2 pack(const float* a) { return make_uint2(W::down(a[0], a[1]), W::down(a[2], a[3])); }
};
template <> struct P<T_F16> : P16<V<T_F16>> {};
template <> struct P<T_BF16> : P16<V<T_BF16>> {};

/* Bytes of data line i carries (the last may carry fewer than 8). */
__device__ __forceinline__ int lineLen(uint64_t bytes, uint64_t i) {
  return bytes - i * 8 < 8 ? (int)(bytes - i * 8) : 8;
}
/* Line `i` of block b's area for (parity, source) in `owner`'s segment. */
__device__ __forceinline__ uint4* llLine(const acuSymm& a, int owner, uint32_t flag, int src, uint64_t i) {
  uint4* base = (uint4*)((char*)a.pads[owner] + ACU_SYMM_PAD_BYTES);
  return base + ((uint64_t)(blockIdx.x * 2 + (flag & 1)) * ACU_SYMM_MAX_RANKS + src) * ACU_SYMM_LL_LINES + i;
}
__device__ __forceinline__ void llPut(uint4* p, uint2 d, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag)
               : "memory");
}
/* Poll line p until it carries `flag`. False on another thread's stop, or
 * once stall(&start) (its slow path, every 1024 spins) is true. */
template <class Stall>
__device__ bool llPoll(const uint4* p, uint32_t flag, uint2* d, Stall stall) {
  uint64_t start = 0;
  for (uint32_t spins = 0;; spins++) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    if (v.y == flag && v.w == flag) {
      *d = make_uint2(v.x, v.z);
      return true;
    }
    if ((spins & 1023) != 1023) continue;
    if (*(volatile int*)&sStop) return false;
    if (stall(&start)) {
      sStop = 1;
      return false;
    }
  }
}
/* My line from `src`. False on abort, timeout, a peer in another
 * collective (reported) or another thread's stop. */
__device__ bool llGet(const acuSymm& a, uint32_t flag, int src, uint64_t i, uint2* d) {
  return llPoll(llLine(a, a.rank, flag, src, i), flag, d, [&](uint64_t* st) { return stalled(a, src, st); });
}

/* Reusing an area: a writer stores flag f into parity f & 1 of a peer's
 * area (block b, source: me), where the peer may still poll lines of flag
 * f - 2 or earlier; it must have read them first. A launch of block b uses
 * one flag (the two-shot all-reduce two: f and f + 1); a block's LL epoch
 * in its rank's segment holds the first flag from the start of the launch
 * and the last one from its end, with bit 32 set when the launch showed
 * that every peer had read all it will read up to its second-to-last flag:
 * it received a line from every peer that the peer stored only after
 * starting (one-flag launches) or only after reading this launch's first
 * flag (two-shot all-reduce: the sums). The next launch of block b then
 * writes freely; otherwise (sCheck: after a broadcast, a reduce, a block
 * that heard from only some peers, or an error) each writer first waits
 * until each peer it stores into (`only`, or every peer when -1) shows
 * that epoch, the previous launch's last flag or later: started it, or
 * finished it for two flags. Usually true at once; false (reported) on
 * abort, timeout or a peer in another collective. Every thread calls it. */
__shared__ int sCheck;
__device__ bool llReceiversFree(const acuSymm& a, uint32_t flag, int only) {
  if (!sCheck) return true;
  bool ok = true;
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank && (only < 0 || p == only)) {
    const volatile uint64_t* e = a.pads[p] + ACU_SYMM_MAX_BLOCKS * ACU_SYMM_MAX_RANKS + ACU_SYMM_MAX_BLOCKS + blockIdx.x;
    uint64_t start = 0;
    for (uint32_t spins = 0; (int32_t)((uint32_t)*e - (flag - 1)) < 0; spins++)
      if ((spins & 1023) == 1023 && stalled(a, p, &start)) {
        ok = false;
        sStop = 1;
        break;
      }
  }
  return __syncthreads_and(ok);
}

/* All-gather: my lines into every peer's area and my block of the output;
 * the peers' lines into their blocks. */
__device__ void llGather(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  if (!llReceiversFree(a, flag, -1)) return;
  char* out = a.out[r];
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    const uint2 mine = ld8(a.in[r] + i * 8, len);
    for (int p = 0; p < n; p++)
      if (p != r) llPut(llLine(a, p, flag, r, i - lb), mine, flag);
    st8(out + bytes * r + i * 8, mine, len);
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) continue;
      if (!llGet(a, flag, q, i - lb, &x)) return;
      st8(out + bytes * q + i * 8, x, len);
    }
  }
}

/* All-to-all: block p of my input goes to peer p's area, block r (mine)
 * straight into my output, and what arrives from peer q into block q of my
 * output. A thread loads line i of every block before it stores line i of
 * any, so the same buffer may be input and output. */
__device__ void llAlltoall(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  if (!llReceiversFree(a, flag, -1)) return;
  const char* in = a.in[r];
  char* out = a.out[r];
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    const int len = lineLen(bytes, i);
    for (int p = 0; p < n; p++)
      if (p != r) llPut(llLine(a, p, flag, r, i - lb), ld8(in + bytes * p + i * 8, len), flag);
    if (in != out) st8(out + bytes * r + i * 8, ld8(in + bytes * r + i * 8, len), len);
    for (int q = 0; q < n; q++) {
      uint2 x;
      if (q == r) continue;
      if (!llGet(a, flag, q, i - lb, &x)) return;
      st8(out + bytes * q + i * 8, x, len);
    }
  }
}

/* ---- the two-shot kernels, in LL or LL128 lines -------------------------
 * LL128 (NCCL's protocol for mid sizes): a line is 16 words of 8 bytes that
 * the 8 threads of a group (lanes 8k..8k+7 of a warp) store in one
 * instruction, 16 bytes each, 15 words of data and the flag last. NVLink
 * delivers such a store whole, and a line read the same way comes whole, so
 * a reader that sees the flag (and reads the line once more, as NCCL does)
 * has its 120 bytes, where an LL line carries 8 of 16. Only between GPUs
 * that NVLink joins (cuda_symm.c). A slot of the LL area holds 127 of them.
 * The kernels below run on either: Proto gives the unit a thread (LL) or a
 * group (LL128) moves, as words d[0..NW) of 8 bytes. */
__device__ __forceinline__ uint64_t u64(uint2 v) { return (uint64_t)v.y << 32 | v.x; }
__device__ __forceinline__ uint2 u2(uint64_t v) { return make_uint2((uint32_t)v, (uint32_t)(v >> 32)); }
struct ProtoLL {
  enum { WPL = 1, NW = 1 };
  static __device__ __forceinline__ uint64_t first() { return threadIdx.x; }
  static __device__ __forceinline__ uint64_t stride() { return blockDim.x; }
  static __device__ __forceinline__ void load(const char* base, uint64_t bytes, uint64_t g, uint64_t* d) {
    d[0] = u64(ld8(base + g * 8, lineLen(bytes, g)));
  }
  static __device__ __forceinline__ void store(char* base, uint64_t bytes, uint64_t g, const uint64_t* d) {
    st8(base + g * 8, u2(d[0]), lineLen(bytes, g));
  }
  static __device__ __forceinline__ void put(const acuSymm& a, int owner, uint32_t flag, int src, uint64_t k, const uint64_t* d) {
    llPut(llLine(a, owner, flag, src, k), u2(d[0]), flag);
  }
  static __device__ __forceinline__ bool get(const acuSymm& a, uint32_t flag, int src, uint64_t k, uint64_t* d) {
    uint2 x;
    if (!llGet(a, flag, src, k, &x)) return false;
    d[0] = u64(x);
    return true;
  }
};
__device__ __forceinline__ void st128(uint64_t* p, uint64_t x, uint64_t y) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(x), "l"(y) : "memory");
}
__device__ __forceinline__ void ld128(const uint64_t* p, uint64_t& x, uint64_t& y) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(x), "=l"(y) : "l"(p) : "memory");
}
struct ProtoLL128 {
  enum { WPL = 15, NW = 2 };
  static __device__ __forceinline__ uint64_t first() { return threadIdx.x >> 3; }
  static __device__ __forceinline__ uint64_t stride() { return blockDim.x >> 3; }
  static __device__ __forceinline__ int words() { return (threadIdx.x & 7) == 7 ? 1 : 2; }
  /* my words of line g: 15 g + 2 (my place in the group) */
  static __device__ __forceinline__ void load(const char* base, uint64_t bytes, uint64_t g, uint64_t* d) {
    const uint64_t w = 15 * g + 2 * (threadIdx.x & 7);
#pragma unroll
    for (int i = 0; i < 2; i++) d[i] = i < words() && (w + i) * 8 < bytes ? u64(ld8(base + (w + i) * 8, lineLen(bytes, w + i))) : 0;
  }
  static __device__ __forceinline__ void store(char* base, uint64_t bytes, uint64_t g, const uint64_t* d) {
    const uint64_t w = 15 * g + 2 * (threadIdx.x & 7);
#pragma unroll
    for (int i = 0; i < 2; i++) /* a fixed count: d stays in registers */
      if (i < words() && (w + i) * 8 < bytes) st8(base + (w + i) * 8, u2(d[i]), lineLen(bytes, w + i));
  }
  static __device__ __forceinline__ uint64_t* line(const acuSymm& a, int owner, uint32_t flag, int src, uint64_t k) {
    /* a line must not straddle a 128-byte boundary (the area starts 64 bytes past one) */
    const uintptr_t slot = ((uintptr_t)llLine(a, owner, flag, src, 0) + 127) & ~(uintptr_t)127;
    return (uint64_t*)slot + k * 16 + (threadIdx.x & 7) * 2;
  }
  static __device__ __forceinline__ unsigned group() { return 0xffu << (threadIdx.x & 24); }
  /* The group's 8 stores must be one instruction (lanes that took other
   * paths for their words could store apart, the flag before the data). */
  static __device__ __forceinline__ void put(const acuSymm& a, int owner, uint32_t flag, int src, uint64_t k, const uint64_t* d) {
    uint64_t* p = line(a, owner, flag, src, k);
    const uint64_t last = 0 - (uint64_t)((threadIdx.x & 7) == 7); /* all ones in the flag's lane */
    const uint64_t y = (d[1] & ~last) | ((uint64_t)flag & last);
    __syncwarp(group());
    st128(p, d[0], y);
  }
  /* The group polls together (the flag is its last thread's); false on a stop. */
  static __device__ bool get(const acuSymm& a, uint32_t flag, int src, uint64_t k, uint64_t* d) {
    const uint64_t* p = line(a, a.rank, flag, src, k);
    const unsigned lane = threadIdx.x & 31, gmask = group();
    uint64_t start = 0, x, y;
    for (uint32_t spins = 0;; spins++) {
      __syncwarp(gmask);
      ld128(p, x, y);
      if (__shfl_sync(gmask, (int)(y == (uint64_t)flag), lane | 7)) break;
      if ((spins & 1023) != 1023) continue;
      int stop = 0;
      if ((lane & 7) == 7) stop = *(volatile int*)&sStop || stalled(a, src, &start);
      if (__shfl_sync(gmask, stop, lane | 7)) {
        sStop = 1;
        return false;
      }
    }
    __syncwarp(gmask);
    ld128(p, d[0], d[1]);
    return true;
  }
};

/* The two-shot layout: the vector's lines (Proto::WPL words each) fall into
 * n chunks of C lines (the last may be shorter or empty), chunk q owned by
 * rank q; block b takes lines [ob, oe) of every chunk, `per` at most. */
template <class Proto>
struct Two {
  uint64_t L, C, per, ob, oe;
  __device__ Two(uint64_t bytes, int n) {
    L = ((bytes + 7) / 8 + Proto::WPL - 1) / Proto::WPL;
    C = acuDiv(L + n - 1, n);
    per = acuDiv(C + gridDim.x - 1, gridDim.x);
    share(C, 1, &ob, &oe);
  }
  __device__ bool has(int q) const { return ob < oe && (uint64_t)q * C + ob < L; } /* chunk q has lines here */
};

template <int TY, class Proto>
__device__ __forceinline__ void addWords(float (*acc)[4], const uint64_t* d, bool first) {
  for (int w = 0; w < Proto::NW; w++) P<TY>::add(acc[w], u2(d[w]), first);
}
template <int TY, class Proto>
__device__ __forceinline__ void packWords(float (*acc)[4], uint64_t* d) {
  for (int w = 0; w < Proto::NW; w++) d[w] = u64(P<TY>::pack(acc[w]));
}

/* ---- the one-shot kernels in either line -------------------------------
 * Reductions: all-reduce and reduce-scatter (every rank stores its lines
 * into every peer's area, reduce-scatter block p to peer p, and adds what
 * arrives), reduce (the others store into the root's area; the root adds).
 * Every rank adds the inputs in rank order, so results are bit-identical.
 * Units [lb, le) of Proto's lines. */
template <int TY, class Proto>
__device__ void oneReduce(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank;
  const bool rs = a.algo == ACU_SYMM_LL_RS, red = a.algo == ACU_SYMM_LL_RED;
  if (!(red && r == a.root) && !llReceiversFree(a, flag, red ? a.root : -1)) return;
  const char* in = a.in[r];
  for (uint64_t i = lb + Proto::first(); i < le; i += Proto::stride()) {
    /* my own line, loaded once: all-reduce and reduce send it to every
     * peer (a put's memory clobber would make each peer's copy a new
     * load), reduce-scatter adds it (its peers get their own blocks) */
    uint64_t d[Proto::NW], mine[Proto::NW];
    Proto::load(in + (rs ? bytes * r : 0), bytes, i, mine);
    for (int p = 0; p < n; p++)
      if (p != r && (!red || p == a.root)) {
        if (rs) {
          Proto::load(in + bytes * p, bytes, i, d);
          Proto::put(a, p, flag, r, i - lb, d);
        } else {
          Proto::put(a, p, flag, r, i - lb, mine);
        }
      }
    if (red && r != a.root) continue;
    float acc[Proto::NW][4];
    for (int q = 0; q < n; q++) {
      if (q == r) {
        addWords<TY, Proto>(acc, mine, q == 0);
        continue;
      }
      if (!Proto::get(a, flag, q, i - lb, d)) return;
      addWords<TY, Proto>(acc, d, q == 0);
    }
    packWords<TY, Proto>(acc, d);
    Proto::store(a.out[r], bytes, i, d);
  }
}

/* Broadcast: the root stores its lines into every peer's area (and its
 * output); the others poll theirs. */
template <class Proto>
__device__ void oneBcast(const acuSymm& a, uint32_t flag, uint64_t lb, uint64_t le, uint64_t bytes) {
  const int n = a.nranks, r = a.rank, root = a.root;
  char* out = a.out[r];
  if (r == root && !llReceiversFree(a, flag, -1)) return;
  for (uint64_t i = lb + Proto::first(); i < le; i += Proto::stride()) {
    uint64_t d[Proto::NW];
    if (r == root) {
      Proto::load(a.in[r], bytes, i, d);
      for (int p = 0; p < n; p++)
        if (p != r) Proto::put(a, p, flag, r, i - lb, d);
      if (out == a.in[r]) continue;
    } else if (!Proto::get(a, flag, root, i - lb, d)) {
      return;
    }
    Proto::store(out, bytes, i, d);
  }
}

/* One-shot kernels: [lb, le) of this block in Proto's lines; which peers
 * this launch heard from (llAlgo). */
template <class Proto>
__device__ bool oneRun(const acuSymm& a, uint32_t flag, uint64_t bytes) {
  uint64_t lb, le;
  share(((bytes + 7) / 8 + Proto::WPL - 1) / Proto::WPL, 1, &lb, &le);
  bool heard = lb < le; /* a line from every peer */
  switch (a.algo) {
    case ACU_SYMM_LL_AG:
      if constexpr (Proto::WPL == 1) llGather(a, flag, lb, le, bytes); /* (LL lines only) */
      break;
    case ACU_SYMM_LL_A2A:
      if constexpr (Proto::WPL == 1) llAlltoall(a, flag, lb, le, bytes);
      break;
    case ACU_SYMM_LL_BC: oneBcast<Proto>(a, flag, lb, le, bytes); heard = false; break;
    default: /* AR, RS, RED */
      if (a.algo == ACU_SYMM_LL_RED) heard = heard && a.rank == a.root;
      if (a.type == T_F16) oneReduce<T_F16, Proto>(a, flag, lb, le, bytes);
      else if (a.type == T_BF16) oneReduce<T_BF16, Proto>(a, flag, lb, le, bytes);
      else oneReduce<T_F32, Proto>(a, flag, lb, le, bytes);
      break;
  }
  return heard;
}

/* Phase 1 of the two-shot kernels: my lines of chunk p into p's area. */
template <class Proto>
__device__ void twoScatter(const acuSymm& a, uint32_t flag, uint64_t bytes, const Two<Proto>& t) {
  const char* in = a.in[a.rank];
  for (uint64_t j = t.ob + Proto::first(); j < t.oe; j += Proto::stride())
    for (int p = 0; p < a.nranks; p++) {
      const uint64_t g = (uint64_t)p * t.C + j;
      if (p == a.rank || g >= t.L) continue;
      uint64_t d[Proto::NW];
      Proto::load(in, bytes, g, d);
      Proto::put(a, p, flag, a.rank, j - t.ob, d);
    }
}

/* Two-shot all-reduce: phase 1 (flag); then my chunk's lines: the n inputs
 * added in rank order (bit-identical everywhere), the sum into every
 * peer's area (flag + 1, the other parity) and my output; then the peers'
 * sums into my output. A unit reads phase-1 lines only for the lines whose
 * sums it then sends, so a peer that has every sum of this block has had
 * every phase-1 line read (llAlgo's reuse rule). A unit reads every input
 * line of its j before writing any output line of it, so the input may be
 * the output. Two-shot reduce (3+ ranks, ACU_SYMM_LL_RED2): rank q stores
 * the sum of chunk q into the root's area only (flag, slots [per, 2 per)),
 * and only the root takes the sums: it receives n-1 chunks' sums instead
 * of n-1 vectors. A rank stores a sum only after it got the root's lines
 * of that chunk, so the root had started. */
template <int TY, class Proto>
__device__ void twoReduce(const acuSymm& a, uint32_t flag, uint64_t bytes) {
  const int n = a.nranks, r = a.rank, root = a.root;
  const bool red = a.algo == ACU_SYMM_LL_RED2;
  const Two<Proto> t(bytes, n);
  const uint32_t f2 = red ? flag : flag + 1; /* the sums' flag and slots */
  const uint64_t off = red ? t.per : 0;
  if (!llReceiversFree(a, flag, -1)) return;
  const char* in = a.in[r];
  char* out = a.out[r];
  twoScatter<Proto>(a, flag, bytes, t);
  for (uint64_t j = t.ob + Proto::first(); j < t.oe; j += Proto::stride()) {
    const uint64_t g = (uint64_t)r * t.C + j;
    if (g >= t.L) break;
    float acc[Proto::NW][4];
    uint64_t d[Proto::NW];
    for (int q = 0; q < n; q++) {
      if (q == r) Proto::load(in, bytes, g, d);
      else if (!Proto::get(a, flag, q, j - t.ob, d)) return;
      addWords<TY, Proto>(acc, d, q == 0);
    }
    packWords<TY, Proto>(acc, d);
    for (int p = 0; p < n; p++) /* (LL128: before the divergent store below) */
      if (p != r && (!red || p == root)) Proto::put(a, p, f2, r, off + j - t.ob, d);
    if (!red || r == root) Proto::store(out, bytes, g, d);
  }
  if (red && r != root) return;
  for (uint64_t j = t.ob + Proto::first(); j < t.oe; j += Proto::stride())
    for (int q = 0; q < n; q++) {
      const uint64_t g = (uint64_t)q * t.C + j;
      uint64_t d[Proto::NW];
      if (q == r || g >= t.L) continue;
      if (!Proto::get(a, f2, q, off + j - t.ob, d)) return;
      Proto::store(out, bytes, g, d);
    }
}

/* Two-shot broadcast (3+ ranks): the root stores chunk p of its vector
 * into peer p's area (slots [0, per)); rank q stores chunk q (from the
 * root, or its input for the root) into every peer's area, the root's too
 * (slots [per, 2 per)), and takes the others' chunks from its own. The
 * root sends 2(n-1)/n of the vector instead of n-1 times it. The root
 * stores only after llReceiversFree, and a rank stores its chunk only
 * after it got the root's lines of it, so the others need no wait. The
 * root polls the chunks it gets back (it has them) so that the launch
 * shows every peer started it. */
template <class Proto>
__device__ void twoBcast(const acuSymm& a, uint32_t flag, uint64_t bytes) {
  const int n = a.nranks, r = a.rank, root = a.root;
  const Two<Proto> t(bytes, n);
  if (r == root && !llReceiversFree(a, flag, -1)) return;
  const char* in = a.in[r];
  char* out = a.out[r];
  if (r == root) twoScatter<Proto>(a, flag, bytes, t);
  for (uint64_t j = t.ob + Proto::first(); j < t.oe; j += Proto::stride()) {
    const uint64_t g = (uint64_t)r * t.C + j;
    if (g >= t.L) break;
    uint64_t d[Proto::NW];
    if (r == root) Proto::load(in, bytes, g, d);
    else if (!Proto::get(a, flag, root, j - t.ob, d)) return;
    for (int p = 0; p < n; p++)
      if (p != r) Proto::put(a, p, flag, r, t.per + j - t.ob, d);
    if (r != root || out != in) Proto::store(out, bytes, g, d);
  }
  for (uint64_t j = t.ob + Proto::first(); j < t.oe; j += Proto::stride())
    for (int q = 0; q < n; q++) {
      const uint64_t g = (uint64_t)q * t.C + j;
      uint64_t d[Proto::NW];
      if (q == r || g >= t.L) continue;
      if (!Proto::get(a, flag, q, t.per + j - t.ob, d)) return;
      if (r == root) {
        if (out == in) continue;
        Proto::load(in, bytes, g, d);
      }
      Proto::store(out, bytes, g, d);
    }
}

/* The two-shot kernels: which peers this launch heard from (llAlgo), then
 * the kernel for a.algo and a.type. */
template <class Proto>
__device__ bool twoRun(const acuSymm& a, uint32_t flag, uint64_t bytes) {
  const Two<Proto> t(bytes, a.nranks);
  bool heard = true; /* AR2, BC2: every peer's chunk (sums, copies); RED2: mine from everyone */
  for (int q = 0; q < a.nranks; q++)
    if (a.algo == ACU_SYMM_LL_RED2 ? q == a.rank && !t.has(q) : q != a.rank && !t.has(q)) heard = false;
  if (a.algo == ACU_SYMM_LL_BC2) twoBcast<Proto>(a, flag, bytes);
  else if (a.type == T_F16) twoReduce<T_F16, Proto>(a, flag, bytes);
  else if (a.type == T_BF16) twoReduce<T_BF16, Proto>(a, flag, bytes);
  else twoReduce<T_F32, Proto>(a, flag, bytes);
  return heard;
}

/* a.count: the bytes each rank sends each peer (all-reduce: the vector; all-to-all: a block). */
__device__ void llAlgo(const acuSymm& a) {
  __shared__ uint32_t sFlag;
  uint64_t* epoch = a.epoch + ACU_SYMM_MAX_BLOCKS + blockIdx.x;
  const bool two = a.algo == ACU_SYMM_LL_AR2; /* two flags */
  if (threadIdx.x == 0) {
    const uint64_t e = *epoch;
    sFlag = (uint32_t)e + 1;
    sCheck = !(e >> 32 & 1);
    *epoch = sFlag;
    sStop = 0;
  }
  __syncthreads();
  const uint64_t bytes = a.count;
  bool heard;
  if (a.algo == ACU_SYMM_LL_AR2 || a.algo == ACU_SYMM_LL_BC2 || a.algo == ACU_SYMM_LL_RED2)
    heard = a.proto ? twoRun<ProtoLL128>(a, sFlag, bytes) : twoRun<ProtoLL>(a, sFlag, bytes);
  else if (a.proto && (a.algo == ACU_SYMM_LL_BC || a.algo == ACU_SYMM_LL_RED || a.algo == ACU_SYMM_LL_RS))
    heard = oneRun<ProtoLL128>(a, sFlag, bytes);
  else
    heard = oneRun<ProtoLL>(a, sFlag, bytes);
  __syncthreads();
  if (threadIdx.x == 0) *epoch = (uint64_t)(sFlag + (two ? 1 : 0)) | (heard && !sStop ? 1ull << 32 : 0);
}

/* xptr: the window algorithms over what every rank offered (symmKernel):
 * a copy of the arguments in shared memory with in[] and out[] replaced by
 * the offers of this block's index. */
__device__ __noinline__ void symmXptr(const acuSymm& a) {
  __shared__ acuSymm x;
  const int words = (int)(sizeof(acuSymm) / 8);
  for (int i = threadIdx.x; i < words; i += blockDim.x) ((uint64_t*)&x)[i] = ((const uint64_t*)&a)[i];
  __syncthreads();
  if (threadIdx.x < a.nranks) {
    const int q = threadIdx.x;
    const uint64_t* slot = (const uint64_t*)a.out[q] + 2 * blockIdx.x;
    const uint64_t in = ldRelaxed(slot), out = ldRelaxed(slot + 1);
    x.in[q] = (char*)in; /* (16-byte aligned: a rank offers its own buffers only when they are) */
    x.out[q] = (char*)out;
  }
  __syncthreads();
  switch (x.algo == ACU_SYMM_AG ? -1 : (int)x.type) {
    case -1: gatherPush(x); break;
    case T_F16: reduceAlgo<T_F16>(x); break;
    case T_BF16: reduceAlgo<T_BF16>(x); break;
    default: reduceAlgo<T_F32>(x); break;
  }
}

__global__ void __launch_bounds__(ACU_THREADS, 1) symmKernel(const __grid_constant__ acuSymm a) {
  if (threadIdx.x == 0 && a.collSeq) stVolatile(a.opWord, (uint64_t)a.collSeq << 32 | a.sig);
  if (a.algo >= ACU_SYMM_LL_AR) {
    llAlgo(a);
    return;
  }
  __shared__ uint64_t e0;
  if (threadIdx.x == 0) e0 = a.epoch[blockIdx.x];
  __syncthreads();
  const bool staged = a.algo >= ACU_SYMM_ST_AR && a.algo <= ACU_SYMM_ST_RS;
  const bool ag = a.algo == ACU_SYMM_ST_AG || a.algo == ACU_SYMM_AG;
  const int kind = ag ? STAGE_AG : a.algo == ACU_SYMM_ST_AR || a.algo == ACU_SYMM_AR2 ? STAGE_AR : STAGE_RS;
  const uint64_t es = ag ? 1 : a.type == T_F32 ? 4 : 2;
  /* xptr 2: my buffers are out of my peers' reach; my staging area stands in for them (all-gather: for my
   * output; its input only I read) */
  const bool xstage = a.xptr == 2;
  char* const stage = a.in[a.rank];
  if (xstage && ag) { /* my input where my block of the output goes: gatherPush reads it there */
    uint64_t beg, end;
    share(a.count, a.vec ? 16 : 1, &beg, &end);
    copyBytes(stage + a.count * a.rank, a.uin, beg, end);
  } else if (staged || xstage) {
    stageCopy(a, es, true, kind);
  }
  if (a.xptr && threadIdx.x == 0) { /* what I offer, where the peers' blocks of this index read it */
    uint64_t* slot = (uint64_t*)a.out[a.rank] + 2 * blockIdx.x;
    slot[0] = (uint64_t)(!xstage ? a.uin : ag ? stage + a.count * a.rank : stage);
    /* (reduce-scatter: my block of my staged input becomes my output, in place) */
    slot[1] = (uint64_t)(!xstage ? a.uout : kind == STAGE_RS ? stage + a.count * a.rank * es : stage);
  }
  /* (the staged copies and the offers must be visible to the peers: release) */
  if (!barrier(a, e0 + 1, staged || a.xptr, true)) return;
  if (a.xptr) {
    symmXptr(a);
  } else {
    switch (a.algo == ACU_SYMM_AG ? -1 : a.algo == ACU_SYMM_ST_AG ? -2 : (int)a.type) {
      case -1: gatherPush(a); break;
      case -2: stagedGather(a); break;
      case T_F16: reduceAlgo<T_F16>(a); break;
      case T_BF16: reduceAlgo<T_BF16>(a); break;
      default: reduceAlgo<T_F32>(a); break;
    }
  }
  if (!barrier(a, e0 + 2, true)) return;
  if (a.algo == ACU_SYMM_ST_AR || (xstage && kind != STAGE_RS)) stageCopy(a, es, false, kind);
  /* reduce-scatter into my staging area (my output is misaligned, or out of my peers' reach): copy it out */
  if ((a.algo == ACU_SYMM_ST_RS && a.out[a.rank] != a.uout) || (xstage && kind == STAGE_RS)) {
    uint64_t beg, end;
    share(a.count, a.vec ? 16 / es : 1, &beg, &end); /* the share this block reduced */
    copyBytes(a.uout, stage + a.count * a.rank * es, beg * es, end * es);
  }
  if (threadIdx.x == 0) a.epoch[blockIdx.x] = e0 + 2;
}

/* ---- send/recv: LL lines into the receiver's p2p area ---------------------
 * (cuda_exec.h, "Send/recv on one host"). Each op has blocks of its own, so
 * that the group's transfers progress together as NCCL's do: a send block
 * waits only until the receiver freed the message two before on that pair
 * (an earlier group's, unless a group sends more than two to one peer); a
 * receive block polls its lines. The message numbers are read at the start
 * and advanced by the last block to finish (a ticket): all blocks read them
 * before, and the next kernel on the stream after. */
__shared__ uint64_t sUse;

__device__ void p2pReport(const acuP2p& a, uint32_t err, int peer) {
  if (a.shared->err == ACU_ERR_NONE) {
    a.shared->errPeer = peer;
    a.shared->err = err;
    __threadfence_system();
  }
}

/* A p2p wait's slow path: true (reported) on abort, timeout, or a peer's
 * poison in my mailbox (a rank that found a mismatch). */
__device__ bool p2pStalled(const acuP2p& a, int peer, uint64_t* start) {
  const uint64_t m = *(volatile const uint64_t*)a.mailbox;
  if (m & ACU_POISON) {
    p2pReport(a, ACU_ERR_POISONED, (int)(uint32_t)m);
    return true;
  }
  return !acuKeepWaiting(a.shared, a.timeoutNs, start, peer);
}

/* Poll line p until it carries `flag`; false on a stop (reported). `fifo`
 * (a header's wait, when the group receives nothing else from the peer):
 * the peer's FIFO to me; a slot posted there (simple: its tail, LL: the
 * first line's flag) while my header is still missing means the peer sent
 * this message through the FIFO: its size differs across
 * ANYCCL_CUDA_SYMM_P2P (a later message of the peer's is posted only after
 * this one's lines, so the header is read again first). The peer's head
 * is poisoned then, as a stopping FIFO lane does. */
__device__ bool p2pPoll(const acuP2p& a, const uint4* p, uint32_t flag, int peer, uint2* d, const acuConn* fifo) {
  return llPoll(p, flag, d, [&](uint64_t* st) {
    if (fifo) {
      const uint64_t step = fifo->step, tail = ldAcquire(fifo->tail);
      if (tail & ACU_POISON) {
        p2pReport(a, ACU_ERR_POISONED, (int)(uint32_t)tail);
        return true;
      }
      const volatile uint32_t* line = (const volatile uint32_t*)(fifo->llbuf + (step % fifo->nslots) * (uint64_t)fifo->llSlotBytes);
      const volatile uint32_t* hd = (const volatile uint32_t*)p;
      if ((tail > step || line[1] == (uint32_t)(step + 1)) && !(hd[1] == flag && hd[3] == flag)) {
        p2pReport(a, ACU_ERR_MISMATCH, peer);
        stVolatile(fifo->head, ACU_POISON | (uint32_t)a.rank); /* a sender waiting for room stops too */
        return true;
      }
    }
    return p2pStalled(a, peer, st);
  });
}

/* Lines [lb, le) of the op's data (line 0 of the area is the header). */
__device__ void p2pSend(const acuP2p& a, const acuP2pOp& o, uint64_t use, uint64_t lb, uint64_t le) {
  const uint32_t flag = (uint32_t)use;
  const int par = (int)(use & 1);
  if (threadIdx.x == 0) {
    /* the receiver freed message use - 2 of this parity (it stores it here) */
    const volatile uint64_t* freed = a.ctl + ACU_P2P_FREED + o.peer * 2 + par;
    uint64_t start = 0;
    for (uint32_t spins = 0; *freed + 2 < use; spins++)
      if ((spins & 1023) == 1023 && p2pStalled(a, o.peer, &start)) {
        sStop = 1;
        break;
      }
  }
  __syncthreads();
  if (sStop) return;
  uint4* area = (uint4*)(a.peerCtl[o.peer] + ACU_P2P_CTL_WORDS) + (uint64_t)(a.rank * 2 + par) * ACU_P2P_LINES;
  if (lb == 0 && threadIdx.x == 0) llPut(area, make_uint2(o.bytes, o.bytes), flag);
  const char* src = (const char*)o.src;
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) llPut(area + 1 + i, ld8(src + i * 8, lineLen(o.bytes, i)), flag);
}

__device__ void p2pRecv(const acuP2p& a, const acuP2pOp& o, uint64_t use, uint64_t lb, uint64_t le) {
  const uint32_t flag = (uint32_t)use;
  const int par = (int)(use & 1);
  const uint4* area = (const uint4*)(a.ctl + ACU_P2P_CTL_WORDS) + (uint64_t)(o.peer * 2 + par) * ACU_P2P_LINES;
  if (threadIdx.x == 0) {
    uint2 h;
    if (!p2pPoll(a, area, flag, o.peer, &h, (const acuConn*)o.src)) {
      sStop = 1;
    } else if (h.x != o.bytes) { /* the sender's message has another size */
      if (a.shared->err == ACU_ERR_NONE) {
        a.shared->expected = o.bytes;
        a.shared->got = h.x;
      }
      p2pReport(a, ACU_ERR_SIZE, o.peer);
      sStop = 1;
    }
  }
  __syncthreads();
  if (sStop) return;
  char* dst = (char*)o.dst;
  for (uint64_t i = lb + threadIdx.x; i < le; i += blockDim.x) {
    uint2 x;
    if (!p2pPoll(a, area + 1 + i, flag, o.peer, &x, nullptr)) break;
    st8(dst + i * 8, x, lineLen(o.bytes, i));
  }
  __syncthreads();
  if (sStop || threadIdx.x != 0) return;
  /* the last block of the message frees its parity: my loads before the store */
  uint32_t* done = (uint32_t*)(a.ctl + ACU_P2P_DONE) + o.peer * 2 + par;
  if (atomicInc(done, o.nb - 1) == (uint32_t)(o.nb - 1)) {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    stVolatile(a.peerCtl[o.peer] + ACU_P2P_FREED + a.rank * 2 + par, use);
  }
}

__global__ void __launch_bounds__(ACU_THREADS, 1) p2pKernel(const __grid_constant__ acuP2p a) {
  int j = 0;
  while (j + 1 < a.nops && a.ops[j + 1].b0 <= blockIdx.x) j++;
  const acuP2pOp& o = a.ops[j];
  const uint64_t k = blockIdx.x - o.b0;
  if (threadIdx.x == 0) {
    sStop = 0;
    if (o.kind != ACU_P2P_OP_COPY)
      sUse = *(volatile uint64_t*)(a.ctl + (o.kind == ACU_P2P_OP_SEND ? ACU_P2P_SENT : ACU_P2P_RECVD) + o.peer) + o.idx + 1;
  }
  __syncthreads();
  if (o.kind == ACU_P2P_OP_COPY) {
    const uint64_t per = (acuDiv((uint64_t)o.bytes + o.nb - 1, o.nb) + 15) / 16 * 16;
    const uint64_t beg = per * k < o.bytes ? per * k : o.bytes, end = beg + per < o.bytes ? beg + per : o.bytes;
    copyBytes((char*)o.dst, (const char*)o.src, beg, end);
  } else {
    const uint64_t lines = ((uint64_t)o.bytes + 7) / 8, per = acuDiv(lines + o.nb - 1, o.nb);
    const uint64_t lb = per * k < lines ? per * k : lines, le = lb + per < lines ? lb + per : lines;
    if (o.kind == ACU_P2P_OP_SEND) p2pSend(a, o, sUse, lb, le);
    else p2pRecv(a, o, sUse, lb, le);
  }
  /* every block, stopped or not: the last one advances the message numbers */
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  uint32_t* ticket = (uint32_t*)(a.ctl + ACU_P2P_TICKET);
  if (atomicAdd(ticket, 1u) != gridDim.x - 1) return;
  *ticket = 0;
  for (int i = 0; i < a.nops; i++)
    if (a.ops[i].kind != ACU_P2P_OP_COPY)
      a.ctl[(a.ops[i].kind == ACU_P2P_OP_SEND ? ACU_P2P_SENT : ACU_P2P_RECVD) + a.ops[i].peer]++;
  __threadfence();
}

} // namespace

extern "C" int acuLaunchP2p(const struct acuP2p* a, int blocks, int threads, void* stream) {
  p2pKernel<<<dim3(blocks), dim3(threads), 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError();
}

extern "C" int acuLaunchSymm(const struct acuSymm* a, int blocks, int threads, void* stream) {
  symmKernel<<<dim3(blocks), dim3(threads), 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError();
}
