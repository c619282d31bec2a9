/* libnccl-net-anyccl.so: anyccl's built-in socket network (a control
 * socket and NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets per
 * connection, helper threads) as an NCCL net plugin, versions 7 to 11
 * (src/include/net_plugin.h), so that every NCCL from 2.19 on finds the
 * table it looks for. NVIDIA's NCCL loads it with NCCL_NET_PLUGIN=anyccl;
 * so does anyccl itself (the loader's own test). Only the
 * ncclNetPlugin_v* tables are exported (plugin/exports.map): anyccl's code
 * inside stays private to the library. Host memory only.
 *
 * Built with -DANYCCL_PLUGIN_ONLY=N it exports version N alone: the tests'
 * one-version plugins (tests/net), loaded through the same dlopen path. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "net.h"
#include "net_plugin.h"

#define NET (&anycclNetSocket)
#ifdef ANYCCL_PLUGIN_ONLY
#pragma GCC diagnostic ignored "-Wunused-function" /* the other versions' adapters */
#endif

/* ANYCCL_PLUGIN_REFUSE_HOST=H (for tests): init fails on virtual host H
 * (NCCL_HOSTID), as a plugin fails on a host where it finds no NIC: those
 * ranks fall back to the built-in network while the others use this one. */
static ncclResult_t init(anycclPluginLogger_t log) {
  (void)log; /* anyccl logs through NCCL_DEBUG itself */
  const char *refuse = getenv("ANYCCL_PLUGIN_REFUSE_HOST"), *host = getenv("NCCL_HOSTID");
  if (refuse && host && strcmp(refuse, host) == 0) {
    fprintf(stderr, "libnccl-net-anyccl (ANYCCL_PLUGIN_REFUSE_HOST): refusing to initialise on host %s\n", host);
    return ncclSystemError;
  }
  return NET->init();
}

static ncclResult_t devices(int* n) { return NET->devices(n); }

static char names[16][64];

/* the fields every version has, filled from the socket table */
#define FILL_PROPS(p, a, dev)                       \
  do {                                              \
    memset((p), 0, sizeof(*(p)));                   \
    snprintf(names[dev], sizeof(names[dev]), "%s", (a).name); \
    (p)->name = names[dev];                         \
    (p)->pciPath = NULL;                            \
    (p)->guid = (a).guid;                           \
    (p)->ptrSupport = NCCL_PLUGIN_PTR_HOST;         \
    (p)->speed = (a).speed;                         \
    (p)->port = (a).port;                           \
    (p)->latency = (float)(a).latency;              \
    (p)->maxComms = (a).maxComms;                   \
    (p)->maxRecvs = 1;                              \
  } while (0)

static ncclResult_t props(int dev, anycclNetProperties* a) {
  if (dev < 0 || dev >= 16) return ncclInvalidArgument;
  return NET->getProperties(dev, a);
}

static ncclResult_t getProperties7(int dev, anycclPluginProps_v7* p) {
  anycclNetProperties a;
  ncclResult_t res = props(dev, &a);
  if (res == ncclSuccess) FILL_PROPS(p, a, dev);
  return res;
}

static ncclResult_t getProperties(int dev, anycclPluginProps_v8* p) {
  anycclNetProperties a;
  ncclResult_t res = props(dev, &a);
  if (res == ncclSuccess) FILL_PROPS(p, a, dev);
  return res;
}

/* versions 9 to 11: one device per NIC, no size limit the FIFO slots reach */
#define FILL_PROPS9(p, a, dev)                                   \
  do {                                                           \
    FILL_PROPS(p, a, dev);                                       \
    (p)->vProps.ndevs = 1;                                       \
    (p)->vProps.devs[0] = (dev);                                 \
    (p)->maxP2pBytes = (p)->maxCollBytes = (size_t)1 << 31;      \
  } while (0)

static ncclResult_t getProperties9(int dev, anycclPluginProps_v9* p) {
  anycclNetProperties a;
  ncclResult_t res = props(dev, &a);
  if (res == ncclSuccess) FILL_PROPS9(p, a, dev);
  return res;
}

static ncclResult_t getProperties11(int dev, anycclPluginProps_v11* p) {
  anycclNetProperties a;
  ncclResult_t res = props(dev, &a);
  if (res != ncclSuccess) return res;
  FILL_PROPS9(&p->base, a, dev);
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}

/* ANYCCL_PLUGIN_HANDSHAKE=1 (for tests): behave as plugins whose connect
 * completes only once the peer has accepted (aws-ofi-nccl's): connect
 * answers "not yet" (*sc NULL) until the acceptor has left a mark for that
 * handle in /dev/shm, so a caller that blocks in connect before it accepts
 * never finishes. Otherwise connect and accept complete before they return
 * (allowed: not "not yet"). */
