/* The P2P engine's API: endpoints (NIC choice from the topology), listen /
 * connect / accept with a handle passed out of band, memory registration,
 * requests. The moving of bytes is p2p_progress.c's. See p2p_int.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "checks.h"
#include "net.h"
#include "debug.h"
#include "p2p_int.h"
#include "rt.h"
#include "param.h"
#include "topo.h"
#include "bootstrap.h"

#define HELLO_MS 2000 /* a connecting socket must say hello within this */


static uint64_t randomU64(void) {
  uint64_t v;
  if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = (uint64_t)ncclSocketClockMs() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
  return v;
}

/* ---- NIC choice ------------------------------------------------------------------ */
/* The topology's NIC nearest to device dev (best path, then bandwidth), and
 * how many devices have it as theirs. */
static int topoNic(int dev, char* name, size_t len, int* sharing) {
  const char* file = anycclParamStr(PARAM_TOPO_FILE);
  if (file == NULL || file[0] == 0 || dev < 0) return 0;
  struct anycclTopo* topo = NULL;
  char err[ANYCCL_TOPO_ERR_LEN];
  if (anycclTopoLoadHost(file, anycclParamStr(PARAM_HOSTID), &topo, err, sizeof(err)) != ncclSuccess) {
    INFO(NCCL_NET, "P2P: topology %s unusable for the NIC choice: %s", file, err);
    return 0;
  }
  struct anycclTopoHost* h = &topo->hosts[0];
  int found = 0, best = -1;
  for (int g = 0; g < h->nGpus && h->nNets > 0; g++) {
    int nic = 0;
    for (int n = 1; n < h->nNets; n++) {
      struct anycclTopoPath a = anycclTopoNetPath(h, g, n), b = anycclTopoNetPath(h, g, nic);
      if (a.type < b.type || (a.type == b.type && a.bw > b.bw)) nic = n;
    }
    if (h->gpus[g].node->gpu.dev == dev) best = nic;
    (void)nic;
  }
  if (best >= 0) {
    *sharing = 0;
    for (int g = 0; g < h->nGpus; g++) {
      int nic = 0;
      for (int n = 1; n < h->nNets; n++) {
        struct anycclTopoPath a = anycclTopoNetPath(h, g, n), b = anycclTopoNetPath(h, g, nic);
        if (a.type < b.type || (a.type == b.type && a.bw > b.bw)) nic = n;
      }
      *sharing += nic == best;
    }
    snprintf(name, len, "%s", h->nets[best].node->net.name ? h->nets[best].node->net.name : "");
    found = name[0] != 0;
  }
  anycclTopoFree(topo);
  return found;
}

