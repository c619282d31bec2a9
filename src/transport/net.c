/* The network transport: a proxy thread per communicator moves FIFO slots
 * between hosts through the net table (anycclNet_t, sockets built in).
 *
 * Send side: the executor fills a staging FIFO in local memory exactly as it
 * would fill a peer's FIFO; the proxy isends each posted slot and frees it
 * (head) when the send completes. Receive side: the proxy irecvs into free
 * slots of the receiver's own FIFO and publishes them (tail). The executor
 * cannot tell a remote peer from a local one. Flow control: at most nslots
 * messages in flight per connection, and TCP's window behind that. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "exec.h"
#include "net.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

struct netConn {
  struct anycclConn* conn; /* the executor's end */
  int send;
  void* netComm;
  void* listenComm;
  int channel;             /* ring channel (spreads listens over devices), -1: p2p */
  void* reqs[ANYCCL_MAX_SLOTS];
  uint64_t posted, done;
  uint64_t doneShared;     /* copy of done for other threads (atomic) */
  int closed;              /* the peer closed this connection normally */
  int broken;              /* failed while the proxy looked for a mismatch report */
  char* staging;           /* send: ctrl + slots, owned here */
  void* mhandle;           /* the slots registered with the net table (regMr) */
};

struct anycclProxy {
  struct ncclComm* comm;
  const anycclNet_t* net;
  struct netConn* conns;
  int nconns;
  struct anycclBell bell;  /* rung by the executor; wakes the proxy through efd */
  int efd;
  pthread_t thread;
  int started;
  int stop;
  int exited; /* the proxy thread gave up on an error */
  int gpu;    /* the executor is a GPU: it cannot ring the bell, so the proxy polls */
  int polling; /* gpu, or a net table without notification: poll while busy */
  struct pollfd* pfds; /* the bell + the tables' pollFds */
  int maxPfds;
};

static size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int progressSend(struct anycclProxy* p, struct netConn* nc, ncclResult_t* err) {
  struct anycclConn* c = nc->conn;
  int progressed = 0;
  uint64_t tail = __atomic_load_n(&c->ctrl->tail, __ATOMIC_ACQUIRE);
  while (nc->posted < tail) {
    int slot = nc->posted % c->nslots;
    void* req = NULL;
    uint64_t word = c->ctrl->sizes[slot]; /* bytes | operation tag << 32 (transport.h) */
    /* Only a net with testTag hands the tag back; the others (the P2P engine,
     * NCCL plugins) match receives by tag, and receives are posted with 0. */
    int tag = p->net->testTag ? (int)(word >> 32) : 0;
    char* data = c->buf + slot * c->slotBytes;
    if (c->sendRef && c->sendRef[slot]) data = c->sendRef[slot]; /* the user's bytes, in place */
    *err = p->net->isend(nc->netComm, data, (uint32_t)word, tag, nc->mhandle, &req);
    if (*err != ncclSuccess || req == NULL) break;
    nc->reqs[slot] = req;
    if (c->sendRef) c->sendRef[slot] = NULL; /* the slot's next use sets it again if it wants */
    nc->posted++;
    progressed = 1;
  }
  while (*err == ncclSuccess && nc->done < nc->posted) {
    int d = 0;
    *err = p->net->test(nc->reqs[nc->done % c->nslots], &d, NULL);
    if (!d) break;
    nc->done++;
    __atomic_store_n(&nc->doneShared, nc->done, __ATOMIC_RELEASE);
    __atomic_store_n(&c->ctrl->head, nc->done, __ATOMIC_RELEASE);
    if (p->comm->bell) anycclBellRing(p->comm->bell);
    progressed = 1;
  }
  return progressed;
}

