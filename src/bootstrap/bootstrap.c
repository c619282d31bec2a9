/* Bootstrap: the out-of-band exchange among the ranks of a communicator.
 *
 * The unique id carries {magic, root address}. Each rank opens a listener,
 * connects to the root and sends a hello {magic, rank, nranks, its listen
 * address}. When all nranks have joined (same nranks, distinct ranks), the
 * root answers each rank with the address of its ring successor and exits.
 * The ranks then all-gather every listen address around the ring.
 *
 * After that, messages are {magic, sender, kind, tag, size} + payload on one
 * cached connection per (sender, receiver). A receiver keeps messages it did
 * not ask for yet in a queue; messages of one (peer, kind, tag) stay in order.
 *
 * Every accepted connection must present the magic and a sane header within
 * BS_HELLO_MS, or it is dropped; reading is incremental and driven by poll, so
 * a silent or slow connection never holds up the others. Every wait is bounded
 * by ANYCCL_BOOTSTRAP_TIMEOUT (by default ANYCCL_OP_TIMEOUT) and watches the
 * abort flags. */
#include "bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

#define BS_HELLO_MS 2000        /* a new connection must send a valid header within this */
#define BS_MAX_PENDING 64       /* unverified connections kept at once per listener */
#define BS_HINT_ROOT                                                                             \
  "Check that the process that created the unique id (or rank 0, with NCCL_COMM_ID) is running " \
  "and reachable from this host, that NCCL_SOCKET_IFNAME / NCCL_COMM_ID name the right "       \
  "interface, and that no firewall blocks the port; ANYCCL_BOOTSTRAP_TIMEOUT (default: ANYCCL_OP_TIMEOUT) sets the wait (s)."
#define BS_HINT_PEER                                                                          \
  "Check that the peer is alive and that its bootstrap interface (NCCL_SOCKET_IFNAME) is "    \
  "reachable from this host; ANYCCL_BOOTSTRAP_TIMEOUT (default: ANYCCL_OP_TIMEOUT) sets the wait (s)."

/* The wire structs and their checks: wire.h, wire.c. */
enum { KIND_HELLO = BS_KIND_HELLO, KIND_P2P = BS_KIND_P2P, KIND_ALLGATHER = BS_KIND_ALLGATHER,
       KIND_BARRIER = BS_KIND_BARRIER };

/* ---- process-wide: the bootstrap interface and NCCL_COMM_ID -------------- */

static pthread_once_t bsOnce = PTHREAD_ONCE_INIT;
static ncclResult_t bsNetResult;
static char bsIfName[NCCL_SOCKET_IFNAME_MAXLEN];
static union ncclSocketAddress bsIfAddr;
static char bsIfText[NCCL_SOCKET_IFNAME_MAXLEN + NCCL_SOCKET_NAME_MAXLEN + 2] = "none";
static int bsCommIdSet;
static struct bsHandle bsCommIdHandle;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27; x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Same string, same magic: independently started processes agree. */
static uint64_t commIdMagic(const char* s) {
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
  return mix64(h ^ 0x616e7963636c4944ULL) | 1;
}

static uint64_t randomMagic(void) {
  uint64_t m = 0;
  if (getrandom(&m, sizeof(m), 0) != sizeof(m)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)&m);
  }
  return m ? m : 1;
}

