/* NCCL_NET_PLUGIN: an external network plugin (NCCL's ABI, versions 7 to
 * 11, net_plugin.h) under anyccl's network table, so that the collectives'
 * transport and the one-sided layer run over it.
 *
 * NCCL_NET_PLUGIN=name loads libnccl-net-<name>.so (a value with ".so" or
 * a '/' is the file itself), as NCCL does; "none" (or unset) keeps the
 * built-in table. The table is the newest the library exports, searched as
 * NCCL does: ncclNetPlugin_v11, v10, v9, v8, v7. A library that cannot be
 * loaded, exports none of them (the WARN names the file, the symbols
 * searched and the ncclNetPlugin_v* it does export), whose table lacks a
 * function anyccl calls (the WARN names the symbol and the member), or
 * that fails init is reported once, and anyccl carries on with its
 * built-in table, as NCCL falls back to its internal ones. Plugin tables
 * have no completion notification: the proxy polls them while busy. */
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

/* the loaded table: one of the five shapes, by version */
static int ver;
static union {
  const void* any;
  const anycclPluginNet_v7* v7;
  const anycclPluginNet_v8* v8;
  const anycclPluginNet_v9* v9;
  const anycclPluginNet_v10* v10;
  const anycclPluginNet_v11* v11;
} plug;
static void* plugCtx; /* v11: the context init gave */
static char plugName[64];
static char plugSym[24];

/* a member common to every version (same offset in v7..v11 up to irecvConsumed) */
#define PL(member) (plug.v8->member)

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
  NCCLCHECK(PL(devices)(n));
  return pgRefuse(anycclPluginCheckDevices(*n, why, sizeof(why)), why);
}

static ncclResult_t pgGetProperties(int dev, anycclNetProperties* p) {
  union {
    anycclPluginProps_v7 v7;
    anycclPluginProps_v8 v8;
    anycclPluginProps_v9 v9;
    anycclPluginProps_v11 v11;
  } u;
  memset(&u, 0, sizeof(u));
  const char *name, *pci;
  uint64_t guid;
  int speed, port, maxComms;
  float latency;
  switch (ver) {
#define PROPS(V, field)                                                                                 \
  NCCLCHECK(plug.V->getProperties(dev, (void*)&u.field));                                                      \
  name = u.field.name, pci = u.field.pciPath, guid = u.field.guid, speed = u.field.speed, port = u.field.port, \
  latency = u.field.latency, maxComms = u.field.maxComms;                                               \
  break
    case 7: PROPS(v7, v7);
    case 8: PROPS(v8, v8);
    case 9: PROPS(v9, v9);
    case 10: PROPS(v10, v9);
    default: PROPS(v11, v11.base);
#undef PROPS
  }
  /* every version's answer checked as one (net_plugin_check.c) */
  anycclPluginProps_v8 v;
  memset(&v, 0, sizeof(v));
  v.name = (char*)name;
  v.pciPath = (char*)pci;
  v.guid = guid;
  v.speed = speed;
  v.port = port;
  v.latency = latency;
  v.maxComms = maxComms;
  char why[160];
  return pgRefuse(anycclPluginCheckProps(&v, p, why, sizeof(why)), why);
}

static ncclResult_t pgListen(int dev, void* handle, void** listenComm, volatile uint32_t* abortFlag) {
  (void)abortFlag;
  memset(handle, 0, ANYCCL_NET_HANDLE_MAXSIZE);
  return ver == 11 ? plug.v11->listen(plugCtx, dev, handle, listenComm) : PL(listen)(dev, handle, listenComm);
}

static ncclResult_t connectOnce(int dev, void* h, void** sendComm) {
  anycclPluginDev* devComm = NULL;
  anycclPluginCommConfig cfg = {NCCL_PLUGIN_TRAFFIC_CLASS_UNDEF};
  switch (ver) {
    case 7: return plug.v7->connect(dev, h, sendComm, &devComm);
    case 8: return plug.v8->connect(dev, h, sendComm, &devComm);
    case 9: return plug.v9->connect(dev, h, sendComm, &devComm);
    case 10: return plug.v10->connect(dev, &cfg, h, sendComm, &devComm);
    default: return plug.v11->connect(plugCtx, dev, h, sendComm, &devComm);
  }
}