static ncclResult_t chooseIfs(struct anycclP2pEndpoint* ep, const char* ifname) {
  const char* spec = ifname ? ifname : anycclParamStr(PARAM_P2P_IFNAME);
  int sharing = 1;
  int haveTopo = topoNic(ep->device, ep->topoNic, sizeof(ep->topoNic), &sharing);
  if (ep->channels <= 0) ep->channels = haveTopo ? (8 / (sharing > 0 ? sharing : 1) > 0 ? 8 / sharing : 1) : 4;
  char names[P2P_MAX_IFS * NCCL_SOCKET_IFNAME_MAXLEN];
  if (spec && spec[0]) {
    char list[256];
    snprintf(list, sizeof(list), "%s", spec);
    char* save = NULL;
    for (char* tok = strtok_r(list, ",", &save); tok && ep->nifs < P2P_MAX_IFS; tok = strtok_r(NULL, ",", &save)) {
      char exact[NCCL_SOCKET_IFNAME_MAXLEN + 2];
      snprintf(exact, sizeof(exact), "=%s", tok);
      if (ncclSocketFindInterfacesSpec(exact, ncclSocketFamilyParam(), names, &ep->ifAddrs[ep->nifs], 1) != 1) {
        WARN("P2P: interface \"%s\" (%s) is not up or has no address; name interfaces that exist", tok,
             ifname ? "config.ifname" : "ANYCCL_P2P_IFNAME");
        return ncclInvalidArgument;
      }
      snprintf(ep->ifNames[ep->nifs++], NCCL_SOCKET_IFNAME_MAXLEN, "%s", tok);
    }
    return ncclSuccess;
  }
  if (haveTopo) {
    char exact[NCCL_SOCKET_IFNAME_MAXLEN + 2];
    snprintf(exact, sizeof(exact), "=%s", ep->topoNic);
    if (ncclSocketFindInterfacesSpec(exact, ncclSocketFamilyParam(), names, &ep->ifAddrs[0], 1) == 1) {
      snprintf(ep->ifNames[0], NCCL_SOCKET_IFNAME_MAXLEN, "%s", ep->topoNic);
      ep->nifs = 1;
      return ncclSuccess;
    }
    INFO(NCCL_NET, "P2P: device %d's NIC in the topology is %s, which is not an interface here; using "
                   "NCCL_SOCKET_IFNAME's choice", ep->device, ep->topoNic);
  }
  if (ncclSocketFindInterfaces(names, &ep->ifAddrs[0], 1) != 1) {
    WARN("P2P: no usable network interface (check ANYCCL_P2P_IFNAME / NCCL_SOCKET_IFNAME)");
    return ncclSystemError;
  }
  snprintf(ep->ifNames[0], NCCL_SOCKET_IFNAME_MAXLEN, "%.*s", NCCL_SOCKET_IFNAME_MAXLEN - 1, names);
  ep->nifs = 1;
  return ncclSuccess;
}