static void bsNetInitOnce(void) {
  const char* commId = anycclParamStr(PARAM_COMM_ID);
  const char* ifSpec = anycclParamStr(PARAM_SOCKET_IFNAME);
  int found = 0;
  if (commId && commId[0]) {
    char why[320];
    if (ncclSocketParseAddr(&bsCommIdHandle.addr, commId, why, sizeof(why)) != ncclSuccess) {
      WARN("NCCL_COMM_ID=%s is unusable: %s", commId, why);
      bsNetResult = ncclInvalidArgument;
      return;
    }
    bsCommIdHandle.magic = commIdMagic(commId);
    bsCommIdSet = 1;
    /* Without NCCL_SOCKET_IFNAME, use the interface that shares the root's subnet. */
    if (!(ifSpec && ifSpec[0])) {
      found = ncclSocketFindInterfaceMatchSubnet(bsIfName, &bsIfAddr, &bsCommIdHandle.addr);
      if (!found)
        INFO(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: no local interface shares a subnet with NCCL_COMM_ID=%s; "
             "using the default interface", commId);
    }
  }
  if (!found) found = ncclSocketFindInterfaces(bsIfName, &bsIfAddr, 1);
  if (!found) {
    WARN("Bootstrap: no usable network interface (NCCL_SOCKET_IFNAME=%s, NCCL_SOCKET_FAMILY=%s); "
         "set NCCL_SOCKET_IFNAME to an interface that is up and has an address",
         ifSpec ? ifSpec : "<unset>",
         anycclParamStr(PARAM_SOCKET_FAMILY) ? anycclParamStr(PARAM_SOCKET_FAMILY) : "<unset>");
    bsNetResult = ncclSystemError;
    return;
  }
  ncclSocketAddrSetPort(&bsIfAddr, 0);
  char ip[NCCL_SOCKET_NAME_MAXLEN];
  snprintf(bsIfText, sizeof(bsIfText), "%s:%s", bsIfName, ncclSocketIpToString(&bsIfAddr, ip));
  INFO(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: using %s", bsIfText);
  bsNetResult = ncclSuccess;
}

static ncclResult_t bsNetInit(void) {
  pthread_once(&bsOnce, bsNetInitOnce);
  return bsNetResult;
}

const char* bootstrapIfName(void) {
  bsNetInit();
  return bsIfText;
}

int64_t bootstrapTimeoutMs(void) {
  int64_t s = anycclTimeoutSec(PARAM_BOOTSTRAP_TIMEOUT);
  return s == 0 ? -1 : s * 1000; /* 0: no bound */
}

static int64_t bsTimeoutMs(void) { return bootstrapTimeoutMs(); }

/* ---- endpoint: a listener, its accepted connections, the message queue -- */

struct bsConn {
  struct ncclSocket sock;
  int peer; /* -1 until its first valid header */
  int64_t helloDeadline;
  struct bsHdr hdr;
  size_t hdrOff;
  char* payload; /* non-NULL while reading a payload */
  size_t payOff;
  struct bsConn* next;
};

struct bsMsg {
  int peer, kind, tag, size;
  char* data;
  struct ncclSocket sock; /* root: the connection the hello came on */
  struct bsMsg* next;
};

struct bsEndpoint {
  struct ncclSocket listen;
  uint64_t magic;
  int nranks;   /* ranks: valid peer range */
  int rootMode; /* accept only hellos; hand each connection over with its hello */
  char who[40]; /* for log lines */
  struct bsConn* conns;
  int npending;
  struct bsMsg *head, *tail;
  struct pollfd* pfds;
  struct bsConn** pconns;
  int pcap;
  char* gone; /* ranks: [peer] = its connection to us closed (it exited or closed its state) */
};

enum { CONN_KEEP = 0, CONN_DROP = 1, CONN_DETACH = 2 };

static void epFreeMsg(struct bsMsg* m) {
  if (m == NULL) return;
  ncclSocketClose(&m->sock);
  free(m->data);
  free(m);
}

static void epDestroy(struct bsEndpoint* ep) {
  ncclSocketClose(&ep->listen);
  for (struct bsConn *c = ep->conns, *n; c; c = n) {
    n = c->next;
    ncclSocketClose(&c->sock);
    free(c->payload);
    free(c);
  }
  ep->conns = NULL;
  for (struct bsMsg *m = ep->head, *n; m; m = n) {
    n = m->next;
    epFreeMsg(m);
  }
  ep->head = ep->tail = NULL;
  free(ep->pfds);
  free(ep->pconns);
  free(ep->gone);
  ep->pfds = NULL;
  ep->pconns = NULL;
  ep->gone = NULL;
}

/* First queued message matching (peer, kind, tag); peer/tag -1 = any. */
static struct bsMsg* epTake(struct bsEndpoint* ep, int peer, int kind, int tag, int anyTag) {
  struct bsMsg *prev = NULL, *m;
  for (m = ep->head; m; prev = m, m = m->next) {
    if ((peer < 0 || m->peer == peer) && m->kind == kind && (anyTag || m->tag == tag)) break;
  }
  if (m == NULL) return NULL;
  if (prev) prev->next = m->next;
  else ep->head = m->next;
  if (ep->tail == m) ep->tail = prev;
  m->next = NULL;
  return m;
}

/* Read what is available on one connection; queue complete messages. */
static int epReadConn(struct bsEndpoint* ep, struct bsConn* c) {
  char name[NCCL_SOCKET_NAME_MAXLEN], why[160];
  ncclSocketToString(&c->sock.addr, name);
  for (;;) {
    if (c->payload == NULL) {
      ncclResult_t res = ncclSocketProgress(&c->sock, NCCL_SOCKET_RECV, &c->hdr, sizeof(c->hdr), &c->hdrOff);
      if (res != ncclSuccess) {
        if (c->peer < 0)
          INFO(NCCL_BOOTSTRAP, "Bootstrap %s: dropped connection from %s: %s after %zu bytes, before a valid header",
               ep->who, name, ncclSocketErrorString(c->sock.err), c->hdrOff);
        else if (c->hdrOff > 0)
          WARN("Bootstrap %s: connection from rank %d (%s) broke in the middle of a message header: %s", ep->who,
               c->peer, name, ncclSocketErrorString(c->sock.err));
        else
          TRACE(NCCL_BOOTSTRAP, "Bootstrap %s: rank %d closed its connection", ep->who, c->peer);
        return CONN_DROP;
      }
      if (c->hdrOff < sizeof(c->hdr)) return CONN_KEEP;
      int hs = bsParseHeader(&c->hdr, sizeof(c->hdr), ep->magic, ep->rootMode, ep->nranks, c->peer, &c->hdr, why,
                             sizeof(why));
      if (hs == BS_HDR_WRONG_MAGIC) {
        WARN("Bootstrap %s: dropped connection from %s: wrong magic (not a member of this communicator, or not "
             "anyccl; is another job using the same address?)", ep->who, name);
        return CONN_DROP;
      }
      if (hs != BS_HDR_OK) {
        WARN("Bootstrap %s: dropped connection from %s: %s", ep->who, name, why);
        return CONN_DROP;
      }
      if (c->peer < 0) {
        c->peer = c->hdr.rank;
        ep->npending--;
        TRACE(NCCL_BOOTSTRAP, "Bootstrap %s: connection from %s is rank %d", ep->who, name, c->peer);
      }
      c->payload = malloc(c->hdr.size > 0 ? c->hdr.size : 1);
      if (c->payload == NULL) {
        WARN("Bootstrap %s: cannot allocate %d bytes for a message from rank %d", ep->who, c->hdr.size, c->peer);
        return CONN_DROP;
      }
      c->payOff = 0;
    }
    ncclResult_t res = ncclSocketProgress(&c->sock, NCCL_SOCKET_RECV, c->payload, c->hdr.size, &c->payOff);
    if (res != ncclSuccess) {
      WARN("Bootstrap %s: connection from rank %d (%s) broke in the middle of a %d-byte message: %s", ep->who,
           c->peer, name, c->hdr.size, ncclSocketErrorString(c->sock.err));
      return CONN_DROP;
    }
    if (c->payOff < (size_t)c->hdr.size) return CONN_KEEP;
    struct bsMsg* m = calloc(1, sizeof(*m));
    if (m == NULL) {
      WARN("Bootstrap %s: out of memory queueing a message", ep->who);
      return CONN_DROP;
    }
    m->peer = c->hdr.rank;
    m->kind = c->hdr.kind;
    m->tag = c->hdr.tag;
    m->size = c->hdr.size;
    m->data = c->payload;
    m->sock.fd = -1;
    c->payload = NULL;
    c->hdrOff = 0;
    if (ep->tail) ep->tail->next = m;
    else ep->head = m;
    ep->tail = m;
    if (ep->rootMode) {
      m->sock = c->sock;
      return CONN_DETACH;
    }
  }
}

static void epAcceptAll(struct bsEndpoint* ep) {
  for (;;) {
    struct ncclSocket s;
    int accepted = 0;
    if (ncclSocketTryAccept(&ep->listen, &s, &accepted) != ncclSuccess || !accepted) return;
    char name[NCCL_SOCKET_NAME_MAXLEN];
    if (ep->npending >= BS_MAX_PENDING) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap %s: refused connection from %s: %d connections already waiting to identify",
           ep->who, ncclSocketToString(&s.addr, name), ep->npending);
      ncclSocketClose(&s);
      continue;
    }
    struct bsConn* c = calloc(1, sizeof(*c));
    if (c == NULL) {
      ncclSocketClose(&s);
      return;
    }
    c->sock = s;
    c->peer = -1;
    c->helloDeadline = ncclSocketClockMs() + BS_HELLO_MS;
    c->next = ep->conns;
    ep->conns = c;
    ep->npending++;
    TRACE(NCCL_BOOTSTRAP, "Bootstrap %s: accepted connection from %s", ep->who, ncclSocketToString(&s.addr, name));
  }
}