static int progressRecv(struct anycclProxy* p, struct netConn* nc, ncclResult_t* err) {
  struct anycclConn* c = nc->conn;
  int progressed = 0;
  uint64_t head = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
  while (nc->posted < head + c->nslots) {
    int slot = nc->posted % c->nslots;
    void* data = c->buf + slot * c->slotBytes;
    size_t size = c->slotBytes;
    void* req = NULL;
    int tag = 0;
    void* mh = nc->mhandle;
    if (c->recvRef) c->recvRef[slot].posted = nc->posted; /* read by pickRecv, under the table's lock */
    *err = p->net->irecv(nc->netComm, 1, &data, &size, &tag, &mh, &req);
    if (*err != ncclSuccess || req == NULL) break;
    nc->reqs[slot] = req;
    nc->posted++;
    progressed = 1;
  }
  while (*err == ncclSuccess && nc->done < nc->posted) {
    int d = 0;
    size_t got = 0;
    int slot = nc->done % c->nslots, rtag = 0;
    *err = p->net->testTag ? p->net->testTag(nc->reqs[slot], &d, &got, &rtag) : p->net->test(nc->reqs[slot], &d, &got);
    if (!d) break;
    if (got == SIZE_MAX) { /* goodbye: the peer destroyed its communicator */
      nc->closed = 1;
      break;
    }
    uint32_t tag = (uint32_t)rtag; /* the operation tag of the slot (transport.h) */
    c->ctrl->sizes[slot] = anycclSizeWord(got, tag);
    if (tag == ANYCCL_TAG_POISON) anycclMismatchRemote(p->comm, c->peer, c->buf + slot * c->slotBytes, got);
    else if (p->comm->cuda) anycclCudaSlotTag(p->comm, c->peer, tag);
    nc->done++;
    __atomic_store_n(&c->ctrl->tail, nc->done, __ATOMIC_RELEASE);
    if (p->comm->bell) anycclBellRing(p->comm->bell);
    progressed = 1;
  }
  return progressed;
}

/* The table asks where message bytes go (setPick): to the user memory the
 * executor bound to this message, when the message is the one it expects. */
static void* pickRecv(void* arg, void* posted, size_t size, uint32_t tag) {
  struct anycclConn* c = arg;
  if ((char*)posted < c->buf) return NULL;
  size_t off = (size_t)((char*)posted - c->buf);
  if (off % c->slotBytes != 0 || off / c->slotBytes >= (size_t)c->nslots) return NULL;
  struct anycclRecvRef* r = &c->recvRef[off / c->slotBytes];
  uint64_t m = r->posted;
  if (__atomic_load_n(&r->msg, __ATOMIC_ACQUIRE) != m + 1 || r->word != anycclSizeWord(size, tag)) return NULL;
  __atomic_store_n(&r->taken, m + 1, __ATOMIC_RELEASE);
  return r->ptr;
}

/* A GPU posts slots without a doorbell: while work is recent (a launch
 * kicked the proxy, or slots moved, within GPU_ACTIVE_MS) the proxy polls
 * the FIFOs and yields; after that it sleeps in poll() GPU_IDLE_MS at a time
 * (the first step after a long idle period can wait that long). */
#define GPU_ACTIVE_MS 20
#define GPU_IDLE_MS 1

/* Error path: give the other receive connections up to 300 ms to deliver a
 * mismatch report (anycclMismatchRemote) before the loss is reported. */
static void graceForReport(struct anycclProxy* p, int failed) {
  int64_t end = ncclSocketClockMs() + 300;
  while (!__atomic_load_n(&p->comm->mismatchWarned, __ATOMIC_ACQUIRE) && ncclSocketClockMs() < end &&
         !__atomic_load_n(&p->comm->abortFlag, __ATOMIC_ACQUIRE)) {
    int live = 0;
    for (int i = 0; i < p->nconns; i++) {
      struct netConn* nc = &p->conns[i];
      ncclResult_t e = ncclSuccess;
      if (i == failed || nc->send || nc->closed || nc->broken) continue;
      progressRecv(p, nc, &e);
      if (e != ncclSuccess) nc->broken = 1;
      else live = 1;
    }
    if (!live) return;
    usleep(1000);
  }
}

