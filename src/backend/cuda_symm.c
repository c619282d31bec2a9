/* Collectives over symmetric windows on GPUs: the host half of
 * src/cuda/symm.cu. A phase qualifies when the user's buffers lie in
 * NCCL_WIN_COLL_SYMMETRIC windows (ncclCommWindowRegister, as nccl-tests -R
 * 2 and PyTorch's symmetric memory do) whose team is the whole communicator
 * on one host, and it is an all-reduce or reduce-scatter summing float,
 * half or bfloat16, or an all-gather of any type, of at most
 * ANYCCL_CUDA_SYMM_MAX bytes. Window registration is collective and the
 * choice depends only on the call's arguments, so every rank decides alike
 * (as with NCCL, a program that registers on some ranks only is wrong; its
 * waits end at ANYCCL_OP_TIMEOUT or at the op-word check).
 *
 * Small messages (up to ANYCCL_CUDA_SYMM_LL per rank) need no window: the
 * LL kernels read only this rank's input, store lines into the peers'
 * segments (mapped at init) and write only this rank's output, so every
 * all-reduce, all-gather, reduce-scatter, broadcast and reduce of that size
 * on one host takes them, registered or not; so does an all-to-all whose
 * block for each peer is at most ANYCCL_CUDA_SYMM_A2A. Larger ones up to ANYCCL_CUDA_SYMM_STAGE on
 * buffers outside windows go through each rank's staging area (in its
 * segment, mapped by every peer): copy in, the same two-barrier reduction
 * or gather over the peers' areas, copy out. anycclSymmPath makes the
 * choice from the call's arguments and the parameters alone (plain C: the
 * sim backend calls it too, src/sim/symm.c, to time the same kernels). */
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "debug.h"
#include "param.h"
#include "plan.h"
#include "topo.h"

static int symmType(ncclDataType_t t) { return t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16; }

/* The defaults of ANYCCL_CUDA_SYMM_LL and ANYCCL_CUDA_SYMM_STAGE suit 2
 * GPUs; with more ranks the one-shot LL kernels move more bytes per rank
 * (each sends its vector, as 8-byte lines of 4 data bytes, to n-1 peers) and
 * the staged kernels' two local copies weigh less against the FIFO path's
 * n-1 ring steps. Unless set, the LL limit of reductions is the default
 * times 2/n, of broadcast times 1/(n-1) (one root sends to all), and the
 * staging limit the default times n/2. On 4 H100s under graphs (nccl-tests
 * -G 10): all-reduce LL 17.3 us at 512 KB against 19.8 staged, 29.5 at 1 MB
 * against 22.4; staged 60.4 us at 8 MB against the FIFO path's 76.9. */
static int symmRanks(const struct ncclComm* comm) { return comm && comm->nRanks > 2 ? comm->nRanks : 2; }

static size_t stageLimit(const struct ncclComm* comm, int inPlace) {
  int64_t v = anycclParamInt(PARAM_CUDA_SYMM_STAGE);
  if (v <= 0) return 0;
  if (!anycclParamIsSet(PARAM_CUDA_SYMM_STAGE)) {
    v = v * symmRanks(comm) / 2;
    /* on the ranks' own buffers there are no copies in and out: up to
     * 16 MB on 2 ranks too (2 H100s, -G 10: 16 MB 61.5 us in one process
     * and 57.5 with a process per GPU, against the FIFO path's 70.4 and
     * 67.6; staged, with a process per GPU and eager calls, 77.3 against
     * 71.1) */
    if (inPlace && v < ((int64_t)16 << 20)) v = (int64_t)16 << 20;
  }
  if (v > ((int64_t)1 << 30)) v = (int64_t)1 << 30;
  return ((size_t)v + 255) / 256 * 256;
}
size_t anycclCudaStageBytes(const struct ncclComm* comm) { return stageLimit(comm, 1); }
size_t anycclCudaStageCopyBytes(const struct ncclComm* comm) { return stageLimit(comm, 0); }

