/* libnccl-net-anyccl.so: anyccl's built-in socket network (a control
 * socket and NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets per
 * connection, helper threads) as an NCCL net plugin, version 8
 * (src/include/net_plugin.h). NVIDIA's NCCL loads it with
 * NCCL_NET_PLUGIN=anyccl; so does anyccl itself (the loader's own test).
 * Only ncclNetPlugin_v8 is exported (plugin/exports.map): anyccl's code
 * inside stays private to the library. Host memory only. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "net.h"
#include "net_plugin.h"

#define NET (&anycclNetSocket)

static ncclResult_t init(anycclPluginLogger_t log) {
  (void)log; /* anyccl logs through NCCL_DEBUG itself */
  return NET->init();
}

static ncclResult_t devices(int* n) { return NET->devices(n); }

static char names[16][64];

static ncclResult_t getProperties(int dev, anycclPluginProps_v8* p) {
  anycclNetProperties a;
  if (dev < 0 || dev >= 16) return ncclInvalidArgument;
  ncclResult_t res = NET->getProperties(dev, &a);
  if (res != ncclSuccess) return res;
  snprintf(names[dev], sizeof(names[dev]), "%s", a.name);
  memset(p, 0, sizeof(*p));
  p->name = names[dev];
  p->pciPath = NULL;
  p->guid = a.guid;
  p->ptrSupport = NCCL_PLUGIN_PTR_HOST;
  p->speed = a.speed;
  p->port = a.port;
  p->latency = (float)a.latency;
  p->maxComms = a.maxComms;
  p->maxRecvs = 1;
  return ncclSuccess;
}

static ncclResult_t listen(int dev, void* handle, void** lc) { return NET->listen(dev, handle, lc, NULL); }
/* connect and accept complete before they return (allowed: not "not yet") */
static ncclResult_t connect(int dev, void* handle, void** sc, void** devComm) {
  (void)devComm;
  return NET->connect(dev, handle, sc, NULL);
}
static ncclResult_t accept(void* lc, void** rc, void** devComm) {
  (void)devComm;
  return NET->accept(lc, rc);
}
static ncclResult_t regMr(void* c, void* d, size_t s, int t, void** mh) { return NET->regMr(c, d, s, t, mh); }
static ncclResult_t regMrDmaBuf(void* c, void* d, size_t s, int t, uint64_t o, int fd, void** mh) {
  (void)c, (void)d, (void)s, (void)t, (void)o, (void)fd, (void)mh;
  return ncclInternalError; /* host memory only */
}
static ncclResult_t deregMr(void* c, void* mh) { return NET->deregMr(c, mh); }
static ncclResult_t isend(void* c, void* d, int size, int tag, void* mh, void** req) {
  return NET->isend(c, d, size < 0 ? 0 : (size_t)size, tag, mh, req);
}
static ncclResult_t irecv(void* c, int n, void** d, int* sizes, int* tags, void** mh, void** req) {
  if (n != 1) return ncclInternalError; /* maxRecvs is 1 */
  size_t s = sizes[0] < 0 ? 0 : (size_t)sizes[0];
  return NET->irecv(c, 1, d, &s, tags, mh, req);
}
static ncclResult_t iflush(void* c, int n, void** d, int* sizes, void** mh, void** req) {
  (void)c, (void)n, (void)d, (void)sizes, (void)mh;
  *req = NULL; /* host memory: nothing to flush */
  return ncclSuccess;
}
static ncclResult_t test(void* req, int* done, int* sizes) {
  size_t s = 0;
  ncclResult_t res = NET->test(req, done, &s);
  if (res == ncclSuccess && *done && sizes) *sizes = s > INT32_MAX ? 0 : (int)s; /* SIZE_MAX: the peer's goodbye */
  return res;
}
static ncclResult_t closeSend(void* c) { return NET->closeSend(c); }
static ncclResult_t closeRecv(void* c) { return NET->closeRecv(c); }
static ncclResult_t closeListen(void* c) { return NET->closeListen(c); }

__attribute__((visibility("default"))) const anycclPluginNet_v8 ncclNetPlugin_v8 = {
    "AnycclSocket", init,   devices, getProperties, listen,    connect,   accept,      regMr, regMrDmaBuf, deregMr,
    isend,          irecv,  iflush,  test,          closeSend, closeRecv, closeListen, NULL,  NULL};