static void* proxyMain(void* arg) {
  struct anycclProxy* p = arg;
  struct ncclComm* comm = p->comm;
  int64_t active = ncclSocketClockMs();
  while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
    int progressed = 0, failed = -1;
    ncclResult_t err = ncclSuccess;
    for (int i = 0; i < p->nconns && err == ncclSuccess; i++) {
      struct netConn* nc = &p->conns[i];
      if (nc->closed) continue;
      progressed |= nc->send ? progressSend(p, nc, &err) : progressRecv(p, nc, &err);
      if (err != ncclSuccess) failed = i;
    }
    if (err != ncclSuccess) {
      /* A peer that found a mismatch sends its report and aborts: its other
       * connections may break before ours has delivered the report. */
      graceForReport(p, failed);
      /* (after a mismatch report the peers abort: no second WARN) */
      if (!__atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) && !__atomic_load_n(&comm->mismatchWarned, __ATOMIC_ACQUIRE)) {
        const struct netConn* nc = &p->conns[failed];
        WARN("NET: rank %d lost its %s connection to rank %d (%s): the peer is gone or the network dropped it "
             "(ANYCCL_NET_TIMEOUT); the communicator is in error (ncclCommAbort it)",
             comm->rank, nc->send ? "send" : "receive", nc->conn->peer, ncclGetErrorString(err));
        anycclCommSetError(comm, err == ncclRemoteError ? ncclRemoteError : ncclSystemError);
      }
      anycclExecAbort(comm); /* waits on this peer (threads, kernels) stop now */
      __atomic_store_n(&p->exited, 1, __ATOMIC_RELEASE);
      break;
    }
    if (p->polling && progressed) active = ncclSocketClockMs();
    if (progressed) {
      __atomic_store_n(&p->bell.fdAsleep, 0, __ATOMIC_RELAXED);
      continue;
    }
    if (comm->cuda) anycclCudaSlotTag(comm, -1, 0); /* a tag that came before the GPU reached its collective */
    if (p->polling && ncclSocketClockMs() - active < GPU_ACTIVE_MS) {
      sched_yield();
      continue;
    }
    /* about to sleep: from now on rings and completions write the eventfd;
     * one more pass catches what came before they could see the flag */
    if (!__atomic_load_n(&p->bell.fdAsleep, __ATOMIC_RELAXED)) {
      __atomic_store_n(&p->bell.fdAsleep, 1, __ATOMIC_RELAXED);
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      continue;
    }
    /* the bell, and the sockets of tables whose test() does the I/O */
    int n = 0;
    p->pfds[n++] = (struct pollfd){p->efd, POLLIN, 0};
    for (int i = 0; i < p->nconns && p->net->pollFds; i++)
      if (!p->conns[i].closed && p->conns[i].netComm)
        n += p->net->pollFds(p->conns[i].netComm, p->pfds + n, p->maxPfds - n);
    if (poll(p->pfds, (nfds_t)n, p->polling ? GPU_IDLE_MS : NCCL_SOCKET_POLL_MS) > 0) {
      if (p->pfds[0].revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(p->efd, &v, sizeof(v));
        (void)r;
      }
      active = ncclSocketClockMs();
    }
    __atomic_store_n(&p->bell.fdAsleep, 0, __ATOMIC_RELAXED);
  }
  return NULL;
}

/* The FIFO index a connection uses in the receiver's segment is also the
 * bootstrap tag that carries its listen handle. */
#define NET_TAG(fifo) (0x4e000 + (fifo))
/* The sender's answer: the name of its network, on a tag of its own. */
#define NET_NAME_TAG(fifo) (0x10000000 + (fifo))
#define NET_NAME_MAX 32

/* Every rank picks its network alone (a plugin that fails to initialise on
 * one host leaves those ranks on the built-in one); handles of different
 * networks mean nothing to each other. Says so, naming both. */