/* The two-shot LL all-reduce (3+ ranks) up to this many bytes: the
 * parameter as set, else on 3 and 4 ranks, where it was measured, the
 * default x 2 and x 1 (4 H100s, -G 10: 512 KB 10.5 us against one-shot
 * 18.2 and NCCL's 15.0; 1 MB 17.3 against staged 22.1, NCCL 18.0; 2 MB
 * staged 28.0 against 30.4; 3 H100s: 1.5 MB 19.2 against staged 22.2, 3 MB
 * staged 29.1 against 31.7); more ranks: not measured, none. */
size_t anycclCudaSymmLL2Bytes(const struct ncclComm* comm) {
  const int n = symmRanks(comm);
  const int64_t v = anycclParamInt(PARAM_CUDA_SYMM_LL2);
  if (n < 3 || v <= 0) return 0;
  if (anycclParamIsSet(PARAM_CUDA_SYMM_LL2)) return (size_t)v;
  /* in LL128 lines twice as far (4 H100s, -G 10: 2 MB 21.9 us against
   * staged 27.6 and NCCL's 27.5; 4 MB 38.8 against staged 37.9) */
  const size_t l128 = anycclCudaSymmLL128(comm) ? 2 : 1;
  return n == 3 ? (size_t)v * 2 * l128 : n == 4 ? (size_t)v * l128 : 0;
}

/* The two-shot LL broadcast and reduce (3+ ranks) up to this many bytes:
 * the parameter as set, else on 3 and 4 ranks in LL128 lines (measured
 * there) its default for reduce and half of it for broadcast; none
 * otherwise (in LL lines no faster than the one-shot kernel and the FIFO
 * chain: 4 H100s, broadcast 1 MB 14.8 us against the chain's 12.9). */
size_t anycclCudaSymmLL2RootedBytes(const struct ncclComm* comm, int func) {
  const int n = symmRanks(comm);
  const int64_t v = anycclParamInt(PARAM_CUDA_SYMM_LL2_ROOTED);
  if (n < 3 || v <= 0) return 0;
  if (anycclParamIsSet(PARAM_CUDA_SYMM_LL2_ROOTED)) return (size_t)v;
  /* 4 H100s, -G 10, LL128 lines: broadcast 1 MB 12.8 us, the FIFO chain
   * 12.8, 2 MB 17.5 against 16.6; reduce 2 MB 16.0 against 17.8 */
  if (n > 4 || !anycclCudaSymmLL128(comm)) return 0;
  return func == FUNC_BROADCAST ? (size_t)v / 2 : (size_t)v;
}

/* NVLink between every pair of the communicator's GPUs: one host, each GPU
 * found by its bus id in the topology (NCCL_TOPO_FILE, else detected once
 * per process through NVML and sysfs) and each pair's path NVLink, direct
 * or through NVSwitches. 0 when anything is unknown. */
static pthread_once_t sysOnce = PTHREAD_ONCE_INIT;
static struct anycclTopo* sysTopo;
static void sysDetect(void) {
  if (anycclTopoGetSystem(INT_MIN, &sysTopo) != ncclSuccess) sysTopo = NULL;
}
int anycclCudaNvlinkAll(const struct ncclComm* comm) {
  if (comm->nHosts != 1) return 0;
  pthread_once(&sysOnce, sysDetect);
  if (!sysTopo || sysTopo->nHosts < 1) return 0;
  const struct anycclTopoHost* h = &sysTopo->hosts[0];
  for (int a = 0; a < comm->nRanks; a++) {
    const int ga = anycclTopoFindGpu(h, comm->peerInfo[a].busId);
    if (ga < 0) return 0;
    for (int b = a + 1; b < comm->nRanks; b++) {
      const int gb = anycclTopoFindGpu(h, comm->peerInfo[b].busId);
      if (gb < 0 || anycclTopoGpuPath(h, ga, gb).type != TOPO_PATH_NVL) return 0;
    }
  }
  return 1;
}

/* LL128 lines for the two-shot kernels: asked for (ANYCCL_CUDA_SYMM_LL128)
 * and every pair of the communicator's GPUs joined by NVLink (a 128-byte
 * store arrives whole there; NCCL's LL128 protocol rests on the same). */
