/* Plugins the loader must refuse, with a WARN naming the file and the
 * symbols, and carry on with the built-in network:
 *   -DFAKE_WRONG_VERSION  exports only ncclNetPlugin_v6 and ncclNetPlugin_v12
 *                         (versions anyccl does not load)
 *   -DFAKE_MISSING        exports ncclNetPlugin_v9 whose isend is NULL */
#include <stddef.h>
#include "net_plugin.h"

#define EXPORT __attribute__((visibility("default")))

#ifdef FAKE_WRONG_VERSION
EXPORT const int ncclNetPlugin_v6 = 6;
EXPORT const int ncclNetPlugin_v12 = 12;
#endif

#ifdef FAKE_MISSING
static ncclResult_t ok(void) { return ncclSuccess; }
#define F(type) ((type)(void (*)(void))ok) /* never called: the loader refuses the table first */
EXPORT const anycclPluginNet_v9 ncclNetPlugin_v9 = {
    .name = "FakeMissingIsend",
    .init = F(ncclResult_t (*)(anycclPluginLogger_t)),
    .devices = F(ncclResult_t (*)(int*)),
    .getProperties = F(ncclResult_t (*)(int, anycclPluginProps_v9*)),
    .listen = F(ncclResult_t (*)(int, void*, void**)),
    .connect = F(ncclResult_t (*)(int, void*, void**, anycclPluginDev**)),
    .accept = F(ncclResult_t (*)(void*, void**, anycclPluginDev**)),
    .regMr = F(ncclResult_t (*)(void*, void*, size_t, int, void**)),
    .deregMr = F(ncclResult_t (*)(void*, void*)),
    .isend = NULL,
    .irecv = F(ncclResult_t (*)(void*, int, void**, size_t*, int*, void**, void**)),
    .test = F(ncclResult_t (*)(void*, int*, int*)),
    .closeSend = F(ncclResult_t (*)(void*)),
    .closeRecv = F(ncclResult_t (*)(void*)),
    .closeListen = F(ncclResult_t (*)(void*)),
};
#endif
