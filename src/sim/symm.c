/* The cuda backend's one-host kernels in the time model (docs/simulation.md,
 * "One host: the LL and staged kernels"). On one host the cuda backend runs
 * small and mid-size all-reduce, all-gather, reduce-scatter, broadcast,
 * reduce and all-to-all without their plans (backend/cuda_symm.c);
 * anycclSymmPath makes the choice for both backends. Such a phase is one
 * kernel:
 *
 *   LL      launch + route latency + the flows: every line a rank stores
 *           into a peer's segment (16 wire bytes per 8 of data), each
 *           sender's flows capped at its blocks x symm_ll_block_GBps
 *           shared among the peers it stores into; the two-shot kernels
 *           in two such rounds (chunk q to rank q from every rank, or from
 *           the root; then chunk q from rank q to every peer, or to the
 *           root);
 *   p2p     (send/recv, when every message of every rank takes the LL
 *           kernel) launch + route latency + a flow per message (16 wire
 *           bytes per 8, plus a header line), capped at the op's blocks x
 *           symm_ll_block_GBps; self copies at symm_copy_GBps beside them;
 *   staged  launch + copy in + barrier + route latency + the flows of the
 *           exchange + barrier (+ copy out: all-reduce); copies at
 *           symm_copy_GBps on no link, flows capped at the kernel's blocks x
 *           symm_block_GBps shared among the peers.
 *
 * Flows share the NVLink links max-min fairly, as every other flow does. */
#include <string.h>
#include "checks.h"
#include "comm.h"
#include "cuda_exec.h"
#include "model.h"
#include "param.h"
#include "plan.h"
#include "sim.h"

#define SYMM_MAX_FLOWS (ACU_SYMM_MAX_RANKS * ACU_SYMM_MAX_RANKS)

int simSymmPath(const struct anycclSimWorld* w, struct anycclPlan** plans, int p, struct anycclSymmChoice* c) {
  const struct ncclComm* comm = plans[0]->comm;
  const struct anycclPhase* ph = &plans[0]->phases[p];
  if (w->noSymm || comm->nHosts != 1 || w->n > ACU_SYMM_MAX_RANKS || ph->nlanes == 0) return ANYCCL_SYMM_NONE;
  /* no symmetric windows on the sim backend: WINDOW_ONLY is the FIFO path */
  int path = anycclSymmPath(comm, ph, c);
  if (path == ANYCCL_SYMM_P2P) { /* modelled when every rank's messages all take the kernel, else the FIFO plan */
    int sends = 0;
    for (int r = 0; r < w->n; r++) {
      if (p >= plans[r]->nphases || plans[r]->phases[p].func != FUNC_SEND) return ANYCCL_SYMM_NONE;
      const struct anycclPhase* q = &plans[r]->phases[p];
      for (int i = 0; i < q->nlanes; i++) sends += q->lanes[i].kind == LANE_P2P_SEND ? q->lanes[i].nops : 0;
      if (sends > SYMM_MAX_FLOWS) return ANYCCL_SYMM_NONE; /* (as many flows) */
      for (int i = 0; i < q->nlanes; i++)
        for (int j = 0; j < q->lanes[i].nops; j++)
          if (q->lanes[i].kind == LANE_COPY ? q->lanes[i].ops[j].bytes > ACU_P2P_LL_MAX
                                            : !anycclSymmP2pOp(comm, q->lanes[i].ops[j].bytes))
            return ANYCCL_SYMM_NONE;
    }
    return path;
  }
  /* (the staged kernels as they copy in and out; sizes past that run in
   * place on GPUs, which the model does not tell apart: the FIFO plan) */
  if (path == ANYCCL_SYMM_STAGED && c->inPlaceOnly) return ANYCCL_SYMM_NONE;
  return path == ANYCCL_SYMM_LL || path == ANYCCL_SYMM_STAGED ? path : ANYCCL_SYMM_NONE;
}