/* Plugins connect and accept without blocking: call until a comm comes, up
 * to the bootstrap's bound, watching the abort flag. */
static ncclResult_t pgConnect(int dev, const void* handle, void** sendComm, volatile uint32_t* abortFlag) {
  char h[ANYCCL_NET_HANDLE_MAXSIZE];
  memcpy(h, handle, sizeof(h));
  int64_t deadline = ncclSocketDeadlineMs(bootstrapTimeoutMs());
  *sendComm = NULL;
  for (;;) {
    NCCLCHECK(connectOnce(dev, h, sendComm));
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
    anycclPluginDev* devComm = NULL;
    NCCLCHECK(PL(accept)(listenComm, recvComm, &devComm));
    if (*recvComm) return ncclSuccess;
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("NET/Plugin %s: accept did not complete within ANYCCL_BOOTSTRAP_TIMEOUT", plugName);
      return ncclSystemError;
    }
    usleep(100);
  }
}

/* One attempt each (anycclNetConnectAll steps them in turn). */
/* The same handle buffer on every step of one connect: NCCL passes it so,
 * and plugins keep the connect's progress in it (aws-ofi-nccl; a fresh copy
 * each time starts a new connection attempt, and resources run out). */
static ncclResult_t pgConnectStep(int dev, void* handle, void** sendComm) {
  *sendComm = NULL;
  return connectOnce(dev, handle, sendComm);
}
static ncclResult_t pgAcceptStep(void* listenComm, void** recvComm) {
  anycclPluginDev* devComm = NULL;
  *recvComm = NULL;
  return PL(accept)(listenComm, recvComm, &devComm);
}

static ncclResult_t pgRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)type;
  if (ver == 7) {
    if (size > INT32_MAX) {
      WARN("NET/Plugin %s: %zu bytes to register are over version 7's int (lower NCCL_BUFFSIZE)", plugName, size);
      return ncclInternalError;
    }
    return plug.v7->regMr(comm, data, (int)size, NCCL_PLUGIN_PTR_HOST, mhandle);
  }
  return PL(regMr)(comm, data, size, NCCL_PLUGIN_PTR_HOST, mhandle);
}
static ncclResult_t pgDeregMr(void* comm, void* mhandle) { return PL(deregMr)(comm, mhandle); }

static ncclResult_t pgIsend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (ver >= 9) {
    if (ver == 9) return plug.v9->isend(comm, data, size, tag, mhandle, request);
    return (ver == 10 ? plug.v10->isend : plug.v11->isend)(comm, data, size, tag, mhandle, NULL, request);
  }
  if (size > INT32_MAX) {
    WARN("NET/Plugin %s: a message of %zu bytes is over the ABI's int (lower NCCL_BUFFSIZE)", plugName, size);
    return ncclInternalError;
  }
  return PL(isend)(comm, data, (int)size, tag, mhandle, request);
}

static ncclResult_t pgIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  if (n < 1 || n > 8) return ncclInternalError;
  if (ver >= 9) {
    void* ph[8] = {0};
    if (ver == 9) return plug.v9->irecv(comm, n, data, sizes, tags, mhandles, request);
    return (ver == 10 ? plug.v10->irecv : plug.v11->irecv)(comm, n, data, sizes, tags, mhandles, ph, request);
  }
  int isz[8];
  for (int i = 0; i < n; i++) isz[i] = sizes[i] > INT32_MAX ? INT32_MAX : (int)sizes[i];
  return PL(irecv)(comm, n, data, isz, tags, mhandles, request);
}

static ncclResult_t pgTest(void* request, int* done, size_t* sizes) {
  int s = 0, d = 0;
  char why[160];
  NCCLCHECK(PL(test)(request, &d, &s));
  return pgRefuse(anycclPluginCheckTest(d, s, done, sizes, why, sizeof(why)), why);
}

