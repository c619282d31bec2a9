/* The sim executor (exec.h): placeholder until the sim backend lands. */
#include "checks.h"
#include "comm.h"
#include "exec.h"

static ncclResult_t simSetup(struct ncclComm* comm) {
  WARN("the sim backend is not available in this build");
  return ncclInvalidUsage;
}
static ncclResult_t simLaunch(struct ncclComm* comm, struct anycclPlan* plan, cudaStream_t stream) {
  anycclPlanFree(plan);
  return ncclInvalidUsage;
}
static void simAbort(struct ncclComm* comm) {}
static ncclResult_t simAsyncError(struct ncclComm* comm) { return ncclSuccess; }
static void simFree(struct ncclComm* comm) {}

const struct anycclExec anycclExecSim = {
    .name = "sim", .setup = simSetup, .launch = simLaunch, .abort = simAbort, .asyncError = simAsyncError, .free = simFree,
};