int anycclCudaSymmLL128(const struct ncclComm* comm) {
  return anycclParamInt(PARAM_CUDA_SYMM_LL128) && comm->nvlinkAll;
}

size_t anycclCudaSymmLLBytes(const struct ncclComm* comm, int func) {
  const int64_t v = anycclParamInt(func == FUNC_ALLTOALL ? PARAM_CUDA_SYMM_A2A : PARAM_CUDA_SYMM_LL);
  if (v <= 0) return 0;
  const int n = symmRanks(comm);
  /* all-to-all: each rank stores n-1 blocks as lines (twice their bytes on
   * the wire); unless set, the limit per peer is the default on 2 ranks, half
   * of it on 3 and a quarter from 4 (H100s, -G 10, against the FIFO path:
   * 3 GPUs 512 KB a peer 12.0 us as lines, 14.4 FIFO; 1 MB 20.3, 19.3; 4
   * GPUs 256 KB 10.3 as lines; 512 KB 18.0, 16.1; 1 MB 32.4, 22.4) */
  if (func == FUNC_ALLTOALL)
    return anycclParamIsSet(PARAM_CUDA_SYMM_A2A) ? (size_t)v : (size_t)(n <= 2 ? v : n == 3 ? v / 2 : v / 4);
  if (anycclParamIsSet(PARAM_CUDA_SYMM_LL)) return (size_t)v;
  if (func == FUNC_BROADCAST) return (size_t)(v / (n - 1));
  /* reduce on 3+ ranks with LL128 lines: those take over from 1/n of the
   * default (4 H100s, -G 10: 512 KB 6.4 us in LL128 lines, 9.3 in LL) */
  if (func == FUNC_REDUCE && n >= 3 && anycclCudaSymmLL128(comm) && anycclParamInt(PARAM_CUDA_SYMM_LL128_ONESHOT) > 0)
    return (size_t)(v / n);
  /* with the two-shot kernel on 3 and 4 ranks the one-shot stops at 1/2
   * and 1/8 of the default (4 GPUs: at 256 KB two-shot 8.3 us against
   * one-shot 10.1-10.5; 3 GPUs: one-shot 9.7 us at 384 KB, two-shot 12.3 at
   * 768 KB) */
  if (func == FUNC_ALLREDUCE && n >= 3 && n <= 4 && anycclCudaSymmLL2Bytes(comm) > 0) return (size_t)(n == 3 ? v / 2 : v / 8);
  /* (all-gather too: on 4 H100s, -G 10, 1 MB a rank took 25.2-25.5 us in
   * LL lines against the mesh's 21.8-22.0; 512 KB 15.7 both) */
  return (size_t)(v * 2 / n);
}

int anycclSymmP2pOp(const struct ncclComm* comm, size_t bytes) {
  const int64_t most = anycclParamInt(PARAM_CUDA_SYMM_P2P);
  return comm->nHosts == 1 && comm->nRanks >= 2 && comm->nRanks <= ACU_SYMM_MAX_RANKS &&
         anycclParamInt(PARAM_CUDA_SYMM) && comm->llThreshold > 0 && most > 0 && bytes > 0 &&
         bytes <= (size_t)most && bytes <= ACU_P2P_LL_MAX;
}

int anycclSymmP2pBlocks(size_t bytes, int nops, int copy) {
  size_t units = copy ? (bytes + 4095) / 4096 : ((bytes + 7) / 8 + 255) / 256;
  size_t cap = 128 / (size_t)(nops < 1 ? 1 : nops);
  if (cap > 32) cap = 32;
  if (units > cap) units = cap;
  return units < 1 ? 1 : (int)units;
}

/* The LL kernels' blocks for `bytes` cut in `parts` chunks (two-shot: n,
 * one-shot: 1): one per 256 LL lines (LL128: per
 * ANYCCL_CUDA_SYMM_LL128_LINES lines) of a part, at most
 * ACU_SYMM_LL_BLOCKS; 0 when a block's lines do not fit its slot (or its
 * half, `halves` 2). */