static ncclResult_t netNameCheck(const struct ncclComm* comm, int peer, const char* mine, const char* theirs) {
  if (strncmp(mine, theirs, NET_NAME_MAX) == 0) return ncclSuccess;
  char shown[NET_NAME_MAX]; /* the peer's bytes, printable */
  int n = 0;
  for (; n < NET_NAME_MAX - 1 && theirs[n]; n++) shown[n] = theirs[n] >= 0x20 && theirs[n] < 0x7f ? theirs[n] : '?';
  shown[n] = '\0';
  WARN("NET: rank %d uses network '%s', its peer rank %d uses '%s': every rank must use the same network (a "
       "NCCL_NET_PLUGIN that failed to initialise on some hosts leaves their ranks on the built-in one; see their WARN)",
       comm->rank, mine, peer, shown);
  return ncclInvalidUsage;
}

ncclResult_t anycclNetSetup(struct ncclComm* comm) {
  int n = comm->nRanks;
  int count = 0;
  for (int ch = 0; ch < comm->nChannels; ch++) count += comm->ringSend[ch].net + comm->ringRecv[ch].net;
  for (int q = 0; q < n; q++)
    if (q != comm->rank) count += comm->p2pSend[q].net + comm->p2pRecv[q].net;
  if (count == 0) return ncclSuccess;
  struct anycclNetEnd* ends;
  ANYCCL_CALLOC(ends, count);
  int k = 0;
  for (int ch = 0; ch < comm->nChannels; ch++) {
    if (comm->ringSend[ch].net) ends[k++] = (struct anycclNetEnd){&comm->ringSend[ch], 1, ch};
    if (comm->ringRecv[ch].net) ends[k++] = (struct anycclNetEnd){&comm->ringRecv[ch], 0, ch};
  }
  for (int q = 0; q < n; q++) {
    if (q == comm->rank) continue;
    if (comm->p2pSend[q].net) ends[k++] = (struct anycclNetEnd){&comm->p2pSend[q], 1, -1};
    if (comm->p2pRecv[q].net) ends[k++] = (struct anycclNetEnd){&comm->p2pRecv[q], 0, -1};
  }
  ncclResult_t res = anycclNetStart(comm, ends, count, 0);
  free(ends);
  for (int ch = 0; ch < comm->nChannels && res == ncclSuccess; ch++)
    if (comm->ringSend[ch].net)
      INFO(NCCL_INIT | NCCL_NET, "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/0", ch, comm->nChannels,
           comm->rank, comm->cudaDev, comm->ringSend[ch].peer, comm->peerInfo[comm->ringSend[ch].peer].cudaDev,
           comm->proxy->net->name);
  return res;
}

void anycclNetKick(struct ncclComm* comm) {
  if (comm->proxy) anycclBellRing(&comm->proxy->bell);
}

int anycclNetCarriesTags(const struct ncclComm* comm) { return comm->proxy == NULL || comm->proxy->net->testTag != NULL; }

ncclResult_t anycclNetConnectAll(const anycclNet_t* net, int nSend, char (*handles)[ANYCCL_NET_HANDLE_MAXSIZE],
                                 void** sendComms, int nRecv, void** listenComms, void** recvComms,
                                 volatile uint32_t* abortFlag) {
  if (net->connectStep == NULL || net->acceptStep == NULL) {
    for (int i = 0; i < nSend; i++) NCCLCHECK(net->connect(0, handles[i], &sendComms[i], abortFlag));
    for (int j = 0; j < nRecv; j++) NCCLCHECK(net->accept(listenComms[j], &recvComms[j]));
    return ncclSuccess;
  }
  for (int i = 0; i < nSend; i++) sendComms[i] = NULL;
  for (int j = 0; j < nRecv; j++) recvComms[j] = NULL;
  const int64_t deadline = ncclSocketDeadlineMs(bootstrapTimeoutMs());
  for (;;) {
    int left = 0;
    for (int i = 0; i < nSend; i++)
      if (sendComms[i] == NULL) {
        NCCLCHECK(net->connectStep(0, handles[i], &sendComms[i]));
        left += sendComms[i] == NULL;
      }
    for (int j = 0; j < nRecv; j++)
      if (recvComms[j] == NULL) {
        NCCLCHECK(net->acceptStep(listenComms[j], &recvComms[j]));
        left += recvComms[j] == NULL;
      }
    if (left == 0) return ncclSuccess;
    if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE)) return ncclInternalError;
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("NET/%s: %d of %d connections not up within ANYCCL_BOOTSTRAP_TIMEOUT: are all peers running and "
           "reachable over this network?", net->name, left, nSend + nRecv);
      return ncclSystemError;
    }
    usleep(100);
  }
}