/* ---- endpoints ---------------------------------------------------------------------- */
P2P_API ncclResult_t anycclP2pEndpointCreate(int device, const anycclP2pConfig_t* cfg, anycclP2pEndpoint_t* out) {
  const char* fn = "anycclP2pEndpointCreate";
  ARGCHECK(out != NULL, fn, "ep is NULL; pass the address of an anycclP2pEndpoint_t");
  *out = NULL;
  anycclP2pConfig_t c = ANYCCL_P2P_CONFIG_INITIALIZER;
  if (cfg) c = *cfg;
  ARGCHECK(device >= -1, fn, "device %d is invalid; pass a device index or -1", device);
  ARGCHECK(c.channels >= 0 && c.channels <= ANYCCL_P2P_MAX_CHANNELS, fn,
           "config.channels %d is out of range; pass 0 (default) or 1..%d", c.channels, ANYCCL_P2P_MAX_CHANNELS);
  ARGCHECK(c.window >= 0 && c.window <= 1024, fn, "config.window %d is out of range; pass 0 (default) or 1..1024",
           c.window);
  ARGCHECK(c.chunkBytes == 0 || (c.chunkBytes >= 4096 && c.chunkBytes <= (1u << 30)), fn,
           "config.chunkBytes %zu is out of range; pass 0 (default) or 4096..1 GiB", c.chunkBytes);
  ARGCHECK(c.timeoutSec >= 0, fn, "config.timeoutSec %d is negative; pass 0 (ANYCCL_OP_TIMEOUT) or seconds",
           c.timeoutSec);
  struct anycclP2pEndpoint* ep;
  ANYCCL_CALLOC(ep, 1);
  ep->device = device;
  ep->bounce = p2pBounceMode();
  ep->channels = c.channels ? c.channels : (int)anycclParamInt(PARAM_P2P_CHANNELS);
  if (ep->channels > ANYCCL_P2P_MAX_CHANNELS) ep->channels = ANYCCL_P2P_MAX_CHANNELS;
  ep->window = c.window ? c.window : (int)anycclParamInt(PARAM_P2P_WINDOW);
  if (ep->window < 1) ep->window = 1;
  if (ep->window > 1024) ep->window = 1024;
  int64_t chunk = c.chunkBytes ? (int64_t)c.chunkBytes : anycclParamInt(PARAM_P2P_CHUNK);
  ep->chunk = chunk < 4096 ? 4096 : chunk > (1 << 30) ? (1 << 30) : (size_t)chunk;
  int64_t t = c.timeoutSec ? c.timeoutSec : anycclParamInt(PARAM_OP_TIMEOUT);
  ep->timeoutMs = t > 0 ? t * 1000 : -1;
  ep->nextKey = (randomU64() & 0xffffffff00000000ULL) | 1;
  int bad = p2pPlugChoose(c.net, &ep->net);
  if (bad) {
    free(ep);
    return bad == 1 ? ncclInvalidArgument : ncclInvalidUsage;
  }
  pthread_mutex_init(&ep->lock, NULL);
  for (int i = 0; i < P2P_MAX_IFS; i++) ncclSocketInit(&ep->lsock[i], NULL, NULL);
  if (ep->net && c.ifname) INFO(NCCL_NET, "P2P: config.ifname %s is not used over net plugin %s (it picks its NIC)", c.ifname, ep->net->name);
  ncclResult_t res = ep->net ? p2pPlugEndpointInit(ep) : chooseIfs(ep, c.ifname);
  if (res != ncclSuccess) {
    pthread_mutex_destroy(&ep->lock);
    free(ep);
    return res;
  }
  for (int i = 0; i < ep->nifs && ep->net == NULL; i++) {
    char buf[NCCL_SOCKET_NAME_MAXLEN];
    INFO(NCCL_INIT | NCCL_NET, "P2P: endpoint of device %d: NIC %d %s (%s)%s%s, %d channels, chunk %zu, window %d",
         device, i, ep->ifNames[i], ncclSocketIpToString(&ep->ifAddrs[i], buf), ep->topoNic[0] ? ", topology NIC " : "",
         ep->topoNic, ep->channels, ep->chunk, ep->window);
  }
  *out = ep;
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pEndpointGetInfo(anycclP2pEndpoint_t ep, anycclP2pEndpointInfo_t* info) {
  const char* fn = "anycclP2pEndpointGetInfo";
  ARGCHECK(ep != NULL && info != NULL, fn, "ep or info is NULL");
  memset(info, 0, sizeof(*info));
  info->channels = ep->channels;
  snprintf(info->topoNic, sizeof(info->topoNic), "%s", ep->topoNic);
  info->nifs = ep->nifs;
  for (int i = 0; i < ep->nifs; i++) snprintf(info->ifNames[i], sizeof(info->ifNames[i]), "%s", ep->ifNames[i]);
  return ncclSuccess;
}


P2P_API ncclResult_t anycclP2pEndpointDestroy(anycclP2pEndpoint_t ep) {
  if (ep == NULL) return ncclSuccess;
  while (ep->conns) anycclP2pClose(ep->conns);
  for (int i = 0; i < P2P_MAX_IFS; i++) ncclSocketClose(&ep->lsock[i]);
  p2pPlugEndpointFree(ep);
  while (ep->pending) {
    struct p2pPending* p = ep->pending;
    ep->pending = p->next;
    for (int k = 0; k < p->hello.nchannels; k++) ncclSocketClose(&p->socks[k]);
    free(p->socks);
    free(p);
  }
  while (ep->mrs) {
    struct anycclP2pMr* m = ep->mrs;
    ep->mrs = m->next;
    free(m);
  }
  pthread_mutex_destroy(&ep->lock);
  free(ep);
  return ncclSuccess;
}

/* ---- memory ---------------------------------------------------------------------------- */
P2P_API ncclResult_t anycclP2pRegMr(anycclP2pEndpoint_t ep, void* ptr, size_t size, anycclP2pMr_t* out) {
  const char* fn = "anycclP2pRegMr";
  ARGCHECK(ep != NULL && out != NULL, fn, "ep or mr is NULL");
  ARGCHECK(ptr != NULL || size == 0, fn, "ptr is NULL for %zu bytes; register a buffer", size);
  const struct anycclRtCopy* rt;
  int bounce = ep->bounce == 2 && size > 0;
  if (ep->bounce == 1 && size > 0 && anycclRtCopyOps(&rt) == ncclSuccess) bounce = rt->isDevice(ptr);
  struct anycclP2pMr* m;
  ANYCCL_CALLOC(m, 1);
  m->bounce = bounce;
  m->ep = ep;
  m->ptr = ptr;
  m->size = size;
  pthread_mutex_lock(&ep->lock);
  m->key = ep->nextKey++;
  m->next = ep->mrs;
  ep->mrs = m;
  __atomic_add_fetch(&ep->nmrs, 1, __ATOMIC_ACQ_REL);
  /* the connections' progress threads serve the peer's writes and reads from now on */
  for (struct anycclP2pConn* c = ep->conns; c; c = c->epNext) p2pWatch(c);
  pthread_mutex_unlock(&ep->lock);
  *out = m;
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pMrGetDesc(anycclP2pMr_t mr, anycclP2pMrDesc_t* desc) {
  const char* fn = "anycclP2pMrGetDesc";
  ARGCHECK(mr != NULL && desc != NULL, fn, "mr or desc is NULL");
  desc->key = mr->key;
  desc->addr = (uint64_t)(uintptr_t)mr->ptr;
  desc->size = mr->size;
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pDeregMr(anycclP2pMr_t mr) {
  if (mr == NULL) return ncclSuccess;
  struct anycclP2pEndpoint* ep = mr->ep;
  pthread_mutex_lock(&ep->lock);
  struct anycclP2pMr** pp = &ep->mrs;
  while (*pp && *pp != mr) pp = &(*pp)->next;
  int found = *pp != NULL;
  if (found) *pp = mr->next;
  pthread_mutex_unlock(&ep->lock);
  if (!found) {
    WARN("anycclP2pDeregMr: mr %p is not registered with its endpoint (deregistered twice?)", (void*)mr);
    return ncclInvalidArgument;
  }
  free(mr);
  return ncclSuccess;
}

char* p2pMrLookup(struct anycclP2pEndpoint* ep, uint64_t key, uint64_t off, uint64_t len, int* bounce) {
  char* p = NULL;
  *bounce = 0;
  pthread_mutex_lock(&ep->lock);
  for (struct anycclP2pMr* m = ep->mrs; m; m = m->next)
    if (m->key == key) {
      if (off <= m->size && len <= m->size - off) p = m->ptr + off, *bounce = m->bounce;
      break;
    }
  pthread_mutex_unlock(&ep->lock);
  return p;
}

/* ---- connections -------------------------------------------------------------------------- */
struct anycclP2pConn* p2pConnNew(struct anycclP2pEndpoint* ep, int nch, size_t chunk, int window) {
  struct anycclP2pConn* c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->ch = calloc((size_t)nch, sizeof(*c->ch));
  if (c->ch == NULL) {
    free(c);
    return NULL;
  }
  c->ep = ep;
  c->nch = nch;
  c->chunk = chunk;
  c->window = window;
  c->unexpMax = window;
  c->timeoutMs = ep->timeoutMs;
  c->wakeFd = -1;
  c->notifyFd = -1;
  c->nextId = 1;
  for (int k = 0; k < nch; k++) {
    ncclSocketInit(&c->ch[k].sock, NULL, NULL);
    c->ch[k].readable = 1;
    c->ch[k].rbidx = -1;
    if ((c->ch[k].sbuf = malloc(P2P_STAGE_BYTES)) == NULL) {
      while (k-- > 0) free(c->ch[k].sbuf);
      free(c->ch);
      free(c);
      return NULL;
    }
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->cv, NULL);
  return c;
}


static ncclResult_t connStart(struct anycclP2pEndpoint* ep, struct anycclP2pConn* c, const char* role) {
  for (int k = 0; k < c->nch && c->pch == NULL; k++) {
    netSetLiveness(&c->ch[k].sock);
    char buf[NCCL_SOCKET_NAME_MAXLEN];
    INFO(NCCL_NET, "P2P: %s channel %d -> NIC %s, peer %s", role, k, ep->ifNames[c->ch[k].ifIndex],
         ncclSocketToString(&c->ch[k].sock.addr, buf));
  }
  ncclResult_t res = p2pConnStart(c);
  if (res != ncclSuccess) return res;
  pthread_mutex_lock(&ep->lock);
  c->epNext = ep->conns;
  if (ep->conns) ep->conns->epPrev = c;
  ep->conns = c;
  pthread_mutex_unlock(&ep->lock);
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pListen(anycclP2pEndpoint_t ep, anycclP2pHandle_t* handle) {
  const char* fn = "anycclP2pListen";
  ARGCHECK(ep != NULL && handle != NULL, fn, "ep or handle is NULL");
  ARGCHECK(!ep->listening, fn, "the endpoint listens already; pass the handle it gave to every peer");
  ep->cookie = randomU64();
  if (ep->net) {
    NCCLCHECK(p2pPlugListen(ep, handle));
    ep->listening = 1;
    return ncclSuccess;
  }
  struct p2pWireHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = P2P_HANDLE_MAGIC;
  h.cookie = ep->cookie;
  for (int i = 0; i < ep->nifs; i++) {
    union ncclSocketAddress a = ep->ifAddrs[i];
    ncclSocketAddrSetPort(&a, 0);
    NCCLCHECK(ncclSocketListen(&ep->lsock[i], &a, 0));
    h.addrs[h.naddrs++] = ep->lsock[i].addr;
  }
  ep->listening = 1;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->bytes, &h, sizeof(h));
  return ncclSuccess;
}

/* A handle of an endpoint over a net plugin, or a connect from one. */
static ncclResult_t plugConnect(anycclP2pEndpoint_t ep, const anycclP2pHandle_t* handle, anycclP2pConn_t* out,
                                int64_t timeoutMs) {
  const char* fn = "anycclP2pConnect";
  struct p2pPlugWireHandle h;
  char why[160];
  if (p2pParsePlugHandle(handle->bytes, sizeof(handle->bytes), &h, why, sizeof(why)) != ncclSuccess) {
    struct p2pWireHandle sh;
    ARGCHECK(p2pParseHandle(handle->bytes, sizeof(handle->bytes), &sh, why, sizeof(why)) != ncclSuccess, fn,
             "the handle comes from an endpoint on the built-in sockets and this one runs over net plugin %s; use "
             "the same network on both sides (config.net, ANYCCL_P2P_NET, NCCL_NET_PLUGIN)", ep->net->name);
    ARGCHECK(0, fn, "the handle is %s; pass the listener's bytes intact", why);
  }
  ARGCHECK(ep->net != NULL, fn, "the handle comes from an endpoint over net plugin %.32s and this one runs on the built-in "
           "sockets; use the same network on both sides (config.net, ANYCCL_P2P_NET, NCCL_NET_PLUGIN)", h.net);
  ARGCHECK(strncmp(h.net, ep->net->name, sizeof(h.net)) == 0, fn, "the handle comes from an endpoint over net plugin "
           "%.32s and this one runs over %s; load the same plugin on both sides (NCCL_NET_PLUGIN)", h.net, ep->net->name);
  struct anycclP2pConn* c = p2pConnNew(ep, ep->channels, ep->chunk, ep->window);
  if (c == NULL) return ncclSystemError;
  ncclResult_t res = p2pPlugConnect(ep, handle, c, timeoutMs > 0 ? timeoutMs : bootstrapTimeoutMs());
  if (res == ncclSuccess) res = connStart(ep, c, "connect");
  if (res != ncclSuccess) {
    p2pConnFree(c);
    return res;
  }
  *out = c;
  return ncclSuccess;
}

static int aborted(volatile uint32_t* abortFlag) { return abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE); }

P2P_API ncclResult_t anycclP2pConnect(anycclP2pEndpoint_t ep, const anycclP2pHandle_t* handle, anycclP2pConn_t* out) {
  return p2pConnectEx(ep, handle, out, ep ? ep->timeoutMs : -1, NULL, "ANYCCL_OP_TIMEOUT / config.timeoutSec");
}

ncclResult_t p2pConnectEx(anycclP2pEndpoint_t ep, const anycclP2pHandle_t* handle, anycclP2pConn_t* out,
                          int64_t timeoutMs, volatile uint32_t* abortFlag, const char* timeoutName) {
  const char* fn = "anycclP2pConnect";
  ARGCHECK(ep != NULL && handle != NULL && out != NULL, fn, "ep, handle or conn is NULL");
  *out = NULL;
  uint64_t magic;
  memcpy(&magic, handle->bytes, sizeof(magic));
  if (magic == P2P_PHANDLE_MAGIC || ep->net) return plugConnect(ep, handle, out, timeoutMs);
  struct p2pWireHandle h;
  char why[160];
  ARGCHECK(p2pParseHandle(handle->bytes, sizeof(handle->bytes), &h, why, sizeof(why)) == ncclSuccess, fn,
           "the handle is %s; pass the listener's bytes intact", why);
  struct anycclP2pConn* c = p2pConnNew(ep, ep->channels, ep->chunk, ep->window);
  if (c == NULL) return ncclSystemError;
  uint64_t connId = randomU64();
  int64_t deadline = ncclSocketDeadlineMs(timeoutMs);
  ncclResult_t res = ncclSuccess;
  char hint[160];
  snprintf(hint, sizeof(hint), "check that the peer listens, ANYCCL_P2P_IFNAME / NCCL_SOCKET_IFNAME and %s", timeoutName);
  for (int k = 0; k < c->nch && res == ncclSuccess; k++) {
    c->ch[k].ifIndex = k % ep->nifs;
    c->ch[k].sock.abortFlag = abortFlag; /* while connecting only: the channels never block afterwards */
    res = ncclSocketConnect(&c->ch[k].sock, &h.addrs[k % h.naddrs], deadline, "P2P peer", hint);
    struct p2pHello hi = {P2P_HANDLE_MAGIC, h.cookie, connId, k, c->nch, c->chunk, c->window, 0};
    if (res == ncclSuccess) res = ncclSocketSend(&c->ch[k].sock, &hi, sizeof(hi), deadline);
    c->ch[k].sock.abortFlag = NULL;
  }
  if (res != ncclSuccess && aborted(abortFlag)) INFO(NCCL_NET, "P2P: connect aborted (the abort flag is set)");
  if (res == ncclSuccess) res = connStart(ep, c, "connect");
  if (res != ncclSuccess) {
    p2pConnFree(c);
    return res;
  }
  *out = c;
  return ncclSuccess;
}

/* One socket from a listener: its hello joins a pending connection; a
 * complete one is returned. Junk is closed. */
static struct anycclP2pConn* acceptOne(struct anycclP2pEndpoint* ep, struct ncclSocket* s, int ifIndex) {
  struct p2pHello hi;
  char buf[NCCL_SOCKET_NAME_MAXLEN], bytes[sizeof(hi)];
  if (ncclSocketRecv(s, bytes, sizeof(bytes), ncclSocketDeadlineMs(HELLO_MS)) != ncclSuccess ||
      p2pParseHello(bytes, sizeof(bytes), ep->cookie, &hi) != ncclSuccess) {
    INFO(NCCL_NET, "P2P: dropped a connection from %s that is not a P2P peer of this endpoint",
         ncclSocketToString(&s->addr, buf));
    ncclSocketClose(s);
    return NULL;
  }
  struct p2pPending* p = ep->pending;
  while (p && p->connId != hi.connId) p = p->next;
  if (p && (p->hello.nchannels != hi.nchannels || p->socks[hi.index].fd >= 0)) {
    INFO(NCCL_NET, "P2P: dropped a channel from %s that disagrees with its connection", ncclSocketToString(&s->addr, buf));
    ncclSocketClose(s);
    return NULL;
  }
  if (p == NULL) {
    p = calloc(1, sizeof(*p));
    if (p) p->socks = calloc((size_t)hi.nchannels, sizeof(*p->socks));
    if (p == NULL || p->socks == NULL) {
      free(p);
      ncclSocketClose(s);
      return NULL;
    }
    p->connId = hi.connId;
    p->hello = hi;
    for (int k = 0; k < hi.nchannels; k++) ncclSocketInit(&p->socks[k], NULL, NULL);
    p->next = ep->pending;
    ep->pending = p;
  }
  p->socks[hi.index] = *s;
  p->socks[hi.index].abortFlag = NULL;
  if (++p->have < p->hello.nchannels) return NULL;
  struct p2pPending** pp = &ep->pending;
  while (*pp != p) pp = &(*pp)->next;
  *pp = p->next;
  struct anycclP2pConn* c = p2pConnNew(ep, p->hello.nchannels, p->hello.chunk, p->hello.window);
  for (int k = 0; k < p->hello.nchannels; k++) {
    if (c) {
      c->ch[k].sock = p->socks[k];
      c->ch[k].ifIndex = ifIndex;
    } else {
      ncclSocketClose(&p->socks[k]);
    }
  }
  free(p->socks);
  free(p);
  return c;
}

P2P_API ncclResult_t anycclP2pAccept(anycclP2pEndpoint_t ep, anycclP2pConn_t* out) {
  return p2pAcceptEx(ep, out, ep ? ep->timeoutMs : -1, NULL, "ANYCCL_OP_TIMEOUT / config.timeoutSec");
}

ncclResult_t p2pAcceptEx(anycclP2pEndpoint_t ep, anycclP2pConn_t* out, int64_t timeoutMs,
                         volatile uint32_t* abortFlag, const char* timeoutName) {
  const char* fn = "anycclP2pAccept";
  ARGCHECK(ep != NULL && out != NULL, fn, "ep or conn is NULL");
  ARGCHECK(ep->listening, fn, "the endpoint does not listen; call anycclP2pListen first");
  *out = NULL;
  if (ep->net) {
    struct anycclP2pConn* c = NULL;
    NCCLCHECK(p2pPlugAccept(ep, &c, timeoutMs, abortFlag, timeoutName));
    ncclResult_t res = connStart(ep, c, "accept");
    if (res != ncclSuccess) {
      p2pConnFree(c);
      return res;
    }
    *out = c;
    return ncclSuccess;
  }
  int64_t deadline = ncclSocketDeadlineMs(timeoutMs);
  for (;;) {
    struct pollfd pfd[P2P_MAX_IFS];
    for (int i = 0; i < ep->nifs; i++) pfd[i] = (struct pollfd){ep->lsock[i].fd, POLLIN, 0};
    if (aborted(abortFlag)) {
      INFO(NCCL_NET, "P2P: accept aborted (the abort flag is set)");
      return ncclInternalError;
    }
    int64_t left = ncclSocketRemainingMs(deadline);
    if (left == 0) {
      WARN("anycclP2pAccept: no peer connected within %lld s (%s)", (long long)(timeoutMs / 1000), timeoutName);
      return ncclSystemError;
    }
    int n = poll(pfd, (nfds_t)ep->nifs, left > NCCL_SOCKET_POLL_MS ? NCCL_SOCKET_POLL_MS : (int)left);
    if (n < 0 && errno != EINTR) {
      WARN("anycclP2pAccept: poll failed: %s", strerror(errno));
      return ncclSystemError;
    }
    for (int i = 0; i < ep->nifs && n > 0; i++) {
      if (!(pfd[i].revents & POLLIN)) continue;
      struct ncclSocket s;
      int got = 0;
      ncclSocketInit(&s, NULL, NULL);
      NCCLCHECK(ncclSocketTryAccept(&ep->lsock[i], &s, &got));
      if (!got) continue;
      struct anycclP2pConn* c = acceptOne(ep, &s, i);
      if (c == NULL) continue;
      ncclResult_t res = connStart(ep, c, "accept");
      if (res != ncclSuccess) {
        p2pConnFree(c);
        return res;
      }
      *out = c;
      return ncclSuccess;
    }
  }
}

void p2pConnFree(struct anycclP2pConn* c) {
  p2pConnStop(c);
  p2pConnDrop(c);
  p2pBounceFree(c);
  p2pPlugFree(c);
  for (int k = 0; k < c->nch; k++) {
    ncclSocketClose(&c->ch[k].sock);
    free(c->ch[k].sbuf);
  }
  while (c->active) {
    struct anycclP2pReq* r = c->active;
    p2pReqUnlink(c, r);
    free(r);
  }
  while (c->finished) {
    struct anycclP2pReq* r = c->finished;
    c->finished = r->outNext;
    free(r);
  }
  while (c->unexp) {
    struct p2pUnexp* u = c->unexp;
    c->unexp = u->next;
    free(u->data);
    free(u);
  }
  while (c->inWrites) {
    struct p2pInWrite* w = c->inWrites;
    c->inWrites = w->next;
    free(w);
  }
  while (c->tags) {
    struct p2pTagSeq* t = c->tags;
    c->tags = t->next;
    free(t);
  }
  free(c->notes);
  pthread_mutex_destroy(&c->lock);
  if (c->plockInit) pthread_mutex_destroy(&c->plock);
  pthread_cond_destroy(&c->cv);
  free(c->ch);
  free(c);
}

P2P_API ncclResult_t anycclP2pClose(anycclP2pConn_t c) {
  if (c == NULL) return ncclSuccess;
  struct anycclP2pEndpoint* ep = c->ep;
  /* let our sends leave (bounded), then say goodbye on every channel */
  int64_t deadline = ncclSocketDeadlineMs(c->timeoutMs > 0 ? c->timeoutMs : 10000);
  pthread_mutex_lock(&c->lock);
  for (;;) {
    int out = c->outHead != NULL;
    for (struct anycclP2pReq* r = c->active; r && !out; r = r->next) out = r->kind == REQ_SEND || r->kind == REQ_RESP;
    if (!out || c->noDrain || c->error != ncclSuccess || ncclSocketRemainingMs(deadline) == 0) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10 * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&c->cv, &c->lock, &ts);
  }
  int healthy = c->error == ncclSuccess;
  for (struct anycclP2pReq* r = c->active; r && healthy; r = r->next)
    healthy = r->kind != REQ_SEND && r->kind != REQ_RESP; /* a goodbye after half a message would corrupt it */
  pthread_mutex_unlock(&c->lock);
  p2pConnStop(c);
  if (healthy) {
    struct p2pHdr bye = {P2P_MAGIC, P2P_OP_BYE, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (c->pch) p2pPlugBye(c, &bye);
    for (int k = 0; k < c->nch && c->pch == NULL; k++) {
      /* a channel may hold the tail of a partly written item: only a clean one can say goodbye */
      if (c->ch[k].qhead == NULL || c->ch[k].qhead->off == 0) ncclSocketSend(&c->ch[k].sock, &bye, sizeof(bye), ncclSocketDeadlineMs(1000));
    }
  }
  pthread_mutex_lock(&ep->lock);
  if (c->epPrev) c->epPrev->epNext = c->epNext;
  else if (ep->conns == c) ep->conns = c->epNext;
  if (c->epNext) c->epNext->epPrev = c->epPrev;
  pthread_mutex_unlock(&ep->lock);
  p2pConnFree(c);
  return ncclSuccess;
}

P2P_API ncclResult_t anycclP2pConnInfo(anycclP2pConn_t c, int* channels, size_t* chunkBytes, int* window) {
  ARGCHECK(c != NULL, "anycclP2pConnInfo", "conn is NULL");
  if (channels) *channels = c->nch;
  if (chunkBytes) *chunkBytes = c->chunk;
  if (window) *window = c->window;
  return ncclSuccess;
}