static int symmLLBlocks(size_t bytes, int parts, int halves, int l128, struct anycclSymmChoice* c) {
  const int64_t u = l128 ? anycclParamInt(PARAM_CUDA_SYMM_LL128_LINES) : 256;
  const size_t unit = u < 1 ? 1 : (size_t)u, wpl = l128 ? 15 : 1;
  const size_t slot = l128 ? ACU_SYMM_LL128_LINES : ACU_SYMM_LL_LINES;
  const size_t part = (((bytes + 7) / 8 + wpl - 1) / wpl + (size_t)parts - 1) / (size_t)parts;
  size_t blocks = (part + unit - 1) / unit;
  if (blocks > ACU_SYMM_LL_BLOCKS) blocks = ACU_SYMM_LL_BLOCKS;
  if (blocks < 1 || (part + blocks - 1) / blocks > slot / (size_t)halves) return 0;
  c->blocks = (int)blocks;
  c->ll128 = l128;
  return 1;
}

/* ANYCCL_CUDA_SYMM_LL128_ONESHOT for a rooted function: as set, else its
 * default for reduce and half of it for broadcast (4 H100s, -G 10:
 * broadcast 512 KB 9.0 us, 1 MB 14.3 against the two-shot kernel's 12.0;
 * reduce 1 MB 9.8 against 11.6) */
static size_t symmLL128OneShotBytes(int func) {
  const int64_t v = anycclParamInt(PARAM_CUDA_SYMM_LL128_ONESHOT);
  if (v <= 0) return 0;
  return anycclParamIsSet(PARAM_CUDA_SYMM_LL128_ONESHOT) || func != FUNC_BROADCAST ? (size_t)v : (size_t)v / 2;
}

/* ANYCCL_CUDA_SYMM_LL128_RS: as set, else its default on 2-4 ranks (where it
 * was measured) and none on more */
static size_t symmLL128RsBytes(int n) {
  const int64_t v = anycclParamInt(PARAM_CUDA_SYMM_LL128_RS);
  if (v <= 0 || (n > 4 && !anycclParamIsSet(PARAM_CUDA_SYMM_LL128_RS))) return 0;
  return (size_t)v;
}