ncclResult_t anycclNetStart(struct ncclComm* comm, const struct anycclNetEnd* ends, int count, int gpu) {
  struct anycclProxy* p;
  ANYCCL_CALLOC(p, 1);
  comm->proxy = p;
  p->comm = comm;
  p->gpu = gpu;
  p->net = anycclNetDefault();
  /* a table that cannot notify (a plugin) is polled while busy, as for a GPU */
  p->polling = gpu || p->net->setNotify == NULL;
  p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->efd < 0) return ncclSystemError;
  p->bell.eventFd1 = p->efd + 1;
  NCCLCHECK(p->net->init());
  int ndev = 0;
  NCCLCHECK(p->net->devices(&ndev));
  ANYCCL_CALLOC(p->conns, count);
  p->maxPfds = 1 + count * (NET_MAX_SOCKS + 1);
  ANYCCL_CALLOC(p->pfds, p->maxPfds);
  for (int i = 0; i < count; i++) {
    struct netConn* nc = &p->conns[p->nconns++];
    nc->conn = ends[i].conn;
    nc->send = ends[i].send;
    nc->channel = ends[i].channel;
  }
  /* 1. receivers listen and send their handles; 2. senders connect and
   * receivers accept (the built-in tables' connects complete in the
   * kernel's backlog; plugins' are stepped with the accepts). */
  size_t fifoBytes = alignUp(sizeof(struct anycclFifoCtrl), 4096) + (size_t)comm->nslots * comm->slotBytes;
  for (int i = 0; i < p->nconns; i++) {
    struct netConn* nc = &p->conns[i];
    struct anycclConn* c = nc->conn;
    c->peerBell = &p->bell;
    if (nc->send) continue;
    /* channels spread over the network devices (NCCL_SOCKET_IFNAME may
     * name several): ring channel c listens on device c mod ndev */
    int dev = nc->channel >= 0 && ndev > 0 ? nc->channel % ndev : 0;
    char hello[NET_NAME_MAX + ANYCCL_NET_HANDLE_MAXSIZE] = {0}; /* network name, handle */
    strncpy(hello, p->net->name, NET_NAME_MAX - 1);
    NCCLCHECK(p->net->listen(dev, hello + NET_NAME_MAX, &nc->listenComm, &comm->abortFlag));
    NCCLCHECK(bootstrapSend(comm->bootstrap, c->peer, NET_TAG(c->fifoIndex), hello, sizeof(hello)));
  }
  /* the handles, then every connect and accept (stepped in turn for plugins) */
  int nSend = 0, nRecv = 0;
  for (int i = 0; i < p->nconns; i++) p->conns[i].send ? nSend++ : nRecv++;
  char(*handles)[ANYCCL_NET_HANDLE_MAXSIZE] = calloc(nSend ? nSend : 1, ANYCCL_NET_HANDLE_MAXSIZE);
  void** comms = calloc(2 * (size_t)p->nconns + 1, sizeof(void*)); /* send comms, listen comms, recv comms */
  ncclResult_t res = handles && comms ? ncclSuccess : ncclSystemError, match = ncclSuccess;
  char mine[NET_NAME_MAX] = {0}, theirs[NET_NAME_MAX];
  strncpy(mine, p->net->name, NET_NAME_MAX - 1);
  /* senders take the handles and answer with their network's name (always,
   * so that a receiver never waits for it), receivers check the answers */
  for (int i = 0, s = 0, r = 0; i < p->nconns && res == ncclSuccess; i++) {
    struct netConn* nc = &p->conns[i];
    if (!nc->send) {
      comms[nSend + r++] = nc->listenComm;
      continue;
    }
    char hello[NET_NAME_MAX + ANYCCL_NET_HANDLE_MAXSIZE];
    res = bootstrapRecv(comm->bootstrap, nc->conn->peer, NET_TAG(nc->conn->fifoIndex), hello, sizeof(hello));
    if (res == ncclSuccess) res = bootstrapSend(comm->bootstrap, nc->conn->peer, NET_NAME_TAG(nc->conn->fifoIndex), mine, NET_NAME_MAX);
    if (res != ncclSuccess) break;
    memcpy(handles[s++], hello + NET_NAME_MAX, ANYCCL_NET_HANDLE_MAXSIZE);
    if (match == ncclSuccess) match = netNameCheck(comm, nc->conn->peer, mine, hello);
  }
  for (int i = 0; i < p->nconns && res == ncclSuccess; i++) {
    struct netConn* nc = &p->conns[i];
    if (nc->send) continue;
    res = bootstrapRecv(comm->bootstrap, nc->conn->peer, NET_NAME_TAG(nc->conn->fifoIndex), theirs, NET_NAME_MAX);
    if (res == ncclSuccess && match == ncclSuccess) match = netNameCheck(comm, nc->conn->peer, mine, theirs);
  }
  if (res == ncclSuccess) res = match;
  if (res == ncclSuccess)
    res = anycclNetConnectAll(p->net, nSend, handles, comms, nRecv, comms + nSend, comms + nSend + nRecv, &comm->abortFlag);
  for (int i = 0, s = 0, r = 0; i < p->nconns && comms; i++) /* kept even on failure: closed with the proxy */
    p->conns[i].netComm = p->conns[i].send ? comms[s++] : comms[nSend + nRecv + r++];
  free(handles);
  free(comms);
  NCCLCHECK(res);
  for (int i = 0; i < p->nconns; i++) {
    struct netConn* nc = &p->conns[i];
    struct anycclConn* c = nc->conn;
    if (!nc->send) continue;
    if (c->ctrl == NULL) { /* the caller gave no staging FIFO: host memory of our own */
      if (posix_memalign((void**)&nc->staging, 4096, fifoBytes) != 0) return ncclSystemError;
      memset(nc->staging, 0, alignUp(sizeof(struct anycclFifoCtrl), 4096));
      c->ctrl = (struct anycclFifoCtrl*)nc->staging;
      c->buf = nc->staging + alignUp(sizeof(struct anycclFifoCtrl), 4096);
    }
    if (p->net->setNotify) p->net->setNotify(nc->netComm, p->efd, &p->bell.fdAsleep);
    NCCLCHECK(p->net->regMr(nc->netComm, c->buf, (size_t)c->nslots * c->slotBytes, 0, &nc->mhandle));
    /* The built-in tables send from any host memory (plugins need it
     * registered): the cpu executor may post user memory by reference. */
    if (!gpu && (p->net == &anycclNetSocket || p->net == &anycclNetP2p)) ANYCCL_CALLOC(c->sendRef, c->nslots);
  }
  for (int i = 0; i < p->nconns; i++) {
    struct netConn* nc = &p->conns[i];
    if (nc->send) continue;
    if (p->net->setNotify) p->net->setNotify(nc->netComm, p->efd, &p->bell.fdAsleep);
    NCCLCHECK(p->net->regMr(nc->netComm, nc->conn->buf, (size_t)nc->conn->nslots * nc->conn->slotBytes, 0,
                            &nc->mhandle));
    if (!gpu && p->net->setPick && (p->net == &anycclNetSocket || p->net == &anycclNetP2p)) {
      ANYCCL_CALLOC(nc->conn->recvRef, nc->conn->nslots);
      p->net->setPick(nc->netComm, pickRecv, nc->conn);
    }
    p->net->closeListen(nc->listenComm);
    nc->listenComm = NULL;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/%s: rank %d has %d network connections, proxy thread started", p->net->name,
       comm->rank, p->nconns);
  if (pthread_create(&p->thread, NULL, proxyMain, p) != 0) {
    WARN("cannot start the network proxy thread");
    return ncclSystemError;
  }
  p->started = 1;
  return ncclSuccess;
}

