/* NCCL_NET_PLUGIN: an external network plugin (NCCL's ABI, version 8,
 * net_plugin.h) under anyccl's network table, so that the collectives'
 * transport and the one-sided layer run over it.
 *
 * NCCL_NET_PLUGIN=name loads libnccl-net-<name>.so (a value with ".so" or
 * a '/' is the file itself), as NCCL does; "none" (or unset) keeps the
 * built-in table. A library that cannot be loaded, lacks the version 8
 * symbol, or fails init gets one WARN naming the file and the symbol (and
 * the versions it does export), and anyccl carries on with its built-in
 * table, as NCCL falls back to its internal ones. Plugin tables have no
 * completion notification: the proxy polls them while busy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "net.h"
#include "net_plugin.h"
#include "net_plugin_check.h"
#include "param.h"
#include "socket.h"

static const anycclPluginNet_v8* plug;
static char plugName[64];

static void pluginLog(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) WARN("NET/Plugin %s: %s", plugName, msg);
  else if (level >= NCCL_LOG_INFO) INFO(NCCL_NET, "NET/Plugin %s: %s", plugName, msg);
  (void)flags, (void)file, (void)line;
}

static ncclResult_t pgInit(void) { return ncclSuccess; } /* done at load */
/* A plugin's answer that anyccl cannot use: one WARN naming it. */
static ncclResult_t pgRefuse(ncclResult_t res, const char* why) {
  if (res != ncclSuccess) WARN("NET/Plugin %s: %s; fix the plugin or unset NCCL_NET_PLUGIN", plugName, why);
  return res;
}

static ncclResult_t pgDevices(int* n) {
  char why[160];
  NCCLCHECK(plug->devices(n));
  return pgRefuse(anycclPluginCheckDevices(*n, why, sizeof(why)), why);
}

static ncclResult_t pgGetProperties(int dev, anycclNetProperties* p) {
  anycclPluginProps_v8 v;
  memset(&v, 0, sizeof(v));
  NCCLCHECK(plug->getProperties(dev, &v));
  char why[160];
  return pgRefuse(anycclPluginCheckProps(&v, p, why, sizeof(why)), why);
}

static ncclResult_t pgListen(int dev, void* handle, void** listenComm, volatile uint32_t* abortFlag) {
  (void)abortFlag;
  memset(handle, 0, ANYCCL_NET_HANDLE_MAXSIZE);
  return plug->listen(dev, handle, listenComm);
}

/* Plugins connect and accept without blocking: call until a comm comes, up
 * to the bootstrap's bound, watching the abort flag. */
static ncclResult_t pgConnect(int dev, const void* handle, void** sendComm, volatile uint32_t* abortFlag) {
  char h[ANYCCL_NET_HANDLE_MAXSIZE];
  memcpy(h, handle, sizeof(h));
  int64_t deadline = ncclSocketDeadlineMs(bootstrapTimeoutMs());
  *sendComm = NULL;
  for (;;) {
    void* dev_comm = NULL;
    NCCLCHECK(plug->connect(dev, h, sendComm, &dev_comm));
    if (*sendComm) return ncclSuccess;
    if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE)) return ncclInternalError;
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("NET/Plugin %s: connect did not complete within ANYCCL_BOOTSTRAP_TIMEOUT", plugName);
      return ncclSystemError;
    }
    usleep(100);
  }
}

static ncclResult_t pgAccept(void* listenComm, void** recvComm) {
  int64_t deadline = ncclSocketDeadlineMs(bootstrapTimeoutMs());
  *recvComm = NULL;
  for (;;) {
    void* dev_comm = NULL;
    NCCLCHECK(plug->accept(listenComm, recvComm, &dev_comm));
    if (*recvComm) return ncclSuccess;
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("NET/Plugin %s: accept did not complete within ANYCCL_BOOTSTRAP_TIMEOUT", plugName);
      return ncclSystemError;
    }
    usleep(100);
  }
}

