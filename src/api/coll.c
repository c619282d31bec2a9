/* Collective and point-to-point entry points: check the arguments, pack a
 * task, enqueue it. Nothing else happens here. */
#include <string.h>
#include "api.h"
#include "checks.h"
#include "comm.h"
#include "reduce.h"
#include "rt.h"

static const char* fnNames[FUNC_COUNT] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
                                          "ncclReduceScatter", "ncclAlltoAll", "ncclGather", "ncclScatter",
                                          "ncclSend", "ncclRecv"};

static ncclResult_t fail(ncclResult_t res) {
  anycclGroupSetError(res);
  return res;
}

/* Which buffers this rank reads/writes for a call (root-only ones elsewhere). */
static void buffersUsed(const struct anycclTask* t, int rank, int* usesSend, int* usesRecv) {
  *usesSend = *usesRecv = 1;
  switch (t->func) {
    case FUNC_BROADCAST: *usesSend = rank == t->root; break;
    case FUNC_REDUCE: *usesRecv = rank == t->root; break;
    case FUNC_GATHER: *usesRecv = rank == t->root; break;
    case FUNC_SCATTER: *usesSend = rank == t->root; break;
    case FUNC_SEND: *usesRecv = 0; break;
    case FUNC_RECV: *usesSend = 0; break;
    default: break;
  }
}

static ncclResult_t checkTask(struct ncclComm* comm, struct anycclTask* t) {
  const char* fn = fnNames[t->func];
  NCCLCHECK(anycclCommCheck(comm, fn, 1));
  if ((int)t->type < 0 || t->type >= ncclNumTypes) {
    WARN("%s: datatype %d is not an ncclDataType_t (0..%d)", fn, (int)t->type, ncclNumTypes - 1);
    return ncclInvalidArgument;
  }
  if (t->func == FUNC_ALLREDUCE || t->func == FUNC_REDUCE || t->func == FUNC_REDUCESCATTER) {
    if ((int)t->op < 0) {
      WARN("%s: op %d is not an ncclRedOp_t", fn, (int)t->op);
      return ncclInvalidArgument;
    }
    NCCLCHECK(anycclResolveOp(comm, t->op, t->type, &t->redop));
    int u = (int)t->op - (int)ncclNumOps;
    if (u >= 0 && comm->userOps[u].residence == ncclScalarDevice) t->scalarPtr = comm->userOps[u].devScalar;
  }
  int rooted = t->func == FUNC_BROADCAST || t->func == FUNC_REDUCE || t->func == FUNC_GATHER ||
               t->func == FUNC_SCATTER || t->func == FUNC_SEND || t->func == FUNC_RECV;
  if (rooted && (t->root < 0 || t->root >= comm->nRanks)) {
    WARN("%s: %s %d is out of range [0, %d)", fn, t->func >= FUNC_SEND ? "peer" : "root", t->root, comm->nRanks);
    return ncclInvalidArgument;
  }
  int usesSend, usesRecv;
  buffersUsed(t, comm->rank, &usesSend, &usesRecv);
  if (t->count > 0 && usesSend && t->sendbuff == NULL) {
    WARN("%s: sendbuff is NULL with count %zu; pass a device buffer", fn, t->count);
    return ncclInvalidArgument;
  }
  if (t->count > 0 && usesRecv && t->recvbuff == NULL) {
    WARN("%s: recvbuff is NULL with count %zu; pass a device buffer", fn, t->count);
    return ncclInvalidArgument;
  }
  /* The stream must be on the comm's device. A stream that passed once is
   * remembered (the check costs two runtime calls, a good part of a small
   * operation's host time). cudaStreamGetDevice is not allowed on a stream
   * being captured into a CUDA graph (it would invalidate the capture): no
   * check then. */
  if (t->stream != NULL && t->stream != comm->checkedStream && anycclRt.streamGetDevice != NULL &&
      !(anycclRt.streamIsCapturing && anycclRt.streamIsCapturing(t->stream))) {
    int dev = -1;
    int e = anycclRt.streamGetDevice(t->stream, &dev);
    if (e != 0) {
      WARN("%s: stream %p is not a valid stream", fn, (void*)t->stream);
      return ncclInvalidArgument;
    }
    if (dev != comm->cudaDev) {
      WARN("%s: stream %p belongs to device %d but comm %p (rank %d) is on device %d; use a stream of device %d", fn,
           (void*)t->stream, dev, (void*)comm, comm->rank, comm->cudaDev, comm->cudaDev);
      return ncclInvalidUsage;
    }
    comm->checkedStream = t->stream;
  }
  return ncclSuccess;
}

static ncclResult_t submit(struct anycclTask* t, struct ncclComm* comm) {
  anycclProfInit();
  uint64_t t0 = anycclProfNow();
  ncclResult_t res = checkTask(comm, t);
  if (res != ncclSuccess) return fail(res);
  NCCLCHECK(anycclGroupStartInternal());
  res = anycclEnqueue(comm, t);
  anycclProfAdd(PROF_SUBMIT, t0);
  if (res != ncclSuccess) anycclGroupSetError(res);
  ncclResult_t g = anycclGroupEndInternal();
  return res != ncclSuccess ? res : g;
}

#define TASK(f, sb, rb, cnt, dt, o, rt, st) \
  (struct anycclTask) { .func = (f), .sendbuff = (sb), .recvbuff = (rb), .count = (cnt), .type = (dt), .op = (o), \
                        .root = (rt), .stream = (st) }

NCCL_API(ncclResult_t, ncclAllReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclBroadcast,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclBcast,
         (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_BROADCAST, buff, buff, count, datatype, ncclSum, root, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
          ncclComm_t comm, cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_REDUCE, sendbuff, recvbuff, count, datatype, op, root, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclAllGather,
         (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclReduceScatter,
         (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
          ncclComm_t comm, cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclAlltoAll,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclGather,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclScatter,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclSend,
         (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
          cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclRecv,
         (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) {
  struct anycclTask t = TASK(FUNC_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, stream);
  return submit(&t, comm);
}

NCCL_API(ncclResult_t, ncclGroupStart, (void)) { return anycclGroupStartInternal(); }
NCCL_API(ncclResult_t, ncclGroupEnd, (void)) { return anycclGroupEndInternal(); }
