/* The network interface inside anyccl, shaped like NCCL's net plugin
 * (ncclNet_t): listen / connect / accept / regMr / isend / irecv / test /
 * close. The built-in implementation is TCP sockets (net_socket.c); an NCCL
 * net plugin can be adapted to this table later.
 *
 * Requests complete in order per comm. isend/irecv return *request == NULL
 * when too many are in flight: the caller retries later (back-pressure, no
 * unbounded buffering). */
#ifndef ANYCCL_NET_H
#define ANYCCL_NET_H

#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <unistd.h>
#include "nccl.h"

#define ANYCCL_NET_HANDLE_MAXSIZE 128
#define ANYCCL_NET_MAX_REQUESTS 32

typedef struct {
  char name[64];
  char pciPath[128];
  uint64_t guid;
  int speed;   /* Mbps */
  int port;
  int maxComms;
  int latency; /* us */
} anycclNetProperties;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclNetProperties* props);
  /* handle: ANYCCL_NET_HANDLE_MAXSIZE bytes that the connecting side needs */
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm, volatile uint32_t* abortFlag);
  ncclResult_t (*connect)(int dev, const void* handle, void** sendComm, volatile uint32_t* abortFlag);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** request);
  /* done: 1 when complete; sizes[0]: bytes received (irecv) or sent */
  ncclResult_t (*test)(void* request, int* done, size_t* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  /* anyccl extension, may be NULL (then the proxy polls test() while
   * busy): an eventfd to write to when a request completes, so that the
   * proxy can sleep instead of polling; only while *asleep is nonzero (the
   * proxy sleeps on it) when asleep is not NULL (anycclNetNotify). */
  void (*setNotify)(void* comm, int eventFd, const int32_t* asleep);
  /* anyccl extension: test() that also gives a completed receive's tag (the
   * one its sender passed to isend; the proxy carries operation tags in it).
   * NULL: tags are not carried (receives get tag 0: sizes checked only). */
  ncclResult_t (*testTag)(void* request, int* done, size_t* size, int* tag);
  /* anyccl extension, may be NULL: the sockets a caller that moves the
   * bytes itself (test() does the I/O, no helper threads) should poll
   * before it sleeps; returns how many of max it filled. */
  int (*pollFds)(void* comm, struct pollfd* fds, int max);
  /* anyccl extension, may be NULL: on a receive comm, pick(arg, posted,
   * size, tag) is called once per message when its size and tag are known
   * and before any of its bytes are stored; it returns where they go instead
   * of the buffer the receive was posted with (`posted`), or NULL to keep
   * that one (a returned buffer has room for `size` bytes). Called with the
   * table's locks held, on any thread. */
  void (*setPick)(void* recvComm, void* (*pick)(void* arg, void* posted, size_t size, uint32_t tag), void* arg);
  /* may be NULL (then connect and accept block until done): one attempt
   * each, *comm left NULL while the connection is not up yet. A table that
   * has them (NCCL plugins) may finish a connect only once the peer has
   * called accept, so callers step every pending connect and accept in turn
   * (anycclNetConnectAll) instead of blocking in one of them. */
  ncclResult_t (*connectStep)(int dev, void* handle, void** sendComm); /* handle: kept between steps (plugins keep state in it) */
  ncclResult_t (*acceptStep)(void* listenComm, void** recvComm);
} anycclNet_t;

/* Connects sendComms[i] to handles[i] (device 0) and accepts recvComms[j]
 * on listenComms[j] (nSend and nRecv of them), stepping all of them in turn
 * when the table has connectStep/acceptStep; bounded by the bootstrap
 * timeout, ends when *abortFlag is set. */
ncclResult_t anycclNetConnectAll(const anycclNet_t* net, int nSend, char (*handles)[ANYCCL_NET_HANDLE_MAXSIZE],
                                 void** sendComms, int nRecv, void** listenComms, void** recvComms,
                                 volatile uint32_t* abortFlag);

/* Wake the reader of eventfd fd (a completion, a posted slot): only while
 * it sleeps on it (*asleep), when asleep is given. The reader raises
 * *asleep, then looks for work once more, then sleeps: with the fences one
 * of the two sides always sees the other. */
static inline void anycclNetNotify(int fd, const int32_t* asleep) {
  if (fd < 0) return;
  if (asleep) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(asleep, __ATOMIC_RELAXED)) return;
  }
  uint64_t one = 1;
  ssize_t r = write(fd, &one, sizeof(one));
  (void)r;
}

extern const anycclNet_t anycclNetSocket;
extern const anycclNet_t anycclNetP2p; /* over the P2P engine (net_p2p.c) */
/* NCCL_NET_PLUGIN's table (net_plugin.c), NULL when none is set or it
 * failed to load (WARNed once). */
const anycclNet_t* anycclNetPlugin(void);
/* "NET/<table>/0": the network transport's name in the logs (the table below). */
const char* anycclNetVia(void);
/* The plugin's table if one is loaded, else the one ANYCCL_NET_ENGINE names
 * (socket by default). */
const anycclNet_t* anycclNetDefault(void);

/* A dropped connection surfaces as an error within ANYCCL_NET_TIMEOUT even
 * without a reset: TCP_USER_TIMEOUT for unacknowledged data, keepalive for
 * silence (net_socket.c; the P2P engine's channels use it too). */
struct ncclSocket;
void netSetLiveness(struct ncclSocket* s);
/* 1 when a peer's connection waits on a listenComm of anycclNetSocket
 * (its accept then does not wait for one): libnccl-net-anyccl.so answers
 * "not yet" otherwise, as NCCL plugins may, instead of blocking. */
int anycclNetSocketListenReady(void* listenComm);

#endif