static ncclResult_t pgCloseSend(void* c) { return PL(closeSend)(c); }
static ncclResult_t pgCloseRecv(void* c) { return PL(closeRecv)(c); }
static ncclResult_t pgCloseListen(void* c) { return PL(closeListen)(c); }

static anycclNet_t pluginTable = {plugName,  pgInit,      pgDevices,   pgGetProperties, pgListen,      pgConnect,
                                  pgAccept,  pgRegMr,     pgDeregMr,   pgIsend,         pgIrecv,       pgTest,
                                  pgCloseSend, pgCloseRecv, pgCloseListen, NULL, NULL /* testTag */, NULL /* pollFds */,
                                  NULL /* setPick */, pgConnectStep, pgAcceptStep};

static const anycclNet_t* loaded;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;

/* NCCL's search order: the newest version first */
static const int versions[] = {11, 10, 9, 8, 7};

/* The first function anyccl calls that the table lacks (NULL: none). The
 * members up to closeListen sit at the same place in every version. */
static const char* missingMember(void) {
  const anycclPluginNet_v8* t = plug.v8;
  if (t->init == NULL) return "init";
  if (t->devices == NULL) return "devices";
  if (t->getProperties == NULL) return "getProperties";
  if (t->listen == NULL) return "listen";
  if (t->connect == NULL) return "connect";
  if (t->accept == NULL) return "accept";
  if (t->regMr == NULL) return "regMr";
  if (t->deregMr == NULL) return "deregMr";
  if (t->isend == NULL) return "isend";
  if (t->irecv == NULL) return "irecv";
  if (t->test == NULL) return "test";
  if (t->closeSend == NULL) return "closeSend";
  if (t->closeRecv == NULL) return "closeRecv";
  if (t->closeListen == NULL) return "closeListen";
  return NULL;
}

static ncclResult_t initPlugin(void) {
  switch (ver) {
    case 7: return plug.v7->init(pluginLog);
    case 8: return plug.v8->init(pluginLog);
    case 9: return plug.v9->init(pluginLog);
    case 10: return plug.v10->init(pluginLog, NULL);
    default: {
      anycclPluginCommConfig cfg = {NCCL_PLUGIN_TRAFFIC_CLASS_UNDEF};
      /* one context for the process: anyccl's network table is process-wide */
      return plug.v11->init(&plugCtx, (uint64_t)getpid(), &cfg, pluginLog, NULL);
    }
  }
}

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
  for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && plug.any == NULL; i++) {
    snprintf(plugSym, sizeof(plugSym), "ncclNetPlugin_v%d", versions[i]);
    if ((plug.any = dlsym(h, plugSym)) != NULL) ver = versions[i];
  }
  if (plug.any == NULL) {
    char others[160] = "";
    for (int v = 1; v <= 16; v++) {
      char sym[24];
      snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
      if (v >= 7 && v <= 11) continue;
      if (dlsym(h, sym))
        snprintf(others + strlen(others), sizeof(others) - strlen(others), "%s%s", others[0] ? ", " : "", sym);
    }
    WARN("NET/Plugin: %s has no ncclNetPlugin_v11, _v10, _v9, _v8 or _v7 (the versions anyccl loads); the library "
         "exports %s; using the built-in network", lib, others[0] ? others : "no ncclNetPlugin_v* symbol");
    dlclose(h);
    return;
  }
  const char* missing = missingMember();
  if (missing) {
    WARN("NET/Plugin: %s: %s has no %s (a NULL function); using the built-in network", lib, plugSym, missing);
    plug.any = NULL;
    dlclose(h);
    return;
  }
  snprintf(plugName, sizeof(plugName), "%s", plug.v8->name ? plug.v8->name : name);
  if (initPlugin() != ncclSuccess) {
    WARN("NET/Plugin: %s (%s) failed to initialise; using the built-in network", lib, plugSym);
    plug.any = NULL;
    return;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: loaded %s (%s, \"%s\")", lib, plugSym, plugName);
  loaded = &pluginTable;
}

const anycclNet_t* anycclNetPlugin(void) {
  pthread_once(&loadOnce, load);
  return loaded;
}