int anycclSymmPath(const struct ncclComm* comm, const struct anycclPhase* ph, struct anycclSymmChoice* c) {
  memset(c, 0, sizeof(*c));
  const int n = comm->nRanks;
  if (n < 2 || n > ACU_SYMM_MAX_RANKS || !anycclParamInt(PARAM_CUDA_SYMM)) return ANYCCL_SYMM_NONE;
  const int func = ph->func;
  if (func == FUNC_SEND) { /* send/recv: some message small enough */
    for (int i = 0; i < ph->nlanes; i++) {
      const struct anycclLane* l = &ph->lanes[i];
      for (int j = 0; l->kind != LANE_COPY && j < l->nops; j++)
        if (anycclSymmP2pOp(comm, l->ops[j].bytes)) c->bytes += l->ops[j].bytes;
    }
    return c->bytes ? ANYCCL_SYMM_P2P : ANYCCL_SYMM_NONE;
  }
  const int rooted = func == FUNC_BROADCAST || func == FUNC_REDUCE; /* LL only */
  const int a2a = func == FUNC_ALLTOALL;                             /* LL only */
  const int reduce = func == FUNC_ALLREDUCE || func == FUNC_REDUCESCATTER || func == FUNC_REDUCE;
  if (func != FUNC_ALLREDUCE && func != FUNC_ALLGATHER && func != FUNC_REDUCESCATTER && !rooted && !a2a)
    return ANYCCL_SYMM_NONE;
  if (reduce && (ph->op.op != anycclDevSum || ph->scalarPtr || !symmType(ph->op.type))) return ANYCCL_SYMM_NONE;
  const size_t es = ph->elemSize, bytes = ph->count * es;
  c->bytes = bytes;
  c->inBytes = func == FUNC_REDUCESCATTER || a2a ? bytes * n : bytes;
  c->outBytes = func == FUNC_ALLGATHER || a2a ? bytes * n : bytes;
  c->rooted = rooted;
  const size_t most = c->inBytes > c->outBytes ? c->inBytes : c->outBytes;
  if (bytes == 0 || most > (size_t)anycclParamInt(PARAM_CUDA_SYMM_MAX)) return ANYCCL_SYMM_NONE;
  /* LL lines go through the segments: any buffers will do (unless the user
   * forced an algorithm or the simple protocol) */
  const size_t llMax = (size_t)ACU_SYMM_LL_BLOCKS * ACU_SYMM_LL_LINES * 8;
  const size_t ll = anycclCudaSymmLLBytes(comm, func);
  if (ll > 0 && bytes <= ll && bytes <= llMax && comm->forceAlgo < 0 && comm->llThreshold > 0 &&
      symmLLBlocks(bytes, 1, 1, 0, c))
    return ANYCCL_SYMM_LL;
  /* broadcast and reduce a little past that: one-shot in LL128 lines (the
   * root sends or takes n-1 vectors at 120 of 128 bytes); reduce-scatter
   * likewise up to ANYCCL_CUDA_SYMM_LL128_RS (on 2-4 ranks unless set) */
  const size_t l128one = rooted                         ? symmLL128OneShotBytes(func)
                         : func == FUNC_REDUCESCATTER ? symmLL128RsBytes(n)
                                                        : 0;
  if (bytes <= l128one && anycclCudaSymmLL128(comm) && comm->forceAlgo < 0 && comm->llThreshold > 0 &&
      symmLLBlocks(bytes, 1, 1, 1, c))
    return ANYCCL_SYMM_LL;
  /* two-shot LL all-reduce, broadcast and reduce (3+ ranks), in LL128 lines
   * where NVLink joins the GPUs: a block's share of each chunk fits its
   * area's lines (the rooted ones keep their two phases in two halves) */
  const size_t ll2 = func == FUNC_ALLREDUCE ? anycclCudaSymmLL2Bytes(comm) : rooted ? anycclCudaSymmLL2RootedBytes(comm, func) : 0;
  if (ll2 > 0 && bytes <= ll2 && comm->forceAlgo < 0 && comm->llThreshold > 0) {
    /* (rooted: LL128 lines only) */
    const int l128 = anycclCudaSymmLL128(comm) && (rooted || bytes >= (size_t)anycclParamInt(PARAM_CUDA_SYMM_LL128_MIN));
    if ((l128 || !rooted) && symmLLBlocks(bytes, n, rooted ? 2 : 1, l128, c)) {
      c->twoShot = 1;
      return ANYCCL_SYMM_LL;
    }
  }
  if (rooted || a2a) return ANYCCL_SYMM_NONE;
  /* (an all-gather in the mesh form moves each block once, straight to
   * every peer: faster than staging it on 2 and 4 H100s, 4-32 MB) */
  const int mesh = func == FUNC_ALLGATHER && c->outBytes <= comm->meshAgMax;
  if (most <= anycclCudaStageBytes(comm) && comm->forceAlgo < 0 && !mesh) {
    c->inPlaceOnly = most > anycclCudaStageCopyBytes(comm);
    return ANYCCL_SYMM_STAGED;
  }
  return ANYCCL_SYMM_WINDOW_ONLY;
}

/* Every rank of the communicator in this process (their buffers' pointers
 * are good on every GPU of it) and ANYCCL_CUDA_SYMM_XPTR: the staged sizes
 * run over the ranks' own buffers (acuSymm xptr). */
static int symmXptr(const struct ncclComm* comm) {
  if (!anycclParamInt(PARAM_CUDA_SYMM_XPTR) || acuPtrPeerReachable == NULL) return 0;
  for (int q = 0; q < comm->nRanks; q++)
    if (comm->peerInfo[q].processToken != comm->peerInfo[comm->rank].processToken) return 0;
  return 1;
}
/* This rank's buffer can be offered to its peers as it is. */
static int symmOwnReachable(const void* p) { return (uintptr_t)p % 16 == 0 && acuPtrPeerReachable(p); }