static int handshake = -1;
static pthread_mutex_t hsLock = PTHREAD_MUTEX_INITIALIZER;
static struct { void* lc; uint64_t key; } listens[256];
static struct { uint64_t key; void* sc; } pending[256];

static int hsOn(void) {
  if (handshake < 0) {
    const char* e = getenv("ANYCCL_PLUGIN_HANDSHAKE");
    handshake = e && atoi(e) > 0;
  }
  return handshake;
}
/* The handle's last 8 bytes hold the connect's state between calls, as
 * real plugins keep it in the handle (the socket handle leaves them 0): a
 * caller that passes a fresh copy on each call restarts the connect, which
 * this mode reports as an error. */
#define HS_STATE_OFF (ANYCCL_NET_HANDLE_MAXSIZE - 8)
#define HS_STARTED 0x4853535441525444ull
static uint64_t hsKey(const void* handle) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < HS_STATE_OFF; i++) h = (h ^ ((const unsigned char*)handle)[i]) * 1099511628211ull;
  return h;
}
static void hsMark(char* path, size_t n, uint64_t key) {
  snprintf(path, n, "/dev/shm/anyccl-plugin-hs-%u-%016llx", (unsigned)getuid(), (unsigned long long)key);
}

static ncclResult_t listen(int dev, void* handle, void** lc) {
  ncclResult_t res = NET->listen(dev, handle, lc, NULL);
  if (res != ncclSuccess || !hsOn()) return res;
  pthread_mutex_lock(&hsLock);
  int i = 0;
  while (i < 256 && listens[i].lc) i++;
  if (i < 256) listens[i].lc = *lc, listens[i].key = hsKey(handle);
  pthread_mutex_unlock(&hsLock);
  return i < 256 ? ncclSuccess : ncclInternalError;
}
static ncclResult_t connect(int dev, void* handle, void** sc, anycclPluginDev** devComm) {
  (void)devComm;
  if (!hsOn()) return NET->connect(dev, handle, sc, NULL);
  const uint64_t key = hsKey(handle);
  char mark[96];
  hsMark(mark, sizeof(mark), key);
  ncclResult_t res = ncclSuccess;
  *sc = NULL;
  pthread_mutex_lock(&hsLock);
  int i = 0, free_ = -1;
  for (; i < 256 && pending[i].key != key; i++)
    if (free_ < 0 && pending[i].sc == NULL) free_ = i;
  uint64_t state;
  memcpy(&state, (char*)handle + HS_STATE_OFF, sizeof(state));
  if (i == 256 && state == 0) { /* first call: connect, then wait for the mark */
    void* c = NULL;
    res = free_ < 0 ? ncclInternalError : NET->connect(dev, handle, &c, NULL);
    if (res == ncclSuccess) pending[free_].key = key, pending[free_].sc = c;
    state = HS_STARTED;
    memcpy((char*)handle + HS_STATE_OFF, &state, sizeof(state));
  } else if (i == 256 || state != HS_STARTED) {
    fprintf(stderr, "libnccl-net-anyccl (ANYCCL_PLUGIN_HANDSHAKE): connect called again without the state it "
            "left in the handle: the caller must pass the same handle buffer until the connect completes\n");
    res = ncclInternalError;
  } else if (access(mark, F_OK) == 0) {
    unlink(mark);
    *sc = pending[i].sc;
    pending[i].key = 0, pending[i].sc = NULL;
  }
  pthread_mutex_unlock(&hsLock);
  return res;
}
/* No peer waiting: "not yet" (NCCL calls again), so that a caller stepping
 * several connects and accepts, or bounding its own wait, never blocks in
 * the socket table's accept. */
