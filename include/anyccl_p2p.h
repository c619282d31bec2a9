/* anyccl P2P engine: point-to-point transfers between two processes (on one
 * host or across hosts) over several TCP connections at once, or over an
 * NCCL net plugin (NCCL_NET_PLUGIN; config.net / ANYCCL_P2P_NET): each
 * channel is then a pair of the plugin's connections, one each way.
 *
 *   endpoint  bound to a device; picks its NIC from the topology (the NIC
 *             nearest the device; ANYCCL_P2P_IFNAME overrides)
 *   listen    gives a handle (ANYCCL_P2P_HANDLE_BYTES bytes) to pass to the
 *             peer out of band; the peer connects with it, we accept
 *   conn      N channels (independent TCP connections, default 4); a message
 *             is cut into chunks (default 512 KB) dealt round-robin over the
 *             channels; each channel keeps at most `window` chunks in flight
 *             (default 16)
 *
 * Both sides of a connection may send and receive. Messages carry a tag; a
 * receive matches the peer's sends of the same tag in the order they were
 * posted (per tag: first send to first receive), so nothing is delivered
 * twice or out of order. Receives of different tags may complete in any
 * order. One-sided: write into (read from) a region the peer registered and
 * described to us; a write may carry a notification value that the peer
 * collects with anycclP2pNotifyPoll.
 *
 * Errors: bad arguments get ncclInvalidArgument and one WARN; a peer that
 * dies or a channel that drops fails every pending request of the connection
 * with ncclRemoteError (ncclSystemError after ANYCCL_OP_TIMEOUT seconds
 * without progress), and the connection stays in error. Requests are owned
 * by the engine and freed when test reports them done or failed.
 *
 * Memory: host memory and the cpu backend's device memory are read and
 * written directly; GPU memory (cuda backend; cudaPointerGetAttributes) goes
 * through pinned bounce buffers per connection (ANYCCL_P2P_BOUNCE): a D2H
 * copy before a chunk is sent, an H2D copy after it arrived, a bounce buffer
 * reused only after its copy's event. Buffers and registered regions may be
 * either. Not thread-safe per connection for posting (one thread posts
 * on a connection at a time); different connections are independent. */
#ifndef ANYCCL_P2P_H
#define ANYCCL_P2P_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ANYCCL_P2P_HANDLE_BYTES 256
#define ANYCCL_P2P_MAX_CHANNELS 64

typedef struct anycclP2pEndpoint* anycclP2pEndpoint_t;
typedef struct anycclP2pConn* anycclP2pConn_t;
typedef struct anycclP2pMr* anycclP2pMr_t;
typedef struct anycclP2pReq* anycclP2pRequest_t;

typedef struct {
  char bytes[ANYCCL_P2P_HANDLE_BYTES];
} anycclP2pHandle_t;

/* What the peer needs to write into or read from a registered region. */
typedef struct {
  uint64_t key;  /* the region's id at its owner */
  uint64_t addr; /* its address at its owner (informative) */
  uint64_t size;
} anycclP2pMrDesc_t;

typedef struct {
  int channels;      /* 0: from the topology (the NIC's socket budget over the devices that share it), else 4 */
  size_t chunkBytes; /* 0: ANYCCL_P2P_CHUNK (512 KB) */
  int window;        /* chunks in flight per channel; 0: ANYCCL_P2P_WINDOW (16) */
  const char* ifname;/* NULL: ANYCCL_P2P_IFNAME, else the topology's NIC, else NCCL_SOCKET_IFNAME's choice;
                        a comma-separated list deals channels over the interfaces */
  int timeoutSec;    /* a request without progress this long fails; 0: ANYCCL_OP_TIMEOUT */
  const char* net;   /* what carries the channels: "socket" (built-in TCP), "plugin" (the NCCL net plugin
                        NCCL_NET_PLUGIN names; an error if none loads); NULL: ANYCCL_P2P_NET, and when
                        that is unset too, the plugin if NCCL_NET_PLUGIN names one that loads, else sockets.
                        Both sides of a connection must use the same. */
} anycclP2pConfig_t;

#define ANYCCL_P2P_CONFIG_INITIALIZER {0, 0, 0, NULL, 0, NULL}

/* device: the cpu backend's (or CUDA's) device index; -1: no device (host
 * memory, NIC from NCCL_SOCKET_IFNAME). config may be NULL. */
