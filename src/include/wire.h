/* The bytes anyccl reads from outside the process, and the pure functions
 * that check them: bytes in, a parsed struct or an error (with why) out. The
 * socket loops call these and do only the I/O; fuzz/ calls them directly.
 *
 * Bootstrap (src/bootstrap): the unique id {magic, root address}; on every
 * listening port (the root's, each rank's) a header {magic, rank, kind, tag,
 * size} + payload; a hello to the root carries the rank's listen address; the
 * root answers {magic, status, nranks, next address, message}; the ranks
 * all-gather their listen addresses. Network transport (net_socket.c): the
 * connect handle a receiver sends through the bootstrap, the hello on every
 * socket of a connection, and the header before each message.
 *
 * The layouts are the wire format (host byte order, as NCCL's: the ranks of
 * one job run the same build); changing one breaks mixed-version jobs. */
#ifndef ANYCCL_WIRE_H
#define ANYCCL_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"
#include "socket.h"

/* ---- bootstrap ------------------------------------------------------------ */
enum { BS_KIND_HELLO = 1, BS_KIND_P2P = 2, BS_KIND_ALLGATHER = 3, BS_KIND_BARRIER = 4 };
#define BS_MAX_MSG (1 << 30) /* sanity bound on a message's size */

struct bsHandle { /* the first bytes of an ncclUniqueId */
  uint64_t magic;
  union ncclSocketAddress addr;
};
_Static_assert(sizeof(struct bsHandle) <= NCCL_UNIQUE_ID_BYTES, "handle must fit in ncclUniqueId");

struct bsHdr {
  uint64_t magic;
  int32_t rank;
  int32_t kind;
  int32_t tag;  /* HELLO: nranks */
  int32_t size; /* payload bytes */
};

struct bsRootReply {
  uint64_t magic;
  int32_t status; /* ncclResult_t */
  int32_t nranks;
  union ncclSocketAddress next;
  char msg[200];
};

/* A header as read on a listening port. rootMode: the root's port (only
 * hellos: rank < nranks = tag, payload one address). Otherwise a rank's port:
 * P2P/ALLGATHER/BARRIER from a rank in [0, nranks), size in [0, BS_MAX_MSG],
 * and, once a connection has said who it is (connPeer >= 0), always that
 * rank. len must be sizeof(struct bsHdr). */
enum { BS_HDR_OK = 0, BS_HDR_WRONG_MAGIC = 1, BS_HDR_BAD = 2 };
int bsParseHeader(const void* bytes, size_t len, uint64_t magic, int rootMode, int nranks, int connPeer,
                  struct bsHdr* out, char* why, size_t whyLen);
/* An address a peer sent (hello payload, root reply, all-gathered address):
 * an IPv4 or IPv6 address with a port. ncclRemoteError if not. */
ncclResult_t wireParseAddr(const void* bytes, size_t len, union ncclSocketAddress* out, char* why, size_t whyLen);
/* The root's answer to this rank's hello. ncclSuccess: out->next is the ring
 * successor's address. The root's own verdict (status != 0) comes back as
 * that status (ncclRemoteError if out of range), with out->msg terminated;
 * malformed answers are ncclRemoteError. *out is filled whenever len is right. */
ncclResult_t bsParseRootReply(const void* bytes, size_t len, uint64_t magic, int nranks, struct bsRootReply* out,
                              char* why, size_t whyLen);
/* The unique id given to ncclCommInitRank: ncclInvalidArgument unless it
 * holds a root address (IPv4/IPv6 with a port). */
ncclResult_t bsParseUniqueId(const void* bytes, size_t len, struct bsHandle* out, char* why, size_t whyLen);

/* ---- rank info (all-gathered at init) ----------------------------------- */
struct anycclPeerInfo;
#define ANYCCL_MAX_BUFFSIZE ((size_t)1 << 30) /* bytes of one connection's FIFO, at most */
/* Entry i says rank i, and its bus id and host id are terminated strings. */
ncclResult_t wireCheckPeerInfo(const struct anycclPeerInfo* info, int n, char* why, size_t whyLen);
/* The FIFO shape every rank takes from rank 0's ANYCCL_NSLOTS and
 * NCCL_BUFFSIZE: nslots in 2..ANYCCL_MAX_SLOTS; slotBytes a multiple of 64,
 * at least 4096, and nslots * slotBytes <= ANYCCL_MAX_BUFFSIZE. */
void wireFifoGeometry(int nslotsIn, size_t buffIn, int* nslots, size_t* slotBytes);

/* ---- network transport (sockets) ----------------------------------------- */
#define NET_MAGIC 0x616e796e65744e31ULL /* "anynetN1" */
#define NET_MAX_SOCKS 64
#define NET_BYE_TAG (-0x4259) /* header tag of the goodbye a closing sender sends */

struct netSockHandle { /* the connect handle (ANYCCL_NET_HANDLE_MAXSIZE bytes on the wire) */
  uint64_t magic;
  uint64_t cookie;
  union ncclSocketAddress addr;
  int nsocks;
};

struct netHello { /* first bytes on every socket of a connection */
  uint64_t magic;
  uint64_t cookie;
  int32_t index; /* 0 = control, 1..nsocks = data */
  int32_t nsocks;
};

struct netMsgHeader { /* before each message, on the control socket */
  uint64_t size;
  int32_t tag;
  int32_t pad;
};

/* A connect handle received through the bootstrap. ncclInternalError if it
 * is not one (wrong magic, nsocks outside 1..NET_MAX_SOCKS, no address). */
ncclResult_t netParseHandle(const void* bytes, size_t len, struct netSockHandle* out, char* why, size_t whyLen);
/* A hello on an accepted socket: ncclSuccess only with the listener's magic
 * and cookie, its nsocks and an index in 0..nsocks. */
ncclResult_t netParseHello(const void* bytes, size_t len, const struct netSockHandle* mine, struct netHello* out);
/* A message header on a receive of room bytes: 1 = goodbye, 0 = a message of
 * *size bytes (<= room), -1 = too large for the receive. */
int netParseMsgHeader(const struct netMsgHeader* hdr, size_t room, size_t* size, int* tag);

#endif
