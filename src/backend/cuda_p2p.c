/* Send/recv on one host without the FIFOs: the host half of the p2p LL
 * kernel (src/cuda/symm.cu, cuda_exec.h "Send/recv on one host"). Every
 * message of a group small enough for anycclSymmP2pOp (its size alone
 * decides, so both ends agree whatever else their groups hold) goes as LL
 * lines straight into the receiver's segment; a self copy goes with them.
 * When the group also holds larger messages, those keep their FIFO lanes
 * and run at the same time: the LL kernel on the communicator's side
 * stream, forked from the launch stream and joined back (under CUDA graph
 * capture this becomes a fork and join in the graph), so that the group's
 * transfers progress together as NCCL's do and no order between its small
 * and large messages is imposed on the peers. */
#include <stdlib.h>
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "debug.h"
#include "plan.h"

/* Launch ops[0, nops) (sends first: a send never waits for this group's
 * receives) in kernels of ACU_P2P_MAX_OPS ops. */
static ncclResult_t launchOps(struct ncclComm* comm, struct acuP2p* a, const struct acuP2pOp* ops, int nops,
                              void* stream) {
  for (int first = 0; first < nops; first += ACU_P2P_MAX_OPS) {
    int k = nops - first < ACU_P2P_MAX_OPS ? nops - first : ACU_P2P_MAX_OPS, blocks = 0;
    for (int i = 0; i < k; i++) {
      struct acuP2pOp* o = &a->ops[i];
      *o = ops[first + i];
      o->idx = 0;
      for (int j = 0; j < i; j++) o->idx += a->ops[j].kind == o->kind && a->ops[j].peer == o->peer;
      o->nb = (uint8_t)anycclSymmP2pBlocks(o->bytes, k, o->kind == ACU_P2P_OP_COPY);
      o->b0 = (uint16_t)blocks;
      blocks += o->nb;
    }
    a->nops = k;
    int e = acuLaunchP2p(a, blocks, ACU_THREADS, stream);
    if (e != 0) {
      WARN("SendRecv: p2p LL kernel launch on stream %p failed: %s (%d); is the stream valid and on device %d?",
           stream, acuErrorString(e), e, comm->cudaDev);
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

/* The phase receives a FIFO message from `peer`. */
static int fifoFrom(const struct ncclComm* comm, const struct anycclPhase* ph, int peer) {
  for (int i = 0; i < ph->nlanes; i++) {
    const struct anycclLane* l = &ph->lanes[i];
    if (l->kind != LANE_P2P_RECV || l->conn != &comm->p2pRecv[peer]) continue;
    for (int j = 0; j < l->nops; j++)
      if (!anycclSymmP2pOp(comm, l->ops[j].bytes)) return 1;
  }
  return 0;
}

static ncclResult_t streamEvent(void* ev, void* from, void* to) {
  int e = acuEventRecord(ev, from);
  if (e == 0) e = acuStreamWaitEvent(to, ev, 0);
  if (e != 0) {
    WARN("SendRecv: ordering streams %p and %p failed: %s (%d)", from, to, acuErrorString(e), e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

int anycclCudaP2p(struct ncclComm* comm, const struct anycclPhase* ph, void* stream, struct anycclPhase* rest,
                  ncclResult_t* res) {
  struct anycclSymmChoice ch;
  if (!acuLaunchP2p || comm->cuP2pStream == NULL || anycclSymmPath(comm, ph, &ch) != ANYCCL_SYMM_P2P) return 0;
  const int n = comm->nRanks;
  for (int q = 0; q < n; q++)
    if (anycclCudaMailbox(comm, q) == NULL) return 0; /* a peer not mapped here (as for the collectives) */
  int nll = 0, nfifo = 0, ncopy = 0;
  for (int i = 0; i < ph->nlanes; i++) {
    const struct anycclLane* l = &ph->lanes[i];
    for (int j = 0; j < l->nops; j++) {
      if (l->kind == LANE_COPY) {
        ncopy += j % 2 == 0;
        nfifo += j % 2 == 0 && l->ops[j].bytes > ACU_P2P_LL_MAX; /* a large self copy: the FIFO kernel's copy lane */
      } else if (anycclSymmP2pOp(comm, l->ops[j].bytes)) nll++;
      else nfifo++;
    }
  }
  struct acuP2pOp* ops = calloc((size_t)(nll + ncopy), sizeof(*ops));
  struct anycclLane* lanes = nfifo ? calloc((size_t)ph->nlanes, sizeof(*lanes)) : NULL;
  struct anycclP2pOp* fops = nfifo ? calloc((size_t)(nfifo + 2 * ncopy), sizeof(*fops)) : NULL;
  if (ops == NULL || (nfifo && (lanes == NULL || fops == NULL))) {
    free(ops), free(lanes), free(fops);
    WARN("SendRecv: out of host memory for %d messages", nll + nfifo);
    *res = ncclSystemError;
    return 1;
  }
  if (nfifo) {
    *rest = *ph;
    rest->nlanes = 0;
    rest->lanes = lanes;
    rest->p2pOps = fops;
    rest->steps = NULL;
  }
  /* the LL ops, sends first, then receives, then self copies; the rest into
   * lanes of their own */
  int k = 0, nf = 0;
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < ph->nlanes; i++) {
      const struct anycclLane* l = &ph->lanes[i];
      const int kind = l->kind == LANE_P2P_SEND ? ACU_P2P_OP_SEND : l->kind == LANE_P2P_RECV ? ACU_P2P_OP_RECV
                                                                                            : ACU_P2P_OP_COPY;
      if (kind != pass) continue;
      if (kind == ACU_P2P_OP_COPY && nfifo) { /* beside the FIFO lanes */
        struct anycclLane* d = &lanes[rest->nlanes++];
        *d = (struct anycclLane){.kind = LANE_COPY, .ops = fops + nf, .nops = l->nops};
        for (int j = 0; j < l->nops; j++) fops[nf++] = l->ops[j];
        continue;
      }
      if (kind == ACU_P2P_OP_COPY) { /* ops[2j] -> ops[2j + 1] */
        for (int j = 0; j + 1 < l->nops; j += 2)
          ops[k++] = (struct acuP2pOp){.src = (uint64_t)(uintptr_t)l->ops[j].ptr,
                                       .dst = (uint64_t)(uintptr_t)l->ops[j + 1].ptr,
                                       .bytes = (uint32_t)l->ops[j].bytes, .peer = (int16_t)comm->rank,
                                       .kind = ACU_P2P_OP_COPY};
        continue;
      }
      struct anycclLane* d = NULL;
      for (int j = 0; j < l->nops; j++) {
        const struct anycclP2pOp* o = &l->ops[j];
        if (!anycclSymmP2pOp(comm, o->bytes)) {
          if (d == NULL) {
            d = &lanes[rest->nlanes++];
            *d = (struct anycclLane){.kind = l->kind, .conn = l->conn, .ops = fops + nf};
          }
          fops[nf++] = *o;
          d->nops++;
          continue;
        }
        uint64_t ptr = (uint64_t)(uintptr_t)o->ptr;
        const int peer = (int)(l->conn - (kind == ACU_P2P_OP_SEND ? comm->p2pSend : comm->p2pRecv));
        uint64_t src = ptr;
        if (kind == ACU_P2P_OP_RECV) /* the FIFO check, unless FIFO messages from the peer are due too */
          src = fifoFrom(comm, ph, peer) ? 0 : (uint64_t)(uintptr_t)anycclCudaP2pRecvConn(comm, peer);
        ops[k++] = (struct acuP2pOp){.src = src, .dst = kind == ACU_P2P_OP_RECV ? ptr : 0,
                                     .bytes = (uint32_t)o->bytes, .peer = (int16_t)peer, .kind = (uint8_t)kind};
      }
    }
  }
  struct acuP2p a;
  memset(&a, 0, sizeof(a));
  char* mine = anycclCudaMailbox(comm, comm->rank);
  a.ctl = (uint64_t*)(mine + ACU_P2P_OFF);
  for (int q = 0; q < n; q++) a.peerCtl[q] = (uint64_t*)(anycclCudaMailbox(comm, q) + ACU_P2P_OFF);
  a.mailbox = (const uint64_t*)mine;
  a.shared = comm->cuSharedDev;
  a.timeoutNs = comm->opTimeoutSec > 0 ? (uint64_t)comm->opTimeoutSec * 1000000000ull : 0;
  a.rank = comm->rank;
  void* on = nfifo ? comm->cuP2pStream : stream;
  ncclResult_t r = nfifo ? streamEvent(comm->cuP2pFork, stream, on) : ncclSuccess;
  if (r == ncclSuccess) r = launchOps(comm, &a, ops, k, on);
  free(ops);
  if (nfifo == 0 || r != ncclSuccess) {
    if (nfifo) { /* join what was forked before giving up */
      streamEvent(comm->cuP2pJoin, on, stream);
      free(lanes), free(fops);
    }
    *res = r;
    return 1;
  }
  return 2;
}

ncclResult_t anycclCudaP2pJoin(struct ncclComm* comm, void* stream, struct anycclPhase* rest) {
  free(rest->lanes), free(rest->p2pOps);
  rest->lanes = NULL, rest->p2pOps = NULL;
  return streamEvent(comm->cuP2pJoin, comm->cuP2pStream, stream);
}