/* Wait up to timeoutMs for activity; accept, read and queue what arrives.
 * Optionally also waits for extraFd to be ready for extraEvents. */
static ncclResult_t epPoll(struct bsEndpoint* ep, int extraFd, short extraEvents, int timeoutMs, int* extraReady) {
  int n = 0, nconns = 0;
  for (struct bsConn* c = ep->conns; c; c = c->next) nconns++;
  if (nconns + 2 > ep->pcap) {
    int cap = (nconns + 2) * 2;
    struct pollfd* p = realloc(ep->pfds, cap * sizeof(*p));
    if (p) ep->pfds = p;
    struct bsConn** q = realloc(ep->pconns, cap * sizeof(*q));
    if (q) ep->pconns = q;
    if (p == NULL || q == NULL) {
      WARN("Bootstrap %s: out of memory", ep->who);
      return ncclSystemError;
    }
    ep->pcap = cap;
  }
  int64_t now = ncclSocketClockMs();
  ep->pfds[n++] = (struct pollfd){.fd = ep->listen.fd, .events = POLLIN};
  for (struct bsConn* c = ep->conns; c; c = c->next) {
    if (c->peer < 0 && c->helloDeadline - now < timeoutMs)
      timeoutMs = c->helloDeadline > now ? (int)(c->helloDeadline - now) : 0;
    ep->pconns[n] = c;
    ep->pfds[n++] = (struct pollfd){.fd = c->sock.fd, .events = POLLIN};
  }
  int extraIdx = -1;
  if (extraFd >= 0) {
    extraIdx = n;
    ep->pfds[n++] = (struct pollfd){.fd = extraFd, .events = extraEvents};
  }
  int rc = poll(ep->pfds, n, timeoutMs);
  if (rc < 0 && errno != EINTR) {
    WARN("Bootstrap %s: poll failed: %s", ep->who, strerror(errno));
    return ncclSystemError;
  }
  if (extraReady) *extraReady = rc > 0 && extraIdx >= 0 && ep->pfds[extraIdx].revents != 0;
  /* Read from ready connections; collect the ones to drop or hand over. */
  for (int i = 1; rc > 0 && i < n; i++) {
    if (i == extraIdx || ep->pfds[i].revents == 0) continue;
    struct bsConn* c = ep->pconns[i];
    int st = epReadConn(ep, c);
    if (st != CONN_KEEP) {
      if (c->peer < 0) ep->npending--;
      else if (st == CONN_DROP && ep->gone) ep->gone[c->peer] = 1; /* no more messages from it */
      c->peer = st == CONN_DROP ? -2 : -3; /* marks for the sweep below */
    }
  }
  now = ncclSocketClockMs();
  for (struct bsConn **pc = &ep->conns, *c; (c = *pc) != NULL;) {
    if (c->peer == -1 && now >= c->helloDeadline) {
      char name[NCCL_SOCKET_NAME_MAXLEN];
      INFO(NCCL_BOOTSTRAP, "Bootstrap %s: dropped connection from %s: no valid header within %d ms (%zu bytes)",
           ep->who, ncclSocketToString(&c->sock.addr, name), BS_HELLO_MS, c->hdrOff);
      ep->npending--;
      c->peer = -2;
    }
    if (c->peer == -2 || c->peer == -3) {
      if (c->peer == -2) ncclSocketClose(&c->sock);
      free(c->payload);
      *pc = c->next;
      free(c);
    } else {
      pc = &c->next;
    }
  }
  if (rc > 0 && (ep->pfds[0].revents & POLLIN)) epAcceptAll(ep);
  return ncclSuccess;
}

