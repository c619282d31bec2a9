/* The executor interface: what the core asks of a backend, as a table of
 * functions. Three implementations: cpu (backend/cpu_backend.c: host threads
 * over shared-memory and network FIFOs), cuda (backend/cuda_backend.c: one
 * kernel per phase) and sim (sim/: timed flows on a virtual clock, no data).
 * core/ calls only this table (comm->exec), never a backend by name; a
 * transport that must stop a communicator's waits calls anycclExecAbort. */
#ifndef ANYCCL_EXEC_H
#define ANYCCL_EXEC_H

#include "nccl.h"
#include "rt.h"

struct ncclComm;
struct anycclPlan;

struct anycclExec {
  const char* name;
  /* Connections and executor state, once the geometry (channels, rings) is
   * known; called at the end of init. */
  ncclResult_t (*setup)(struct ncclComm* comm);
  /* Queue a plan on the stream (called with comm->cudaDev current); takes
   * ownership of the plan, also on failure. */
  ncclResult_t (*launch)(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream);
  /* The abort or revoke flag was set: make every wait of the executor see it
   * now. Callable from any thread, more than once. */
  void (*abort)(struct ncclComm* comm);
  /* An error the executor found on its own (a kernel's), or ncclSuccess. */
  ncclResult_t (*asyncError)(struct ncclComm* comm);
  /* Release what setup made (also after a failed or partial setup). */
  void (*free)(struct ncclComm* comm);
};

extern const struct anycclExec anycclExecCpu, anycclExecCuda, anycclExecSim;

/* The executor of a runtime kind. */
const struct anycclExec* anycclExecFor(anycclBackendKind kind);

/* For executors that run a plan as a host function on the stream (cpu,
 * sim): number the plan, count it as work, queue run(plan). */
ncclResult_t anycclExecLaunchHost(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream,
                                  void (*run)(void* plan));

/* comm->exec->abort, if the communicator has an executor yet. */
void anycclExecAbort(struct ncclComm* comm);

#endif
