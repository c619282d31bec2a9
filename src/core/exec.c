/* The executor of a communicator (exec.h). */
#include "checks.h"
#include "comm.h"
#include "exec.h"

const struct anycclExec* anycclExecFor(anycclBackendKind kind) {
  switch (kind) {
    case ANYCCL_BACKEND_CUDA: return &anycclExecCuda;
    case ANYCCL_BACKEND_SIM: return &anycclExecSim;
    default: return &anycclExecCpu;
  }
}

ncclResult_t anycclExecLaunchHost(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream,
                                  void (*run)(void* plan)) {
  plan->seq = comm->launches++;
  anycclCommWorkStart(comm);
  int err = anycclRt.launchHostFunc(stream, run, plan);
  if (err != 0) {
    WARN("Launching on stream %p failed: %s (%d); is the stream valid and on device %d?", (void*)stream,
         anycclRt.getErrorString(err), err, comm->cudaDev);
    comm->launches--;
    anycclPlanFree(plan);
    anycclCommWorkDone(comm);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

void anycclExecAbort(struct ncclComm* comm) {
  if (comm->exec) comm->exec->abort(comm);
}
