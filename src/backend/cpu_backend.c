/* The cpu executor as the core sees it (exec.h): plans run on the stream as
 * host functions (cpu_exec.c), over the transports' FIFOs. */
#include "checks.h"
#include "comm.h"
#include "exec.h"
#include "plan.h"
#include "rt.h"

/* A plan starts on its stream: from here an abort waits for it. */
static void planRun(void* arg) {
  anycclCommRunBegin(((struct anycclPlan*)arg)->comm);
  anycclCpuExecute(arg);
}

static ncclResult_t cpuLaunch(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream) {
  return anycclExecLaunchHost(comm, plan, stream, planRun);
}

/* Waits sleep on the doorbell: ring it so that they see the flag now. */
static void cpuAbort(struct ncclComm* comm) {
  if (comm->bell) anycclBellRing(comm->bell);
}


const struct anycclExec anycclExecCpu = {
    .name = "cpu",
    .setup = anycclTransportSetup,
    .launch = cpuLaunch,
    .abort = cpuAbort,
    .asyncError = anycclCpuAsyncError, /* a same-host peer reported a mismatch (cpu_mismatch.c) */
    .free = anycclTransportFree,
};