/* Sends the executor posted must leave before the proxy stops: a plan ends
 * once its data is in the staging FIFO, not once it is on the wire. Nobody
 * waits for that data on an aborted, revoked or failed communicator (its
 * peers' FIFOs may never free a slot again): then the drain is skipped. A
 * peer that reads nothing for ANYCCL_OP_TIMEOUT ends it too. */
static int drainMoot(struct ncclComm* comm) {
  ncclResult_t async = __atomic_load_n(&comm->asyncResult, __ATOMIC_ACQUIRE);
  return __atomic_load_n(&comm->abortFlag, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE) ||
         (async != ncclSuccess && async != ncclInProgress);
}

static void drainSends(struct anycclProxy* p) {
  int64_t limit = p->comm->opTimeoutSec;
  int64_t deadline = ncclSocketDeadlineMs(limit > 0 ? limit * 1000 : -1);
  uint64_t moved = 0, last = UINT64_MAX;
  for (;;) {
    int pending = 0, peer = -1;
    moved = 0;
    for (int i = 0; i < p->nconns; i++) {
      struct netConn* nc = &p->conns[i];
      if (!nc->send || nc->closed) continue;
      uint64_t done = __atomic_load_n(&nc->doneShared, __ATOMIC_ACQUIRE);
      moved += done;
      if (done < __atomic_load_n(&nc->conn->ctrl->tail, __ATOMIC_ACQUIRE)) {
        pending++;
        peer = nc->conn->peer;
      }
    }
    if (pending == 0 || drainMoot(p->comm) || __atomic_load_n(&p->exited, __ATOMIC_ACQUIRE)) return;
    if (moved != last) { /* progress restarts the clock */
      last = moved;
      deadline = ncclSocketDeadlineMs(limit > 0 ? limit * 1000 : -1);
    }
    if (ncclSocketRemainingMs(deadline) == 0) {
      WARN("NET: rank %d: destroying the communicator, %d connection(s) (one to rank %d) still had data to send "
           "and the peer read none of it for %lld s (ANYCCL_OP_TIMEOUT); dropping it",
           p->comm->rank, pending, peer, (long long)limit);
      return;
    }
    usleep(200);
  }
}

void anycclNetFree(struct ncclComm* comm) {
  struct anycclProxy* p = comm->proxy;
  if (p == NULL) return;
  if (p->started) drainSends(p);
  if (p->started) {
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    anycclBellRing(&p->bell);
    pthread_join(p->thread, NULL);
  }
  for (int i = 0; i < p->nconns; i++) {
    struct netConn* nc = &p->conns[i];
    if (nc->listenComm) p->net->closeListen(nc->listenComm);
    if (nc->netComm && nc->mhandle) p->net->deregMr(nc->netComm, nc->mhandle);
    if (nc->netComm) (nc->send ? p->net->closeSend : p->net->closeRecv)(nc->netComm);
    if (nc->send) {
      free(nc->conn->sendRef);
      nc->conn->sendRef = NULL;
    } else {
      free(nc->conn->recvRef);
      nc->conn->recvRef = NULL;
    }
    free(nc->staging);
  }
  free(p->conns);
  free(p->pfds);
  if (p->efd >= 0) close(p->efd);
  free(p);
  comm->proxy = NULL;
}