static ncclResult_t epOpen(struct bsEndpoint* ep, const union ncclSocketAddress* addr, int reuse, uint64_t magic,
                           volatile uint32_t* abortFlag, volatile uint32_t* abortFlag2) {
  memset(ep, 0, sizeof(*ep));
  ep->magic = magic;
  ncclSocketInit(&ep->listen, abortFlag, abortFlag2);
  return ncclSocketListen(&ep->listen, addr, reuse);
}

/* ---- the root ------------------------------------------------------------ */

struct bsRoot {
  struct bsEndpoint ep;
  int64_t timeoutMs;
  int nranks, firstRank, joined;
  struct ncclSocket* socks;
  union ncclSocketAddress* addrs;
  int failed; /* ncclResult_t sent to every rank that joins */
  char failMsg[200];
};

static void rootReply(struct bsRoot* root, struct ncclSocket* sock, int status, const union ncclSocketAddress* next) {
  struct bsRootReply r;
  memset(&r, 0, sizeof(r));
  r.magic = root->ep.magic;
  r.status = status;
  r.nranks = root->nranks;
  if (next) r.next = *next;
  snprintf(r.msg, sizeof(r.msg), "%s", status == ncclSuccess ? "" : root->failMsg);
  if (ncclSocketSend(sock, &r, sizeof(r), ncclSocketDeadlineMs(BS_HELLO_MS)) != ncclSuccess) {
    char name[NCCL_SOCKET_NAME_MAXLEN];
    INFO(NCCL_BOOTSTRAP, "Bootstrap %s: could not answer %s: %s", root->ep.who, ncclSocketToString(&sock->addr, name),
         ncclSocketErrorString(sock->err));
  }
  ncclSocketClose(sock);
}

/* Usage errors are WARNed by every rank that receives the message; a timeout
 * is WARNed here too, since the ranks may be gone. */
static void rootFail(struct bsRoot* root, int status) {
  if (status == ncclInvalidUsage) INFO(NCCL_BOOTSTRAP, "Bootstrap %s: %s", root->ep.who, root->failMsg);
  else WARN("Bootstrap %s: %s", root->ep.who, root->failMsg);
  root->failed = status;
  for (int r = 0; r < root->nranks; r++)
    if (root->socks[r].fd >= 0) rootReply(root, &root->socks[r], status, NULL);
}

static void rootHello(struct bsRoot* root, struct bsMsg* m) {
  int rank = m->peer, nranks = m->tag;
  char name[NCCL_SOCKET_NAME_MAXLEN], why[160];
  if (wireParseAddr(m->data, m->size, (union ncclSocketAddress*)m->data, why, sizeof(why)) != ncclSuccess) {
    WARN("Bootstrap %s: dropped the hello of rank %d from %s: %s", root->ep.who, rank,
         ncclSocketToString(&m->sock.addr, name), why);
    return; /* the caller closes the connection */
  }
  if (root->failed) {
    rootReply(root, &m->sock, root->failed, NULL);
    return;
  }
  if (root->nranks == 0) {
    root->socks = calloc(nranks, sizeof(*root->socks));
    root->addrs = calloc(nranks, sizeof(*root->addrs));
    if (root->socks == NULL || root->addrs == NULL) {
      snprintf(root->failMsg, sizeof(root->failMsg), "cannot allocate state for %d ranks", nranks);
      free(root->socks);
      root->socks = NULL;
      rootReply(root, &m->sock, ncclSystemError, NULL);
      root->failed = ncclSystemError;
      return;
    }
    for (int r = 0; r < nranks; r++) root->socks[r].fd = -1;
    root->nranks = nranks;
    root->firstRank = rank;
  }
  if (nranks != root->nranks) {
    snprintf(root->failMsg, sizeof(root->failMsg),
             "rank %d joined with nranks=%d but rank %d joined with nranks=%d: every rank must pass the same nranks",
             rank, nranks, root->firstRank, root->nranks);
    rootReply(root, &m->sock, ncclInvalidUsage, NULL);
    rootFail(root, ncclInvalidUsage);
    return;
  }
  if (root->socks[rank].fd >= 0) {
    char other[NCCL_SOCKET_NAME_MAXLEN];
    snprintf(root->failMsg, sizeof(root->failMsg),
             "rank %d joined twice (from %s and %s): every rank must pass a distinct rank", rank,
             ncclSocketToString(&root->socks[rank].addr, other), ncclSocketToString(&m->sock.addr, name));
    rootReply(root, &m->sock, ncclInvalidUsage, NULL);
    rootFail(root, ncclInvalidUsage);
    return;
  }
  root->socks[rank] = m->sock;
  m->sock.fd = -1;
  memcpy(&root->addrs[rank], m->data, sizeof(union ncclSocketAddress));
  root->joined++;
  INFO(NCCL_BOOTSTRAP, "Bootstrap %s: rank %d of %d joined from %s (%d/%d)", root->ep.who, rank, nranks,
       ncclSocketToString(&root->socks[rank].addr, name), root->joined, nranks);
}

static void rootTimeout(struct bsRoot* root) {
  if (root->joined == 0 || root->failed) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap %s: exiting after %lld s (%d ranks joined)", root->ep.who,
         (long long)(root->timeoutMs / 1000), root->joined);
    return;
  }
  char missing[96] = "";
  int len = 0, shown = 0;
  for (int r = 0; r < root->nranks && len < (int)sizeof(missing) - 16; r++) {
    if (root->socks[r].fd >= 0) continue;
    len += snprintf(missing + len, sizeof(missing) - len, "%s%d", shown++ ? "," : "", r);
  }
  if (shown < root->nranks - root->joined) snprintf(missing + len, sizeof(missing) - len, ",...");
  snprintf(root->failMsg, sizeof(root->failMsg),
           "timed out after %lld s with %d of %d ranks joined (missing: %s); check that every rank calls init with "
           "this id, or raise ANYCCL_BOOTSTRAP_TIMEOUT",
           (long long)(root->timeoutMs / 1000), root->joined, root->nranks, missing);
  rootFail(root, ncclSystemError);
}