int anycclCudaSymm(struct ncclComm* comm, const struct anycclPhase* ph, void* stream, ncclResult_t* res) {
  if (!acuLaunchSymm) return 0;
  struct anycclSymmChoice ch;
  const int path = anycclSymmPath(comm, ph, &ch);
  if (path == ANYCCL_SYMM_NONE) return 0;
  const int n = comm->nRanks, func = ph->func;
  const size_t es = ph->elemSize, bytes = ch.bytes;
  for (int q = 0; q < n; q++)
    if (anycclCudaMailbox(comm, q) == NULL) return 0; /* a peer not mapped here */
  const int useLL = path == ANYCCL_SYMM_LL;
  struct acuSymm a;
  memset(&a, 0, sizeof(a));
  int staged = 0, xptr = 0, mapped = 0;
  if (ch.rooted || func == FUNC_ALLTOALL || comm->windows == NULL || !anycclWinSymmetric(comm, ph->in, ch.inBytes, a.in) ||
      !anycclWinSymmetric(comm, ph->out, ch.outBytes, a.out)) {
    memset(&a, 0, sizeof(a));
    if (useLL) {
      a.in[comm->rank] = (char*)ph->in; /* LL reads and writes only its own buffers */
      a.out[comm->rank] = ph->out;
    } else if (path == ANYCCL_SYMM_STAGED && symmXptr(comm)) {
      /* every rank in this process: the kernels read and write the ranks' own buffers, each rank offering
       * its buffers' addresses in its pointer slots, or its staging area where its buffers are out of the
       * peers' reach or not 16-byte aligned (then it copies in and out as the staged kernels do) */
      xptr = symmOwnReachable(ph->in) && symmOwnReachable(ph->out) ? 1 : 2;
      for (int q = 0; q < n; q++) {
        a.in[q] = anycclCudaMailbox(comm, q) + ACU_SYMM_STAGE_OFF;
        a.out[q] = anycclCudaMailbox(comm, q) + ACU_SYMM_XPTR_OFF;
      }
      a.uin = (char*)ph->in;
      a.uout = ph->out;
    } else if (path == ANYCCL_SYMM_STAGED && acuStreamIsCapturing(stream) &&
               (mapped = anycclCudaSymmMapped(comm, ph->in, ph->out, a.in, a.out, res)) != 0) {
      /* ranks of several processes, captured: the window algorithms on the ranks' own buffers, mapped here */
      if (mapped == 1) return 1; /* the exchange failed: *res says why */
    } else if (path == ANYCCL_SYMM_STAGED && !ch.inPlaceOnly) {
      staged = 1; /* the kernels read and write the peers' staging areas */
      for (int q = 0; q < n; q++) a.in[q] = a.out[q] = anycclCudaMailbox(comm, q) + ACU_SYMM_STAGE_OFF;
      a.uin = (char*)ph->in;
      a.uout = ph->out;
      /* reduce-scatter: reduced straight into my output, unless it is not 16-byte aligned: then into my
       * block of my staging area (in place) and copied out, so that every rank's vec (which sets the blocks'
       * shares) is the same */
      if (func == FUNC_REDUCESCATTER)
        a.out[comm->rank] = (uintptr_t)ph->out % 16 == 0 ? ph->out : a.in[comm->rank] + ph->count * comm->rank * es;
    } else {
      return 0;
    }
  }

  const size_t vecElems = 16 / es;
  int vec = 1;
  for (int q = 0; q < n; q++) vec &= ((uintptr_t)a.in[q] % 16 == 0) && ((uintptr_t)a.out[q] % 16 == 0);
  /* (the LL kernels ignore vec and the peers' buffers) */
  if (func != FUNC_ALLREDUCE) vec &= bytes % 16 == 0; /* rank blocks start at rank * bytes */
  a.algo = func == FUNC_ALLGATHER ? ACU_SYMM_AG
           : func == FUNC_REDUCESCATTER ? ACU_SYMM_RS
           /* in place, one-shot would overwrite an input its peers still read */
           : bytes <= (size_t)anycclParamInt(PARAM_CUDA_SYMM_ONESHOT) && ph->in != ph->out ? ACU_SYMM_AR1
                                                                                         : ACU_SYMM_AR2;
  if (staged) /* all-reduce: two-shot within the staging areas */
    a.algo = func == FUNC_ALLGATHER ? ACU_SYMM_ST_AG : func == FUNC_REDUCESCATTER ? ACU_SYMM_ST_RS : ACU_SYMM_ST_AR;
  if (xptr) { /* the window algorithms; all-reduce two-shot (one-shot in place would overwrite inputs) */
    a.algo = func == FUNC_ALLGATHER ? ACU_SYMM_AG : func == FUNC_REDUCESCATTER ? ACU_SYMM_RS : ACU_SYMM_AR2;
    a.xptr = (uint8_t)xptr;
  }
  /* two-shot: each rank's share a whole number of vectors */
  a.chunk = ((ph->count + n - 1) / n + vecElems - 1) / vecElems * vecElems;
  a.count = func == FUNC_ALLGATHER ? bytes : ph->count;
  for (int q = 0; q < n; q++) {
    char* mb = anycclCudaMailbox(comm, q);
    a.pads[q] = (uint64_t*)(mb + 64);
    a.mailboxes[q] = q == comm->rank ? NULL : (const uint64_t*)mb;
  }
  char* mine = anycclCudaMailbox(comm, comm->rank);
  a.opWord = (uint64_t*)(mine + 8);
  a.epoch = (uint64_t*)(mine + 64) + ACU_SYMM_MAX_BLOCKS * ACU_SYMM_MAX_RANKS;
  a.shared = comm->cuSharedDev;
  a.timeoutNs = comm->opTimeoutSec > 0 ? (uint64_t)comm->opTimeoutSec * 1000000000ull : 0;
  a.sig = anycclCudaPhaseTag(comm, ph);
  a.collSeq = comm->cuCurCollSeq;
  a.nranks = n;
  a.rank = comm->rank;
  a.type = (uint8_t)ph->op.type;
  a.vec = (uint8_t)vec;
  /* blocks: the work each does (the part of the data this rank moves) */
  size_t work = a.algo == ACU_SYMM_AR2 || a.algo == ACU_SYMM_ST_AR ? (size_t)a.chunk * es : bytes;
  size_t per = (size_t)anycclParamInt(PARAM_CUDA_SYMM_BLOCK_BYTES);
  size_t blocks = per ? (work + per - 1) / per : 1;
  if (blocks < 1) blocks = 1;
  if (blocks > ACU_SYMM_MAX_BLOCKS) blocks = ACU_SYMM_MAX_BLOCKS;
  /* small: LL lines, a.count in bytes (a rank's message), 256+ lines a block */
  if (useLL) {
    a.algo = func == FUNC_ALLGATHER       ? ACU_SYMM_LL_AG
             : func == FUNC_REDUCESCATTER ? ACU_SYMM_LL_RS
             : func == FUNC_BROADCAST     ? (ch.twoShot ? ACU_SYMM_LL_BC2 : ACU_SYMM_LL_BC)
             : func == FUNC_REDUCE        ? (ch.twoShot ? ACU_SYMM_LL_RED2 : ACU_SYMM_LL_RED)
             : func == FUNC_ALLTOALL      ? ACU_SYMM_LL_A2A
             : ch.twoShot                 ? ACU_SYMM_LL_AR2
                                          : ACU_SYMM_LL_AR;
    a.root = ph->root;
    a.count = bytes;
    a.proto = (uint8_t)ch.ll128;
    blocks = (size_t)ch.blocks;
  }
  int e = acuLaunchSymm(&a, (int)blocks, ACU_THREADS, stream);
  if (e != 0) {
    WARN("%s: symmetric-window kernel launch on stream %p failed: %s (%d); is the stream valid and on device %d?",
         anycclFuncName(func), stream, acuErrorString(e), e, comm->cudaDev);
    *res = ncclUnhandledCudaError;
  }
  return 1;
}
