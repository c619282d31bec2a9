/* The built-in network: TCP sockets, in the shape of NCCL's net plugin.
 *
 * A connection is one control socket and N data sockets. A message sends a
 * header {size, tag} on the control socket and its bytes cut into N chunks,
 * chunk k on data socket k. Every socket has a FIFO of tasks; both ends
 * post messages in the same order and cut them the same way, so each
 * socket's byte stream lines up without per-chunk headers. Helper threads
 * (NCCL_SOCKET_NTHREADS) own the sockets round-robin and do the I/O; with 0
 * threads, test() does it. At most ANYCCL_NET_MAX_REQUESTS messages are in
 * flight per connection; beyond that isend/irecv say "later" (NULL). */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "net.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

/* The handle, hello and message header are in wire.h with their checks. */
#define MAX_SOCKS NET_MAX_SOCKS
#define MAX_THREADS 16
_Static_assert(sizeof(struct netSockHandle) <= ANYCCL_NET_HANDLE_MAXSIZE, "handle must fit");

struct req;
struct task {
  char* ptr;
  size_t len, off;
  struct req* req;
  int header;
  struct task* next;
};

struct req {
  int used, send, done;
  char* data;
  size_t size; /* send: bytes; recv: room */
  size_t got;  /* bytes that arrived (recv) */
  int tag;
  int pending; /* tasks not yet complete */
  struct netMsgHeader hdr;
  struct task tasks[MAX_SOCKS + 1];
  struct sockComm* comm;
};

struct sockComm {
  int isSend;
  int nsocks; /* data sockets */
  struct ncclSocket socks[MAX_SOCKS + 1]; /* [0] control */
  struct task *qhead[MAX_SOCKS + 1], *qtail[MAX_SOCKS + 1];
  struct req reqs[ANYCCL_NET_MAX_REQUESTS];
  pthread_mutex_t lock;
  int nthreads;
  pthread_t threads[MAX_THREADS];
  int wakeFd[MAX_THREADS];
  int stop;
  int peerClosed; /* the sender said goodbye: EOF is expected, not an error */
  int notifyFd;
  const int32_t* notifyAsleep; /* write notifyFd only while *notifyAsleep (NULL: always) */
  void* (*pick)(void* arg, void* posted, size_t size, uint32_t tag); /* setPick (receive side) */
  void* pickArg;
  ncclResult_t error;
  volatile uint32_t* abortFlag;
};

struct listenComm {
  struct ncclSocket sock;
  struct netSockHandle handle;
  volatile uint32_t* abortFlag;
};

/* ---- wire checks (wire.h) -------------------------------------------------- */
ncclResult_t netParseHandle(const void* bytes, size_t len, struct netSockHandle* out, char* why, size_t whyLen) {
  struct netSockHandle h;
  if (len < sizeof(h)) {
    snprintf(why, whyLen, "a handle is %zu bytes, got %zu", sizeof(h), len);
    return ncclInternalError;
  }
  memcpy(&h, bytes, sizeof(h));
  if (h.magic != NET_MAGIC || h.nsocks < 1 || h.nsocks > MAX_SOCKS) {
    snprintf(why, whyLen, "magic %llx, nsocks %d", (unsigned long long)h.magic, h.nsocks);
    return ncclInternalError;
  }
  char sub[160];
  if (wireParseAddr(&h.addr, sizeof(h.addr), &h.addr, sub, sizeof(sub)) != ncclSuccess) {
    snprintf(why, whyLen, "%s", sub);
    return ncclInternalError;
  }
  *out = h;
  return ncclSuccess;
}

ncclResult_t netParseHello(const void* bytes, size_t len, const struct netSockHandle* mine, struct netHello* out) {
  struct netHello hi;
  if (len != sizeof(hi)) return ncclRemoteError;
  memcpy(&hi, bytes, sizeof(hi));
  if (hi.magic != NET_MAGIC || hi.cookie != mine->cookie || hi.index < 0 || hi.index > mine->nsocks ||
      hi.nsocks != mine->nsocks)
    return ncclRemoteError;
  *out = hi;
  return ncclSuccess;
}