ncclResult_t anycclP2pEndpointCreate(int device, const anycclP2pConfig_t* config, anycclP2pEndpoint_t* ep);
/* Closes the listener and every connection of the endpoint still open. */
ncclResult_t anycclP2pEndpointDestroy(anycclP2pEndpoint_t ep);

/* What the endpoint chose: channels per connection, the topology's NIC for
 * its device ("" when no topology names one), and the interfaces it uses. */
typedef struct {
  int channels;
  char topoNic[16];
  int nifs;
  char ifNames[4][16];
} anycclP2pEndpointInfo_t;
ncclResult_t anycclP2pEndpointGetInfo(anycclP2pEndpoint_t ep, anycclP2pEndpointInfo_t* info);

/* Start listening (once per endpoint); the handle goes to the peer. */
ncclResult_t anycclP2pListen(anycclP2pEndpoint_t ep, anycclP2pHandle_t* handle);
/* Wait (up to the endpoint's timeout) for one peer's connection. Junk
 * connections (wrong magic, cookie or too slow to say hello) are dropped. */
ncclResult_t anycclP2pAccept(anycclP2pEndpoint_t ep, anycclP2pConn_t* conn);
ncclResult_t anycclP2pConnect(anycclP2pEndpoint_t ep, const anycclP2pHandle_t* handle, anycclP2pConn_t* conn);
/* Waits (bounded) for this side's posted sends to leave, then closes. */
ncclResult_t anycclP2pClose(anycclP2pConn_t conn);
/* Channels of the connection and the interface each uses. */
ncclResult_t anycclP2pConnInfo(anycclP2pConn_t conn, int* channels, size_t* chunkBytes, int* window);

/* Register [ptr, ptr+size) with the endpoint; the descriptor goes to peers
 * that write into or read from it. */
ncclResult_t anycclP2pRegMr(anycclP2pEndpoint_t ep, void* ptr, size_t size, anycclP2pMr_t* mr);
ncclResult_t anycclP2pMrGetDesc(anycclP2pMr_t mr, anycclP2pMrDesc_t* desc);
ncclResult_t anycclP2pDeregMr(anycclP2pMr_t mr);

/* Non-blocking two-sided. */
ncclResult_t anycclP2pIsend(anycclP2pConn_t conn, const void* buf, size_t size, int tag, anycclP2pRequest_t* req);
/* size: room; a longer message fails the request (ncclInvalidUsage). */
ncclResult_t anycclP2pIrecv(anycclP2pConn_t conn, void* buf, size_t size, int tag, anycclP2pRequest_t* req);
/* One-sided: write size bytes from src to remote.key at offset; notify != 0
 * is delivered to the peer's anycclP2pNotifyPoll once all bytes landed, and
 * the request completes when the peer acknowledged them. */
ncclResult_t anycclP2pIwrite(anycclP2pConn_t conn, const void* src, size_t size, const anycclP2pMrDesc_t* remote,
                             size_t offset, uint64_t notify, anycclP2pRequest_t* req);
ncclResult_t anycclP2pIread(anycclP2pConn_t conn, void* dst, size_t size, const anycclP2pMrDesc_t* remote,
                            size_t offset, anycclP2pRequest_t* req);
/* done = 1 when finished (bytes: moved; the request is freed). An error
 * frees the request too. */
ncclResult_t anycclP2pTest(anycclP2pRequest_t req, int* done, size_t* bytes);
/* Wait until done (bounded by the timeout). */
ncclResult_t anycclP2pWait(anycclP2pRequest_t req, size_t* bytes);
/* The oldest notification that arrived (got = 0 if none). */
ncclResult_t anycclP2pNotifyPoll(anycclP2pConn_t conn, uint64_t* value, int* got);

/* Blocking helpers. */
ncclResult_t anycclP2pSend(anycclP2pConn_t conn, const void* buf, size_t size, int tag);
ncclResult_t anycclP2pRecv(anycclP2pConn_t conn, void* buf, size_t size, int tag, size_t* received);
ncclResult_t anycclP2pWrite(anycclP2pConn_t conn, const void* src, size_t size, const anycclP2pMrDesc_t* remote,
                            size_t offset, uint64_t notify);
ncclResult_t anycclP2pRead(anycclP2pConn_t conn, void* dst, size_t size, const anycclP2pMrDesc_t* remote,
                           size_t offset);

#ifdef __cplusplus
}
#endif
#endif
