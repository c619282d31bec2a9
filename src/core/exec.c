/* The executor of a communicator (exec.h). */
#include "comm.h"
#include "exec.h"

const struct anycclExec* anycclExecFor(anycclBackendKind kind) {
  switch (kind) {
    case ANYCCL_BACKEND_CUDA: return &anycclExecCuda;
    case ANYCCL_BACKEND_SIM: return &anycclExecSim;
    default: return &anycclExecCpu;
  }
}

void anycclExecAbort(struct ncclComm* comm) {
  if (comm->exec) comm->exec->abort(comm);
}