int netParseMsgHeader(const struct netMsgHeader* hdr, size_t room, size_t* size, int* tag) {
  if (hdr->tag == NET_BYE_TAG) return 1;
  if (hdr->size > room) return -1;
  *size = (size_t)hdr->size;
  *tag = hdr->tag;
  return 0;
}

/* ---- devices --------------------------------------------------------------- */
#define MAX_IFS 16
static char ifNames[MAX_IFS * NCCL_SOCKET_IFNAME_MAXLEN];
static union ncclSocketAddress ifAddrs[MAX_IFS];
static int nIfs = -1;
static pthread_mutex_t ifLock = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t netInit(void) {
  pthread_mutex_lock(&ifLock);
  if (nIfs < 0) {
    nIfs = ncclSocketFindInterfaces(ifNames, ifAddrs, MAX_IFS);
    if (nIfs <= 0) {
      nIfs = -1;
      pthread_mutex_unlock(&ifLock);
      WARN("NET/Socket: no usable network interface (check NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY)");
      return ncclSystemError;
    }
    for (int i = 0; i < nIfs; i++) {
      char buf[NCCL_SOCKET_NAME_MAXLEN];
      INFO(NCCL_INIT | NCCL_NET, "NET/Socket : Using [%d]%s:%s", i, ifNames + i * NCCL_SOCKET_IFNAME_MAXLEN,
           ncclSocketIpToString(&ifAddrs[i], buf));
    }
  }
  pthread_mutex_unlock(&ifLock);
  return ncclSuccess;
}

static ncclResult_t netDevices(int* n) {
  NCCLCHECK(netInit());
  *n = nIfs;
  return ncclSuccess;
}

static ncclResult_t netGetProperties(int dev, anycclNetProperties* p) {
  NCCLCHECK(netInit());
  if (dev < 0 || dev >= nIfs) return ncclInvalidArgument;
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "%s", ifNames + dev * NCCL_SOCKET_IFNAME_MAXLEN);
  p->guid = dev;
  p->speed = 10000;
  p->maxComms = 65536;
  p->latency = 0;
  return ncclSuccess;
}

/* ---- task queues ------------------------------------------------------------ */
static void wakeThread(struct sockComm* c, int s) {
  if (c->nthreads == 0) return;
  uint64_t one = 1;
  ssize_t r = write(c->wakeFd[s % c->nthreads], &one, sizeof(one));
  (void)r;
}

/* lock held */
static void enqueue(struct sockComm* c, int s, struct task* t) {
  t->next = NULL;
  t->off = 0;
  if (c->qtail[s]) c->qtail[s]->next = t;
  else c->qhead[s] = t;
  c->qtail[s] = t;
  wakeThread(c, s);
}

/* Data tasks for a message of `size` bytes (lock held). */
static void enqueueData(struct sockComm* c, struct req* r, size_t size) {
  size_t chunk = (size + c->nsocks - 1) / c->nsocks;
  chunk = (chunk + 4095) / 4096 * 4096;
  for (int k = 0; k < c->nsocks; k++) {
    size_t begin = (size_t)k * chunk;
    if (begin >= size) break;
    struct task* t = &r->tasks[k + 1];
    t->ptr = r->data + begin;
    t->len = size - begin < chunk ? size - begin : chunk;
    t->req = r;
    t->header = 0;
    r->pending++;
    enqueue(c, k + 1, t);
  }
}

static void notify(struct sockComm* c) { anycclNetNotify(c->notifyFd, c->notifyAsleep); }

/* A task finished (lock held). */
static void taskDone(struct sockComm* c, struct task* t) {
  struct req* r = t->req;
  int kind = t->header && !c->isSend ? netParseMsgHeader(&r->hdr, r->size, &r->got, &r->tag) : 0;
  if (t->header && !c->isSend && kind == 1) {
    __atomic_store_n(&c->peerClosed, 1, __ATOMIC_RELEASE);
    r->got = SIZE_MAX;
  } else if (t->header && !c->isSend) {
    if (kind < 0) {
      WARN("NET/Socket: message of %llu bytes arrived for a receive of %zu bytes", (unsigned long long)r->hdr.size,
           r->size);
      c->error = ncclInternalError;
    } else {
      void* to = c->pick && r->got > 0 ? c->pick(c->pickArg, r->data, r->got, (uint32_t)r->tag) : NULL;
      if (to) r->data = to;
      enqueueData(c, r, r->got);
    }
  }
  if (--r->pending == 0) {
    r->done = 1;
    notify(c);
  }
}