static ncclResult_t pgRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)type;
  return plug->regMr(comm, data, size, NCCL_PLUGIN_PTR_HOST, mhandle);
}
static ncclResult_t pgDeregMr(void* comm, void* mhandle) { return plug->deregMr(comm, mhandle); }

static ncclResult_t pgIsend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (size > INT32_MAX) {
    WARN("NET/Plugin %s: a message of %zu bytes is over the ABI's int (lower NCCL_BUFFSIZE)", plugName, size);
    return ncclInternalError;
  }
  return plug->isend(comm, data, (int)size, tag, mhandle, request);
}

static ncclResult_t pgIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  int isz[8];
  if (n < 1 || n > 8) return ncclInternalError;
  for (int i = 0; i < n; i++) isz[i] = sizes[i] > INT32_MAX ? INT32_MAX : (int)sizes[i];
  return plug->irecv(comm, n, data, isz, tags, mhandles, request);
}

static ncclResult_t pgTest(void* request, int* done, size_t* sizes) {
  int s = 0, d = 0;
  char why[160];
  NCCLCHECK(plug->test(request, &d, &s));
  return pgRefuse(anycclPluginCheckTest(d, s, done, sizes, why, sizeof(why)), why);
}

static ncclResult_t pgCloseSend(void* c) { return plug->closeSend(c); }
static ncclResult_t pgCloseRecv(void* c) { return plug->closeRecv(c); }
static ncclResult_t pgCloseListen(void* c) { return plug->closeListen(c); }

static anycclNet_t pluginTable = {plugName,  pgInit,      pgDevices,   pgGetProperties, pgListen,      pgConnect,
                                  pgAccept,  pgRegMr,     pgDeregMr,   pgIsend,         pgIrecv,       pgTest,
                                  pgCloseSend, pgCloseRecv, pgCloseListen, NULL, NULL /* testTag */, NULL /* pollFds */};

static const anycclNet_t* loaded;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;

static void load(void) {
  const char* name = anycclParamStr(PARAM_NET_PLUGIN);
  if (name == NULL || name[0] == 0 || strcmp(name, "none") == 0) return;
  char lib[512];
  if (strstr(name, ".so") || strchr(name, '/')) snprintf(lib, sizeof(lib), "%s", name);
  else snprintf(lib, sizeof(lib), "libnccl-net-%s.so", name);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    WARN("NET/Plugin: cannot load %s (NCCL_NET_PLUGIN=%s): %s; using the built-in network", lib, name, dlerror());
    return;
  }
  const anycclPluginNet_v8* t = dlsym(h, NCCL_PLUGIN_SYMBOL_V8);
  if (t == NULL) {
    char others[128] = "";
    static const char* const syms[] = {"ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9", "ncclNetPlugin_v7",
                                       "ncclNetPlugin_v6", "ncclNetPlugin_v5"};
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
      if (dlsym(h, syms[i]))
        snprintf(others + strlen(others), sizeof(others) - strlen(others), "%s%s", others[0] ? ", " : "", syms[i]);
    WARN("NET/Plugin: %s has no %s (anyccl loads version 8; the library exports %s); using the built-in network", lib,
         NCCL_PLUGIN_SYMBOL_V8, others[0] ? others : "no ncclNetPlugin_v* symbol");
    dlclose(h);
    return;
  }
  snprintf(plugName, sizeof(plugName), "%s", t->name ? t->name : name);
  plug = t;
  if (t->init(pluginLog) != ncclSuccess) {
    WARN("NET/Plugin: %s (%s) failed to initialise; using the built-in network", lib, NCCL_PLUGIN_SYMBOL_V8);
    plug = NULL;
    return;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: loaded %s (%s, \"%s\")", lib, NCCL_PLUGIN_SYMBOL_V8, plugName);
  loaded = &pluginTable;
}

const anycclNet_t* anycclNetPlugin(void) {
  pthread_once(&loadOnce, load);
  return loaded;
}