static void* rootThread(void* arg) {
  struct bsRoot* root = arg;
  int64_t lastEvent = ncclSocketClockMs();
  int done = 0;
  while (!done) {
    int64_t now = ncclSocketClockMs();
    /* Without a timeout, a failed root still leaves after a minute (it only
     * stays to tell late ranks what went wrong). */
    int64_t limit = root->timeoutMs >= 0 ? root->timeoutMs : root->failed ? 60000 : -1;
    if (limit >= 0 && now - lastEvent >= limit) {
      rootTimeout(root);
      break;
    }
    if (epPoll(&root->ep, -1, 0, NCCL_SOCKET_POLL_MS * 2, NULL) != ncclSuccess) {
      snprintf(root->failMsg, sizeof(root->failMsg), "listener failed");
      if (root->nranks) rootFail(root, ncclSystemError);
      break;
    }
    struct bsMsg* m;
    while ((m = epTake(&root->ep, -1, KIND_HELLO, 0, 1)) != NULL) {
      int before = root->joined;
      rootHello(root, m);
      epFreeMsg(m);
      if (root->joined > before) lastEvent = ncclSocketClockMs(); /* each join restarts the clock */
    }
    if (!root->failed && root->nranks > 0 && root->joined == root->nranks) {
      for (int r = 0; r < root->nranks; r++)
        rootReply(root, &root->socks[r], ncclSuccess, &root->addrs[(r + 1) % root->nranks]);
      INFO(NCCL_BOOTSTRAP, "Bootstrap %s: all %d ranks joined; ring sent", root->ep.who, root->nranks);
      done = 1;
    }
  }
  for (int r = 0; root->socks && r < root->nranks; r++) ncclSocketClose(&root->socks[r]);
  epDestroy(&root->ep);
  free(root->socks);
  free(root->addrs);
  free(root);
  return NULL;
}

/* Listen at handle->addr (its port may be 0; handle->addr gets the bound
 * address) and start a detached root thread for one communicator. */
static ncclResult_t rootCreate(struct bsHandle* handle, int reuseAddr) {
  ncclResult_t res = ncclSuccess;
  char name[NCCL_SOCKET_NAME_MAXLEN];
  struct bsRoot* root;
  ANYCCL_CALLOC(root, 1);
  root->timeoutMs = bsTimeoutMs();
  NCCLCHECKGOTO(epOpen(&root->ep, &handle->addr, reuseAddr, handle->magic, NULL, NULL), res, fail_free);
  root->ep.rootMode = 1;
  snprintf(root->ep.who, sizeof(root->ep.who), "root %s", ncclSocketToString(&root->ep.listen.addr, name));
  handle->addr = root->ep.listen.addr;
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&thread, &attr, rootThread, root);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    WARN("Bootstrap: cannot start the root thread: %s", strerror(err));
    res = ncclSystemError;
    goto fail_close;
  }
  INFO(NCCL_BOOTSTRAP, "Bootstrap: root listening on %s", name);
  return ncclSuccess;
fail_close:
  epDestroy(&root->ep);
fail_free:
  free(root);
  return res;
}

ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id) {
  if (id == NULL) {
    WARN("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  NCCLCHECK(bsNetInit());
  struct bsHandle handle;
  memset(&handle, 0, sizeof(handle));
  if (bsCommIdSet) {
    handle = bsCommIdHandle;
    char name[NCCL_SOCKET_NAME_MAXLEN];
    INFO(NCCL_BOOTSTRAP, "Bootstrap: NCCL_COMM_ID set: root at %s (rank 0 starts it)",
         ncclSocketToString(&handle.addr, name));
  } else {
    handle.magic = randomMagic();
    handle.addr = bsIfAddr;
    NCCLCHECK(rootCreate(&handle, 0));
  }
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &handle, sizeof(handle));
  return ncclSuccess;
}

/* ---- the ranks ----------------------------------------------------------- */

struct bootstrapState {
  int rank, nranks;
  uint64_t magic;
  int64_t timeoutMs;
  volatile uint32_t* abortFlag; /* the caller's, may be NULL */
  uint32_t localAbort;          /* set by bootstrapAbort */
  union ncclSocketAddress* peerAddrs;
  struct ncclSocket* out; /* per peer: our connection to its listener */
  pthread_mutex_t sendLock, recvLock, refLock;
  pthread_cond_t refCond;
  int users;
  struct bsEndpoint ep; /* under recvLock */
};

/* A flag of the calling thread's own (bootstrapSetCallAbort). */
static __thread volatile uint32_t* bsCallAbort;

void bootstrapSetCallAbort(volatile uint32_t* flag) { bsCallAbort = flag; }

static int bsAborted(struct bootstrapState* s) {
  return (s->abortFlag && __atomic_load_n(s->abortFlag, __ATOMIC_ACQUIRE)) ||
         __atomic_load_n(&s->localAbort, __ATOMIC_ACQUIRE) ||
         (bsCallAbort && __atomic_load_n(bsCallAbort, __ATOMIC_ACQUIRE));
}

static const char* kindName(int kind) {
  return kind == KIND_ALLGATHER ? "all-gather data" : kind == KIND_BARRIER ? "a barrier message" : "a message";
}

static void bsEnter(struct bootstrapState* s) {
  pthread_mutex_lock(&s->refLock);
  s->users++;
  pthread_mutex_unlock(&s->refLock);
}

static void bsLeave(struct bootstrapState* s) {
  pthread_mutex_lock(&s->refLock);
  if (--s->users == 0) pthread_cond_broadcast(&s->refCond);
  pthread_mutex_unlock(&s->refLock);
}

/* Send bytes on a connection; while it would block, keep draining our own
 * incoming connections (if no other thread is) so that two ranks sending
 * large messages to each other cannot deadlock. */
static ncclResult_t bsSendBytes(struct bootstrapState* s, int peer, struct ncclSocket* sock, const void* ptr,
                                size_t size, int64_t deadline) {
  size_t off = 0;
  for (;;) {
    ncclResult_t res = ncclSocketProgress(sock, NCCL_SOCKET_SEND, (void*)ptr, size, &off);
    if (res != ncclSuccess) {
      WARN("Bootstrap: rank %d lost its connection to rank %d while sending: %s", s->rank, peer,
           ncclSocketErrorString(sock->err));
      return res;
    }
    if (off == size) return ncclSuccess;
    if (bsAborted(s)) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: send to rank %d aborted", s->rank, peer);
      return ncclInternalError;
    }
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("Bootstrap: rank %d timed out after %lld s sending %zu bytes to rank %d, which is not receiving; is it "
           "alive and at the same point? (ANYCCL_BOOTSTRAP_TIMEOUT)",
           s->rank, (long long)(s->timeoutMs / 1000), size, peer);
      return ncclSystemError;
    }
    int slice = (int)(ncclSocketRemainingMs(deadline) < NCCL_SOCKET_POLL_MS ? ncclSocketRemainingMs(deadline)
                                                                            : NCCL_SOCKET_POLL_MS);
    if (pthread_mutex_trylock(&s->recvLock) == 0) {
      res = epPoll(&s->ep, sock->fd, POLLOUT, slice, NULL);
      pthread_mutex_unlock(&s->recvLock);
      if (res != ncclSuccess) return res;
    } else {
      struct pollfd pfd = {.fd = sock->fd, .events = POLLOUT};
      poll(&pfd, 1, slice);
    }
  }
}