static ncclResult_t accept(void* lc, void** rc, anycclPluginDev** devComm) {
  (void)devComm;
  *rc = NULL;
  if (!anycclNetSocketListenReady(lc)) return ncclSuccess;
  ncclResult_t res = NET->accept(lc, rc);
  if (res != ncclSuccess || !hsOn()) return res;
  uint64_t key = 0;
  pthread_mutex_lock(&hsLock);
  for (int i = 0; i < 256; i++)
    if (listens[i].lc == lc) key = listens[i].key;
  pthread_mutex_unlock(&hsLock);
  char mark[96];
  hsMark(mark, sizeof(mark), key);
  FILE* f = fopen(mark, "w");
  if (f) fclose(f);
  return f ? ncclSuccess : ncclSystemError;
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
static ncclResult_t closeListen(void* c) {
  pthread_mutex_lock(&hsLock);
  for (int i = 0; i < 256; i++)
    if (listens[i].lc == c) listens[i].lc = NULL;
  pthread_mutex_unlock(&hsLock);
  return NET->closeListen(c);
}


/* ---- the shapes of versions 7, 9, 10, 11 over the same functions ---- */
static ncclResult_t regMr7(void* c, void* d, int s, int t, void** mh) { return regMr(c, d, s < 0 ? 0 : (size_t)s, t, mh); }
static ncclResult_t isend9(void* c, void* d, size_t size, int tag, void* mh, void** req) {
  return NET->isend(c, d, size, tag, mh, req);
}
static ncclResult_t isend10(void* c, void* d, size_t size, int tag, void* mh, void* ph, void** req) {
  (void)ph;
  return isend9(c, d, size, tag, mh, req);
}
static ncclResult_t irecv9(void* c, int n, void** d, size_t* sizes, int* tags, void** mh, void** req) {
  if (n != 1) return ncclInternalError; /* maxRecvs is 1 */
  return NET->irecv(c, 1, d, sizes, tags, mh, req);
}
static ncclResult_t irecv10(void* c, int n, void** d, size_t* sizes, int* tags, void** mh, void** ph, void** req) {
  (void)ph;
  return irecv9(c, n, d, sizes, tags, mh, req);
}
static ncclResult_t makeVDevice(int* d, anycclPluginVProps* p) {
  (void)d, (void)p;
  return ncclInvalidUsage; /* no virtual NICs: one device per interface */
}
static ncclResult_t init10(anycclPluginLogger_t log, anycclPluginProfCb_t prof) {
  (void)prof;
  return init(log);
}
static int ctxToken; /* v11 contexts: the socket table is process-wide, every context is this one */
static ncclResult_t init11(void** ctx, uint64_t commId, anycclPluginCommConfig* cfg, anycclPluginLogger_t log,
                           anycclPluginProfCb_t prof) {
  (void)commId, (void)cfg, (void)prof;
  *ctx = &ctxToken;
  return init(log);
}
static ncclResult_t listen11(void* ctx, int dev, void* handle, void** lc) {
  (void)ctx;
  return listen(dev, handle, lc);
}
static ncclResult_t connect10(int dev, anycclPluginCommConfig* cfg, void* handle, void** sc, anycclPluginDev** dc) {
  (void)cfg;
  return connect(dev, handle, sc, dc);
}
static ncclResult_t connect11(void* ctx, int dev, void* handle, void** sc, anycclPluginDev** dc) {
  (void)ctx;
  return connect(dev, handle, sc, dc);
}
static ncclResult_t finalize11(void* ctx) {
  (void)ctx;
  return ncclSuccess;
}
static ncclResult_t setNetAttr11(void* ctx, anycclPluginNetAttr_v11* attr) {
  (void)ctx, (void)attr;
  return ncclSuccess; /* hints only */
}

#define EXPORT __attribute__((visibility("default")))
#ifndef ANYCCL_PLUGIN_ONLY
#define ANYCCL_PLUGIN_ONLY 0 /* every version */
#endif
#define ONLY(v) (ANYCCL_PLUGIN_ONLY == 0 || ANYCCL_PLUGIN_ONLY == (v))

#if ONLY(7)
EXPORT const anycclPluginNet_v7 ncclNetPlugin_v7 = {
    "AnycclSocket", init,   devices, getProperties7, listen,    connect,   accept,      regMr7, regMrDmaBuf, deregMr,
    isend,          irecv,  iflush,  test,           closeSend, closeRecv, closeListen, NULL,   NULL};
#endif
#if ONLY(8)
EXPORT const anycclPluginNet_v8 ncclNetPlugin_v8 = {
    "AnycclSocket", init,   devices, getProperties, listen,    connect,   accept,      regMr, regMrDmaBuf, deregMr,
    isend,          irecv,  iflush,  test,          closeSend, closeRecv, closeListen, NULL,  NULL};
#endif
#if ONLY(9)
EXPORT const anycclPluginNet_v9 ncclNetPlugin_v9 = {
    "AnycclSocket", init,   devices, getProperties9, listen,    connect,   accept,      regMr, regMrDmaBuf, deregMr,
    isend9,         irecv9, iflush,  test,           closeSend, closeRecv, closeListen, NULL,  NULL,        makeVDevice};
#endif
#if ONLY(10)
EXPORT const anycclPluginNet_v10 ncclNetPlugin_v10 = {
    "AnycclSocket", init10,  devices, getProperties9, listen,    connect10, accept,      regMr, regMrDmaBuf, deregMr,
    isend10,        irecv10, iflush,  test,           closeSend, closeRecv, closeListen, NULL,  NULL,        makeVDevice};
#endif
#if ONLY(11)
EXPORT const anycclPluginNet_v11 ncclNetPlugin_v11 = {
    "AnycclSocket", init11,  devices, getProperties11, listen11,  connect11, accept,      regMr,      regMrDmaBuf,
    deregMr,        isend10, irecv10, iflush,          test,      closeSend, closeRecv,   closeListen, NULL,
    NULL,           makeVDevice, finalize11, setNetAttr11};
#endif