/* Advance socket s as far as it goes without blocking. Only the owner of s
 * (its helper thread, or test() without threads) calls this. */
static int progressSocket(struct sockComm* c, int s) {
  int progressed = 0;
  for (;;) {
    pthread_mutex_lock(&c->lock);
    struct task* t = c->qhead[s];
    pthread_mutex_unlock(&c->lock);
    /* after a goodbye the control socket is at EOF; data sockets may still
     * carry the last message */
    if (t == NULL || __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != ncclSuccess ||
        (s == 0 && __atomic_load_n(&c->peerClosed, __ATOMIC_ACQUIRE)))
      return progressed;
    size_t before = t->off;
    ncclResult_t res = ncclSocketProgress(&c->socks[s], c->isSend ? NCCL_SOCKET_SEND : NCCL_SOCKET_RECV, t->ptr,
                                          t->len, &t->off);
    if (res != ncclSuccess) {
      pthread_mutex_lock(&c->lock);
      if (c->error == ncclSuccess) {
        __atomic_store_n(&c->error, res == ncclRemoteError ? ncclRemoteError : ncclSystemError, __ATOMIC_RELEASE);
        INFO(NCCL_NET, "NET/Socket: socket %d of a connection failed (%s)", s, ncclSocketErrorString(c->socks[s].err));
      }
      pthread_mutex_unlock(&c->lock);
      notify(c);
      return progressed;
    }
    if (t->off > before) progressed = 1;
    if (t->off < t->len) return progressed;
    pthread_mutex_lock(&c->lock);
    c->qhead[s] = t->next;
    if (c->qhead[s] == NULL) c->qtail[s] = NULL;
    taskDone(c, t);
    pthread_mutex_unlock(&c->lock);
    progressed = 1;
  }
}

static void* helperMain(void* arg) {
  struct sockComm* c = ((void**)arg)[0];
  int me = (int)(intptr_t)((void**)arg)[1];
  free(arg);
  struct pollfd pfd[MAX_SOCKS + 2];
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    int progressed = 0;
    for (int s = me; s <= c->nsocks; s += c->nthreads) progressed |= progressSocket(c, s);
    if (progressed) continue;
    int n = 0;
    pthread_mutex_lock(&c->lock);
    for (int s = me; s <= c->nsocks; s += c->nthreads)
      if (c->qhead[s] && c->error == ncclSuccess)
        pfd[n++] = (struct pollfd){c->socks[s].fd, c->isSend ? POLLOUT : POLLIN, 0};
    pthread_mutex_unlock(&c->lock);
    pfd[n++] = (struct pollfd){c->wakeFd[me], POLLIN, 0};
    if (poll(pfd, n, NCCL_SOCKET_POLL_MS) > 0 && (pfd[n - 1].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = read(c->wakeFd[me], &v, sizeof(v));
      (void)r;
    }
  }
  return NULL;
}

static ncclResult_t commCreate(struct sockComm** out, int isSend, int nsocks, volatile uint32_t* abortFlag) {
  struct sockComm* c;
  ANYCCL_CALLOC(c, 1);
  c->isSend = isSend;
  c->nsocks = nsocks;
  c->notifyFd = -1;
  c->abortFlag = abortFlag;
  pthread_mutex_init(&c->lock, NULL);
  for (int i = 0; i <= MAX_SOCKS; i++) ncclSocketInit(&c->socks[i], abortFlag, NULL);
  *out = c;
  return ncclSuccess;
}