static ncclResult_t bsSendMsg(struct bootstrapState* s, int peer, int kind, int tag, const void* data, int size) {
  ncclResult_t res = ncclSuccess;
  int64_t deadline = ncclSocketDeadlineMs(s->timeoutMs);
  pthread_mutex_lock(&s->sendLock);
  struct ncclSocket* sock = &s->out[peer];
  if (sock->fd < 0) {
    char desc[64];
    snprintf(desc, sizeof(desc), "bootstrap rank %d (from rank %d)", peer, s->rank);
    ncclSocketInit(sock, s->abortFlag, &s->localAbort);
    NCCLCHECKGOTO(ncclSocketConnect(sock, &s->peerAddrs[peer], deadline, desc, BS_HINT_PEER), res, out);
  }
  struct bsHdr hdr = {.magic = s->magic, .rank = s->rank, .kind = kind, .tag = tag, .size = size};
  NCCLCHECKGOTO(bsSendBytes(s, peer, sock, &hdr, sizeof(hdr), deadline), res, fail_close);
  NCCLCHECKGOTO(bsSendBytes(s, peer, sock, data, size, deadline), res, fail_close);
  goto out;
fail_close:
  ncclSocketClose(sock); /* a half-sent message leaves the stream unusable */
out:
  pthread_mutex_unlock(&s->sendLock);
  return res;
}

static ncclResult_t bsRecvMsg(struct bootstrapState* s, int peer, int kind, int tag, void* data, int size) {
  ncclResult_t res = ncclSuccess;
  int64_t deadline = ncclSocketDeadlineMs(s->timeoutMs);
  pthread_mutex_lock(&s->recvLock);
  for (;;) {
    struct bsMsg* m = epTake(&s->ep, peer, kind, tag, 0);
    if (m) {
      if (m->size != size) {
        WARN("Bootstrap: rank %d received %s of %d bytes from rank %d (tag %d) but expected %d bytes", s->rank,
             kindName(kind), m->size, peer, tag, size);
        res = ncclInternalError;
      } else if (size > 0) {
        memcpy(data, m->data, size);
      }
      epFreeMsg(m);
      break;
    }
    if (bsAborted(s)) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: receive from rank %d aborted", s->rank, peer);
      res = ncclInternalError;
      break;
    }
    if (s->ep.gone[peer]) {
      WARN("Bootstrap: rank %d was waiting for %s from rank %d (tag %d), but rank %d closed its connection: it "
           "exited, crashed or destroyed its communicator",
           s->rank, kindName(kind), peer, tag, peer);
      res = ncclRemoteError;
      break;
    }
    int64_t left = ncclSocketRemainingMs(deadline);
    if (left == 0) {
      WARN("Bootstrap: rank %d timed out after %lld s waiting for %s from rank %d (tag %d); is rank %d alive and at "
           "the same point? (ANYCCL_BOOTSTRAP_TIMEOUT)",
           s->rank, (long long)(s->timeoutMs / 1000), kindName(kind), peer, tag, peer);
      res = ncclSystemError;
      break;
    }
    NCCLCHECKGOTO(epPoll(&s->ep, -1, 0, left < NCCL_SOCKET_POLL_MS ? (int)left : NCCL_SOCKET_POLL_MS, NULL), res,
                  out);
  }
out:
  pthread_mutex_unlock(&s->recvLock);
  return res;
}