/* Flows src -> every peer (or -> dst only when dst >= 0) of `bytes`. */
static void addFlows(const struct simFabric* fab, int n, int src, int dst, double bytes, double cap,
                     struct simFlow* f, struct simRoundFlow* info, double* lat, int* nf) {
  for (int q = 0; q < n; q++) {
    if (q == src || (dst >= 0 && q != dst)) continue;
    int i = (*nf)++;
    f[i].bytes = bytes;
    f[i].cap = cap;
    f[i].end = 0;
    f[i].nlinks = simRoute(fab, src, q, f[i].links, &lat[i]);
    info[i] = (struct simRoundFlow){src, q, 0, -1};
  }
}

ncclResult_t simSymmRun(struct anycclSimWorld* w, struct anycclPlan** plans, int p, int path,
                        const struct anycclSymmChoice* c, struct simLinkAcc* acc, double t0, double* dur) {
  const struct simFabric* fab = &w->fabric;
  const struct simCalib* cal = &fab->calib;
  const struct anycclPhase* ph = &plans[0]->phases[p];
  const int n = w->n, func = ph->func;
  const double B = (double)c->bytes;
  struct simFlow f[SYMM_MAX_FLOWS];
  struct simRoundFlow info[SYMM_MAX_FLOWS];
  double lat[SYMM_MAX_FLOWS];
  int nf = 0;
  double before = cal->symmLaunchUs * 1e-6, after = 0, copyT = 0;
  if (path == ANYCCL_SYMM_P2P) {
    /* each rank's kernel: a flow per message to its receiver, 2 x bytes +
     * the header line, capped at the op's blocks x symm_ll_block_GBps; self
     * copies at symm_copy_GBps on no link, beside them */
    for (int r = 0; r < n; r++) {
      const struct anycclPhase* q = &plans[r]->phases[p];
      int nops = 0; /* the kernel's ops (cuda_p2p.c) */
      for (int i = 0; i < q->nlanes; i++) nops += q->lanes[i].kind == LANE_COPY ? q->lanes[i].nops / 2 : q->lanes[i].nops;
      nops = nops > ACU_P2P_MAX_OPS ? ACU_P2P_MAX_OPS : nops;
      for (int i = 0; i < q->nlanes; i++) {
        const struct anycclLane* l = &q->lanes[i];
        for (int j = 0; j < l->nops; j++) {
          const double b = (double)l->ops[j].bytes;
          if (l->kind == LANE_COPY && j % 2 == 0 && b / (cal->symmCopyGBps * 1e9) > copyT) copyT = b / (cal->symmCopyGBps * 1e9);
          if (l->kind != LANE_P2P_SEND) continue;
          double cap = anycclSymmP2pBlocks(l->ops[j].bytes, nops, 0) * cal->symmLLBlockGBps * 1e9;
          addFlows(fab, n, r, (int)(l->conn - plans[r]->comm->p2pSend), 2 * b + 16, cap, f, info, lat, &nf);
        }
      }
    }
  } else if (path == ANYCCL_SYMM_LL) {
    double rank = c->blocks * cal->symmLLBlockGBps * 1e9; /* one rank's blocks */
    double wire = c->ll128 ? B * 128 / 120 : 2 * B;         /* 16-byte lines of 8 data bytes (LL128: 128 of 120) */
    if (c->twoShot) { /* two-shot: chunk q to rank q, then chunk q from rank q (round 2 below) */
      for (int r = 0; r < n; r++)
        if (func != FUNC_BROADCAST || r == ph->root) addFlows(fab, n, r, -1, wire / n, rank / (n - 1), f, info, lat, &nf);
    } else if (func == FUNC_BROADCAST) {
      addFlows(fab, n, ph->root, -1, wire, rank / (n - 1), f, info, lat, &nf);
    } else if (func == FUNC_REDUCE) {
      for (int r = 0; r < n; r++)
        if (r != ph->root) addFlows(fab, n, r, ph->root, wire, rank, f, info, lat, &nf);
    } else { /* all-reduce: the vector, all-gather: my block, reduce-scatter, all-to-all: block q, to every peer q */
      for (int r = 0; r < n; r++) addFlows(fab, n, r, -1, wire, rank / (n - 1), f, info, lat, &nf);
    }
  } else {
    /* the blocks cuda_symm.c launches: one per symm block bytes of the work */
    size_t es = ph->elemSize, vecElems = 16 / es;
    size_t chunk = ((ph->count + n - 1) / n + vecElems - 1) / vecElems * vecElems;
    double work = func == FUNC_ALLREDUCE ? (double)(chunk * es) : B;
    double per = (double)anycclParamInt(PARAM_CUDA_SYMM_BLOCK_BYTES), blocks = per > 0 ? (work + per - 1) / per : 1;
    blocks = blocks < 1 ? 1 : blocks > ACU_SYMM_MAX_BLOCKS ? ACU_SYMM_MAX_BLOCKS : (double)(long)blocks;
    double cap = blocks * cal->symmBlockGBps * 1e9 / (n - 1), copy = cal->symmCopyGBps * 1e9;
    double bar = cal->symmBarrierUs * 1e-6;
    before += (double)c->inBytes / copy + bar; /* copy in, barrier */
    after = bar;                               /* barrier */
    if (func == FUNC_ALLREDUCE) {
      /* each rank reads its share from every peer's staging and stores the
       * sum into every peer's: 2 shares each way between every pair */
      for (int r = 0; r < n; r++) addFlows(fab, n, r, -1, 2.0 * (double)(chunk * es), cap, f, info, lat, &nf);
      after += B / copy; /* copy out */
    } else {
      /* all-gather: every rank pulls each peer's block; reduce-scatter:
       * each rank reads its block from every peer's staging */
      for (int r = 0; r < n; r++) addFlows(fab, n, r, -1, B, cap, f, info, lat, &nf);
    }
  }
  const int rounds = path == ANYCCL_SYMM_LL && c->twoShot ? 2 : 1;
  double at = t0 + before;
  for (int k = 0; k < rounds; k++) {
    if (k == 1 && func != FUNC_ALLREDUCE) { /* round 2 of broadcast (every chunk to every peer) and reduce (sums to the root) */
      const double wire = c->ll128 ? B * 128 / 120 : 2 * B, rank = c->blocks * cal->symmLLBlockGBps * 1e9;
      nf = 0;
      for (int r = 0; r < n; r++)
        if (func == FUNC_BROADCAST) addFlows(fab, n, r, -1, wire / n, rank / (n - 1), f, info, lat, &nf);
        else if (r != ph->root) addFlows(fab, n, r, ph->root, wire / n, rank, f, info, lat, &nf);
    }
    if (k == 0 || func != FUNC_ALLREDUCE) NCCLCHECK(simFlowsRun(f, nf, fab->linkBps, fab->nLinks)); /* (all-reduce: round 2 is round 1's shape) */
    double xfer = copyT; /* (p2p self copies, beside the flows) */
    for (int i = 0; i < nf; i++)
      if (lat[i] + f[i].end > xfer) xfer = lat[i] + f[i].end;
    struct simBuilder b = {f, info, lat, nf, nf};
    simAccRound(acc, &b);
    simAccFlush(w, acc, 1);
    if (w->flowFile) {
      const char* what = path == ANYCCL_SYMM_P2P ? "symm-p2p" : path == ANYCCL_SYMM_LL ? (rounds > 1 ? "symm-ll2" : "symm-ll") : "symm-staged";
      for (int i = 0; i < nf; i++)
        simWriteFlow(w, w->nextFlowId + i, -1, -1, plans[0]->seq, what, info[i].src, info[i].dst, f[i].bytes, 0, 0,
                     f[i].links, f[i].nlinks, at, at + lat[i] + f[i].end);
    }
    w->nextFlowId += nf;
    at += xfer;
  }
  *dur = at - t0 + after;
  return ncclSuccess;
}