static ncclResult_t startThreads(struct sockComm* c) {
  int nt = (int)anycclParamInt(PARAM_SOCKET_NTHREADS);
  if (nt < 0) nt = 0;
  if (nt > MAX_THREADS) nt = MAX_THREADS;
  if (nt > c->nsocks + 1) nt = c->nsocks + 1;
  for (int t = 0; t < nt; t++) {
    c->wakeFd[t] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wakeFd[t] < 0) return ncclSystemError;
  }
  c->nthreads = nt;
  for (int t = 0; t < nt; t++) {
    void** arg = malloc(2 * sizeof(void*));
    if (arg == NULL) return ncclSystemError;
    arg[0] = c;
    arg[1] = (void*)(intptr_t)t;
    if (pthread_create(&c->threads[t], NULL, helperMain, arg) != 0) {
      free(arg);
      c->nthreads = t;
      WARN("NET/Socket: cannot start helper thread %d", t);
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

static void commDestroy(struct sockComm* c) {
  /* A healthy sender says goodbye so that the receiver can tell a normal
   * close from a peer that died. */
  int idle = 1;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i <= c->nsocks; i++) idle &= c->qhead[i] == NULL;
  int healthy = c->error == ncclSuccess;
  pthread_mutex_unlock(&c->lock);
  __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
  for (int t = 0; t < c->nthreads; t++) {
    uint64_t one = 1;
    ssize_t r = write(c->wakeFd[t], &one, sizeof(one));
    (void)r;
  }
  for (int t = 0; t < c->nthreads; t++) {
    pthread_join(c->threads[t], NULL);
    close(c->wakeFd[t]);
  }
  if (c->isSend && idle && healthy && c->socks[0].fd >= 0) {
    struct netMsgHeader bye = {0, NET_BYE_TAG, 0};
    ncclSocketSend(&c->socks[0], &bye, sizeof(bye), ncclSocketDeadlineMs(1000));
  }
  for (int i = 0; i <= c->nsocks; i++) ncclSocketClose(&c->socks[i]);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* ---- connection setup -------------------------------------------------------- */
static int nsocksParam(void) {
  int nt = (int)anycclParamInt(PARAM_SOCKET_NTHREADS);
  int per = (int)anycclParamInt(PARAM_NSOCKS_PERTHREAD);
  if (nt < 1) nt = 1;
  if (per < 1) per = 1;
  int n = nt * per;
  return n > MAX_SOCKS ? MAX_SOCKS : n;
}

/* A dropped connection must surface as an error in bounded time even when no
 * RST arrives: unacknowledged data (TCP_USER_TIMEOUT) and idle silence
 * (keepalive) both count. */
void netSetLiveness(struct ncclSocket* s) {
  int secs = (int)anycclParamInt(PARAM_NET_TIMEOUT);
  if (secs <= 0 || s->fd < 0) return;
  int one = 1, ms = secs * 1000, idle = secs / 2 > 0 ? secs / 2 : 1, intvl = 1, cnt = secs - idle > 0 ? secs - idle : 1;
  setsockopt(s->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  setsockopt(s->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* Connection setup meets the bootstrap's bound (-1: none; 0 s must not mean "now"). */
static int64_t setupDeadline(void) { return ncclSocketDeadlineMs(bootstrapTimeoutMs()); }

static ncclResult_t netListen(int dev, void* opaque, void** out, volatile uint32_t* abortFlag) {
  NCCLCHECK(netInit());
  if (dev < 0 || dev >= nIfs) dev = 0;
  struct listenComm* l;
  ANYCCL_CALLOC(l, 1);
  ncclSocketInit(&l->sock, abortFlag, NULL);
  union ncclSocketAddress a = ifAddrs[dev];
  ncclSocketAddrSetPort(&a, 0);
  ncclResult_t res = ncclSocketListen(&l->sock, &a, 0);
  if (res != ncclSuccess) {
    free(l);
    return res;
  }
  l->abortFlag = abortFlag;
  l->handle.magic = NET_MAGIC;
  if (getrandom(&l->handle.cookie, sizeof(l->handle.cookie), 0) != sizeof(l->handle.cookie))
    l->handle.cookie = (uint64_t)(uintptr_t)l ^ (uint64_t)ncclSocketClockMs();
  l->handle.addr = l->sock.addr;
  l->handle.nsocks = nsocksParam();
  memset(opaque, 0, ANYCCL_NET_HANDLE_MAXSIZE);
  memcpy(opaque, &l->handle, sizeof(l->handle));
  *out = l;
  return ncclSuccess;
}

int anycclNetSocketListenReady(void* listenComm) {
  struct listenComm* l = listenComm;
  struct pollfd p = {l->sock.fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP));
}

static ncclResult_t netConnect(int dev, const void* opaque, void** out, volatile uint32_t* abortFlag) {
  struct netSockHandle h;
  char why[200];
  if (netParseHandle(opaque, ANYCCL_NET_HANDLE_MAXSIZE, &h, why, sizeof(why)) != ncclSuccess) {
    WARN("NET/Socket: connect handle is corrupt: %s", why);
    return ncclInternalError;
  }
  struct sockComm* c;
  NCCLCHECK(commCreate(&c, 1, h.nsocks, abortFlag));
  ncclResult_t res = ncclSuccess;
  int64_t deadline = setupDeadline();
  for (int i = 0; i <= h.nsocks && res == ncclSuccess; i++) {
    res = ncclSocketConnect(&c->socks[i], &h.addr, deadline, "NET/Socket peer", "check the network and NCCL_SOCKET_IFNAME");
    struct netHello hi = {NET_MAGIC, h.cookie, i, h.nsocks};
    if (res == ncclSuccess) res = ncclSocketSend(&c->socks[i], &hi, sizeof(hi), deadline);
  }
  for (int i = 0; i <= h.nsocks && res == ncclSuccess; i++) netSetLiveness(&c->socks[i]);
  if (res == ncclSuccess) res = startThreads(c);
  if (res != ncclSuccess) {
    commDestroy(c);
    return res;
  }
  *out = c;
  return ncclSuccess;
}

/* Accept the control and data sockets of one connection; anything that
 * does not present the magic and this listener's cookie is dropped. */
static ncclResult_t netAccept(void* opaque, void** out) {
  struct listenComm* l = opaque;
  struct sockComm* c;
  NCCLCHECK(commCreate(&c, 0, l->handle.nsocks, l->abortFlag));
  int64_t deadline = setupDeadline();
  int have = 0;
  ncclResult_t res = ncclSuccess;
  while (have < l->handle.nsocks + 1) {
    struct ncclSocket s;
    ncclSocketInit(&s, l->abortFlag, NULL);
    res = ncclSocketAccept(&l->sock, &s, deadline);
    if (res != ncclSuccess) break;
    struct netHello hi;
    int64_t helloDeadline = ncclSocketDeadlineMs(2000);
    if (ncclSocketRecv(&s, &hi, sizeof(hi), helloDeadline) != ncclSuccess ||
        netParseHello(&hi, sizeof(hi), &l->handle, &hi) != ncclSuccess || c->socks[hi.index].fd >= 0) {
      char buf[NCCL_SOCKET_NAME_MAXLEN];
      INFO(NCCL_NET, "NET/Socket: dropped a connection from %s that is not ours", ncclSocketToString(&s.addr, buf));
      ncclSocketClose(&s);
      continue;
    }
    c->socks[hi.index] = s;
    netSetLiveness(&c->socks[hi.index]);
    have++;
  }
  if (res == ncclSuccess) res = startThreads(c);
  if (res != ncclSuccess) {
    commDestroy(c);
    return res;
  }
  *out = c;
  return ncclSuccess;
}

static ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = NULL;
  return ncclSuccess;
}
static ncclResult_t netDeregMr(void* comm, void* mhandle) { return ncclSuccess; }

/* ---- data ---------------------------------------------------------------------- */
static struct req* reqAlloc(struct sockComm* c) {
  for (int i = 0; i < ANYCCL_NET_MAX_REQUESTS; i++)
    if (!c->reqs[i].used) {
      struct req* r = &c->reqs[i];
      memset(r, 0, offsetof(struct req, tasks));
      r->used = 1;
      r->comm = c;
      return r;
    }
  return NULL;
}

static ncclResult_t netIsend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  struct sockComm* c = comm;
  *request = NULL;
  pthread_mutex_lock(&c->lock);
  ncclResult_t err = c->error;
  struct req* r = err == ncclSuccess ? reqAlloc(c) : NULL;
  if (r) {
    r->send = 1;
    r->data = data;
    r->size = size;
    r->hdr = (struct netMsgHeader){size, tag, 0};
    struct task* t = &r->tasks[0];
    *t = (struct task){(char*)&r->hdr, sizeof(r->hdr), 0, r, 1, NULL};
    r->pending = 1;
    enqueue(c, 0, t);
    enqueueData(c, r, size);
  }
  pthread_mutex_unlock(&c->lock);
  *request = r;
  return err;
}

static ncclResult_t netIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** request) {
  struct sockComm* c = comm;
  *request = NULL;
  if (n != 1) {
    WARN("NET/Socket: grouped receives (n=%d) are not supported", n);
    return ncclInternalError;
  }
  pthread_mutex_lock(&c->lock);
  ncclResult_t err = c->error;
  struct req* r = err == ncclSuccess ? reqAlloc(c) : NULL;
  if (r) {
    r->data = data[0];
    r->size = sizes[0];
    struct task* t = &r->tasks[0];
    *t = (struct task){(char*)&r->hdr, sizeof(r->hdr), 0, r, 1, NULL};
    r->pending = 1;
    enqueue(c, 0, t);
  }
  pthread_mutex_unlock(&c->lock);
  *request = r;
  return err;
}

static ncclResult_t netTestTag(void* request, int* done, size_t* sizes, int* tag) {
  struct req* r = request;
  struct sockComm* c = r->comm;
  *done = 0;
  if (c->nthreads == 0)
    for (int s = 0; s <= c->nsocks; s++) progressSocket(c, s);
  pthread_mutex_lock(&c->lock);
  ncclResult_t err = c->peerClosed && !r->done ? ncclSuccess : c->error;
  if (err == ncclSuccess && r->done) {
    *done = 1;
    if (sizes) *sizes = r->send ? r->size : r->got;
    if (tag) *tag = r->send ? 0 : r->tag;
    r->used = 0;
  }
  pthread_mutex_unlock(&c->lock);
  return err;
}

static ncclResult_t netTest(void* request, int* done, size_t* sizes) { return netTestTag(request, done, sizes, NULL); }

static ncclResult_t netCloseComm(void* comm) {
  if (comm) commDestroy(comm);
  return ncclSuccess;
}

static ncclResult_t netCloseListen(void* opaque) {
  struct listenComm* l = opaque;
  if (l) {
    ncclSocketClose(&l->sock);
    free(l);
  }
  return ncclSuccess;
}

static void netSetNotify(void* comm, int fd, const int32_t* asleep) {
  struct sockComm* c = comm;
  pthread_mutex_lock(&c->lock);
  c->notifyFd = fd;
  c->notifyAsleep = asleep;
  pthread_mutex_unlock(&c->lock);
}

static void netSetPick(void* comm, void* (*pick)(void*, void*, size_t, uint32_t), void* arg) {
  struct sockComm* c = comm;
  pthread_mutex_lock(&c->lock);
  c->pick = pick;
  c->pickArg = arg;
  pthread_mutex_unlock(&c->lock);
}

/* Without helper threads test() moves the bytes: the proxy polls these. */
static int netPollFds(void* comm, struct pollfd* fds, int max) {
  struct sockComm* c = comm;
  int n = 0;
  if (c->nthreads > 0) return 0;
  pthread_mutex_lock(&c->lock);
  for (int s = 0; s <= c->nsocks && n < max; s++)
    if (c->qhead[s] && c->error == ncclSuccess && !(s == 0 && c->peerClosed))
      fds[n++] = (struct pollfd){c->socks[s].fd, c->isSend ? POLLOUT : POLLIN, 0};
  pthread_mutex_unlock(&c->lock);
  return n;
}

const anycclNet_t anycclNetSocket = {
    "Socket",   netInit,   netDevices,    netGetProperties, netListen,    netConnect,    netAccept,
    netRegMr,   netDeregMr, netIsend,     netIrecv,         netTest,      netCloseComm,  netCloseComm,
    netCloseListen, netSetNotify, netTestTag, netPollFds, netSetPick, NULL, NULL /* connect and accept block */};