static ncclResult_t ringAllGather(struct bootstrapState* s, char* data, int size) {
  int n = s->nranks, next = (s->rank + 1) % n, prev = (s->rank + n - 1) % n;
  for (int i = 0; i < n - 1; i++) {
    int sendSlice = (s->rank - i + n) % n, recvSlice = (s->rank - i - 1 + n) % n;
    char* sendPtr = size ? data + (size_t)sendSlice * size : NULL;
    char* recvPtr = size ? data + (size_t)recvSlice * size : NULL;
    NCCLCHECK(bsSendMsg(s, next, KIND_ALLGATHER, i, sendPtr, size));
    NCCLCHECK(bsRecvMsg(s, prev, KIND_ALLGATHER, i, recvPtr, size));
  }
  return ncclSuccess;
}

static void stateFree(struct bootstrapState* s) {
  if (s == NULL) return;
  for (int p = 0; s->out && p < s->nranks; p++) ncclSocketClose(&s->out[p]);
  epDestroy(&s->ep);
  free(s->out);
  free(s->peerAddrs);
  pthread_mutex_destroy(&s->sendLock);
  pthread_mutex_destroy(&s->recvLock);
  pthread_mutex_destroy(&s->refLock);
  pthread_cond_destroy(&s->refCond);
  free(s);
}

static ncclResult_t stateAlloc(int rank, int nranks, uint64_t magic, volatile uint32_t* abortFlag,
                               struct bootstrapState** out) {
  struct bootstrapState* s = calloc(1, sizeof(*s));
  if (s == NULL) goto oom;
  pthread_mutex_init(&s->sendLock, NULL);
  pthread_mutex_init(&s->recvLock, NULL);
  pthread_mutex_init(&s->refLock, NULL);
  pthread_cond_init(&s->refCond, NULL);
  s->ep.listen.fd = -1;
  s->rank = rank;
  s->nranks = nranks;
  s->magic = magic;
  s->abortFlag = abortFlag;
  s->timeoutMs = bsTimeoutMs();
  s->peerAddrs = calloc(nranks, sizeof(*s->peerAddrs));
  s->out = calloc(nranks, sizeof(*s->out));
  if (s->peerAddrs == NULL || s->out == NULL) goto oom;
  for (int p = 0; p < nranks; p++) ncclSocketInit(&s->out[p], abortFlag, &s->localAbort);
  *out = s;
  return ncclSuccess;
oom:
  WARN("Bootstrap: out of memory for %d ranks", nranks);
  stateFree(s);
  return ncclSystemError;
}

/* Hello to the root; its answer gives the ring successor's address. */
static ncclResult_t joinRoot(struct bootstrapState* s, const struct bsHandle* handle) {
  ncclResult_t res = ncclSuccess;
  char rootName[NCCL_SOCKET_NAME_MAXLEN];
  ncclSocketToString(&handle->addr, rootName);
  int64_t deadline = ncclSocketDeadlineMs(s->timeoutMs);
  struct ncclSocket sock;
  ncclSocketInit(&sock, s->abortFlag, &s->localAbort);
  char desc[64];
  snprintf(desc, sizeof(desc), "the bootstrap root (from rank %d)", s->rank);
  NCCLCHECK(ncclSocketConnect(&sock, &handle->addr, deadline, desc, BS_HINT_ROOT));
  struct {
    struct bsHdr hdr;
    union ncclSocketAddress addr;
  } hello;
  memset(&hello, 0, sizeof(hello));
  hello.hdr = (struct bsHdr){.magic = s->magic, .rank = s->rank, .kind = KIND_HELLO, .tag = s->nranks,
                             .size = sizeof(union ncclSocketAddress)};
  hello.addr = s->ep.listen.addr;
  struct bsRootReply reply;
  res = ncclSocketSend(&sock, &hello, sizeof(hello), deadline);
  if (res == ncclSuccess) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d of %d connected to root %s", s->rank, s->nranks, rootName);
    res = ncclSocketRecv(&sock, &reply, sizeof(reply), deadline);
  }
  if (res != ncclSuccess) {
    if (sock.err == ncclSocketErrAborted)
      INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: init aborted while waiting for the root", s->rank);
    else if (sock.err == ncclSocketErrTimedOut)
      WARN("Bootstrap: rank %d: no answer from the root at %s within %lld s: not all %d ranks joined. Check that "
           "every rank calls init with the same id and nranks; ANYCCL_BOOTSTRAP_TIMEOUT (default: ANYCCL_OP_TIMEOUT) sets the wait (s).",
           s->rank, rootName, (long long)(s->timeoutMs / 1000), s->nranks);
    else
      WARN("Bootstrap: rank %d: the root at %s dropped the connection (%s); did the root process exit, or does the "
           "id belong to another communicator?", s->rank, rootName, ncclSocketErrorString(sock.err));
    if (res == ncclRemoteError || sock.err == ncclSocketErrClosed) res = ncclRemoteError;
    goto out;
  }
  char why[240];
  res = bsParseRootReply(&reply, sizeof(reply), s->magic, s->nranks, &reply, why, sizeof(why));
  if (res != ncclSuccess) {
    if (reply.magic != s->magic)
      WARN("Bootstrap: rank %d: %s answered with the wrong magic; it is not this communicator's root", s->rank,
           rootName);
    else if (reply.status != ncclSuccess)
      WARN("Bootstrap: rank %d: the root at %s refused this communicator: %s", s->rank, rootName, why);
    else
      WARN("Bootstrap: rank %d: the root at %s sent a malformed answer: %s", s->rank, rootName, why);
    goto out;
  }
  s->peerAddrs[(s->rank + 1) % s->nranks] = reply.next;
out:
  ncclSocketClose(&sock);
  return res;
}

ncclResult_t bootstrapInit(const ncclUniqueId* id, int rank, int nranks, volatile uint32_t* abortFlag,
                           struct bootstrapState** state) {
  ncclResult_t res = ncclSuccess;
  if (id == NULL || state == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("bootstrapInit: invalid arguments (rank %d, nranks %d%s)", rank, nranks,
         id == NULL ? ", id NULL" : state == NULL ? ", state NULL" : "");
    return ncclInvalidArgument;
  }
  *state = NULL;
  NCCLCHECK(bsNetInit());
  int64_t start = ncclSocketClockMs();
  struct bsHandle handle;
  char why[240];
  if (bsParseUniqueId(id->internal, sizeof(id->internal), &handle, why, sizeof(why)) != ncclSuccess) {
    WARN("bootstrapInit: the unique id is unusable: %s; was it filled by ncclGetUniqueId?", why);
    return ncclInvalidArgument;
  }
  struct bootstrapState* s;
  NCCLCHECK(stateAlloc(rank, nranks, handle.magic, abortFlag, &s));
  if (rank == 0 && bsCommIdSet && handle.magic == bsCommIdHandle.magic &&
      ncclSocketAddrEqual(&handle.addr, &bsCommIdHandle.addr)) {
    struct bsHandle rootHandle = handle;
    NCCLCHECKGOTO(rootCreate(&rootHandle, 1), res, fail);
  }
  /* Our listener, on the bootstrap interface; ephemeral port. */
  union ncclSocketAddress local = bsIfAddr;
  NCCLCHECKGOTO(epOpen(&s->ep, &local, 0, s->magic, abortFlag, &s->localAbort), res, fail);
  s->ep.nranks = nranks;
  s->ep.gone = calloc(nranks, 1);
  if (s->ep.gone == NULL) {
    WARN("Bootstrap: out of memory for %d ranks", nranks);
    res = ncclSystemError;
    goto fail;
  }
  snprintf(s->ep.who, sizeof(s->ep.who), "rank %d", rank);
  s->peerAddrs[rank] = s->ep.listen.addr;
  NCCLCHECKGOTO(joinRoot(s, &handle), res, fail);
  NCCLCHECKGOTO(ringAllGather(s, (char*)s->peerAddrs, sizeof(union ncclSocketAddress)), res, fail);
  for (int p = 0; p < nranks; p++) {
    if (wireParseAddr(&s->peerAddrs[p], sizeof(s->peerAddrs[p]), &s->peerAddrs[p], why, sizeof(why)) != ncclSuccess) {
      WARN("Bootstrap: rank %d received a bad listen address for rank %d: %s", rank, p, why);
      res = ncclRemoteError;
      goto fail;
    }
  }
  char name[NCCL_SOCKET_NAME_MAXLEN];
  INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d of %d ready, listening on %s (%lld ms)", rank, nranks,
       ncclSocketToString(&s->ep.listen.addr, name), (long long)(ncclSocketClockMs() - start));
  *state = s;
  return ncclSuccess;
fail:
  stateFree(s);
  return res;
}

static ncclResult_t checkPeer(struct bootstrapState* s, int peer, int size, const char* fn) {
  if (s == NULL || peer < 0 || peer >= s->nranks || size < 0) {
    WARN("%s: invalid arguments (peer %d, nranks %d, size %d)", fn, peer, s ? s->nranks : -1, size);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t bootstrapAllGather(struct bootstrapState* s, void* allData, int size) {
  NCCLCHECK(checkPeer(s, 0, size, "bootstrapAllGather"));
  bsEnter(s);
  ncclResult_t res = ringAllGather(s, allData, size);
  bsLeave(s);
  return res;
}

ncclResult_t bootstrapSend(struct bootstrapState* s, int peer, int tag, const void* data, int size) {
  NCCLCHECK(checkPeer(s, peer, size, "bootstrapSend"));
  bsEnter(s);
  ncclResult_t res = bsSendMsg(s, peer, KIND_P2P, tag, data, size);
  bsLeave(s);
  return res;
}

ncclResult_t bootstrapRecv(struct bootstrapState* s, int peer, int tag, void* data, int size) {
  NCCLCHECK(checkPeer(s, peer, size, "bootstrapRecv"));
  bsEnter(s);
  ncclResult_t res = bsRecvMsg(s, peer, KIND_P2P, tag, data, size);
  bsLeave(s);
  return res;
}

/* Dissemination barrier: ceil(log2 n) rounds of one byte. */
ncclResult_t bootstrapBarrier(struct bootstrapState* s, int tag) {
  NCCLCHECK(checkPeer(s, 0, 0, "bootstrapBarrier"));
  ncclResult_t res = ncclSuccess;
  bsEnter(s);
  int n = s->nranks;
  for (int d = 1; d < n; d <<= 1) {
    char b = 1;
    NCCLCHECKGOTO(bsSendMsg(s, (s->rank + d) % n, KIND_BARRIER, tag, &b, 1), res, out);
    NCCLCHECKGOTO(bsRecvMsg(s, (s->rank - d + n) % n, KIND_BARRIER, tag, &b, 1), res, out);
  }
out:
  bsLeave(s);
  return res;
}

/* Wait for calls in flight (they notice an abort within NCCL_SOCKET_POLL_MS),
 * then free. */
static ncclResult_t closeState(struct bootstrapState* s) {
  pthread_mutex_lock(&s->refLock);
  while (s->users > 0) pthread_cond_wait(&s->refCond, &s->refLock);
  pthread_mutex_unlock(&s->refLock);
  stateFree(s);
  return ncclSuccess;
}

ncclResult_t bootstrapClose(struct bootstrapState* s) {
  if (s == NULL) return ncclSuccess;
  return closeState(s);
}

ncclResult_t bootstrapAbort(struct bootstrapState* s) {
  if (s == NULL) return ncclSuccess;
  __atomic_store_n(&s->localAbort, 1, __ATOMIC_RELEASE);
  INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d aborted", s->rank);
  return closeState(s);
}
