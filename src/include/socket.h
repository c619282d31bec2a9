/* A small TCP socket layer, shared by the bootstrap and the network transport.
 *
 * - Addresses are a union of sockaddr_in / sockaddr_in6; text form is
 *   "ip:port" or "[ip6]:port".
 * - Interfaces come from getifaddrs, filtered by NCCL_SOCKET_IFNAME (NCCL's
 *   syntax: comma-separated prefixes; a leading '^' excludes; a leading '='
 *   means exact names; "^=" both) and NCCL_SOCKET_FAMILY (AF_INET/AF_INET6).
 *   Unset: every interface but docker* and lo, else lo.
 * - Every socket is non-blocking, close-on-exec, TCP_NODELAY; sends use
 *   MSG_NOSIGNAL (no SIGPIPE).
 * - Blocking helpers take an absolute deadline (ncclSocketDeadlineMs; -1 =
 *   none) and poll in slices of NCCL_SOCKET_POLL_MS, so that a set abort flag
 *   is noticed within that time.
 *
 * Results: ncclSuccess; ncclSystemError (timeout or system call failure);
 * ncclRemoteError (the peer closed or reset the connection);
 * ncclInternalError (an abort flag was set). sock->err says which
 * (enum ncclSocketError). Only ncclSocketConnect WARNs by itself (it knows the
 * address and what to check); the others log at INFO(NCCL_NET) and leave the
 * WARN to the caller, who knows what the connection was for. */
#ifndef ANYCCL_SOCKET_H
#define ANYCCL_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "nccl.h"

#define NCCL_SOCKET_NAME_MAXLEN 64   /* enough for "[ipv6]:port" */
#define NCCL_SOCKET_IFNAME_MAXLEN 16 /* IFNAMSIZ */
#define NCCL_SOCKET_POLL_MS 50       /* longest sleep between abort-flag checks */

union ncclSocketAddress {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

enum ncclSocketError {
  ncclSocketErrOk = 0,
  ncclSocketErrTimedOut = 1,
  ncclSocketErrAborted = 2,
  ncclSocketErrClosed = 3, /* peer closed or reset */
  ncclSocketErrSys = 4
};

struct ncclSocket {
  int fd;                         /* -1 when closed */
  union ncclSocketAddress addr;   /* listen: bound address; connected/accepted: the peer */
  volatile uint32_t* abortFlag;   /* may be NULL; nonzero = abort */
  volatile uint32_t* abortFlag2;  /* a second flag (e.g. the owner's own), may be NULL */
  int err;                        /* enum ncclSocketError of the last failure */
};

enum { NCCL_SOCKET_SEND = 0, NCCL_SOCKET_RECV = 1 };

/* ---- time ---------------------------------------------------------------- */
int64_t ncclSocketClockMs(void); /* CLOCK_MONOTONIC, milliseconds */
/* now + timeoutMs; timeoutMs < 0 gives -1 (no deadline). */
int64_t ncclSocketDeadlineMs(int64_t timeoutMs);
/* Milliseconds left before deadline (0 if passed; INT32_MAX-ish if none). */
int64_t ncclSocketRemainingMs(int64_t deadline);

/* ---- addresses ----------------------------------------------------------- */
/* "ip:port" / "[ip6]:port" into buf (NCCL_SOCKET_NAME_MAXLEN); returns buf. */
const char* ncclSocketToString(const union ncclSocketAddress* addr, char* buf);
/* Only the ip, no port. */
const char* ncclSocketIpToString(const union ncclSocketAddress* addr, char* buf);
socklen_t ncclSocketAddrLen(const union ncclSocketAddress* addr);
int ncclSocketAddrEqual(const union ncclSocketAddress* a, const union ncclSocketAddress* b);
int ncclSocketAddrPort(const union ncclSocketAddress* addr);
void ncclSocketAddrSetPort(union ncclSocketAddress* addr, int port);
/* Parse "host:port", "ipv4:port" or "[ipv6]:port" (host names resolved with
 * getaddrinfo, honouring NCCL_SOCKET_FAMILY; IPv4 preferred when unset).
 * ncclInvalidArgument (with a WARN) if malformed or unresolvable. */
ncclResult_t ncclSocketGetAddrFromString(union ncclSocketAddress* addr, const char* hostPort);
/* The same without logging: on failure, why (whyLen bytes) says what is wrong. */
ncclResult_t ncclSocketParseAddr(union ncclSocketAddress* addr, const char* hostPort, char* why, int whyLen);
/* The text part alone (no resolving): host (hostLen bytes, the brackets of
 * "[ipv6]" removed) and port 1..65535; 0, or -1 if malformed. */
int ncclSocketSplitHostPort(const char* hostPort, char* host, size_t hostLen, int* port);

/* ---- interfaces ---------------------------------------------------------- */
/* NCCL_SOCKET_FAMILY as AF_UNSPEC, AF_INET or AF_INET6. */
int ncclSocketFamilyParam(void);
/* 1 if the interface name is selected by an NCCL_SOCKET_IFNAME-style spec. */
int ncclSocketIfMatches(const char* ifName, const char* spec);
/* Interfaces that are up and match spec (NULL = all) and family (AF_UNSPEC =
 * both; then an interface's IPv4 address is preferred), one address each, in
 * getifaddrs order. IPv6 link-local addresses are skipped. names has
 * maxIfs * NCCL_SOCKET_IFNAME_MAXLEN bytes. Returns the count. */
int ncclSocketFindInterfacesSpec(const char* spec, int family, char* names, union ncclSocketAddress* addrs,
                                 int maxIfs);
/* As above, with NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY and the default
 * policy (not docker*, not lo; else lo). */
int ncclSocketFindInterfaces(char* names, union ncclSocketAddress* addrs, int maxIfs);
/* The first local interface (up, of remote's family) in the same subnet as
 * remote; returns 1 and fills name/local (port 0), else 0. */
int ncclSocketFindInterfaceMatchSubnet(char* name, union ncclSocketAddress* local,
                                       const union ncclSocketAddress* remote);

/* ---- sockets ------------------------------------------------------------- */
void ncclSocketInit(struct ncclSocket* sock, volatile uint32_t* abortFlag, volatile uint32_t* abortFlag2);
int ncclSocketAborted(const struct ncclSocket* sock);
/* Bind and listen on local (port 0 = ephemeral); sock->addr gets the bound
 * address. reuseAddr sets SO_REUSEADDR (for a fixed, well-known port). */
ncclResult_t ncclSocketListen(struct ncclSocket* sock, const union ncclSocketAddress* local, int reuseAddr);
/* Connect, retrying refused/timed-out/reset attempts with backoff until the
 * deadline. On failure WARNs once: "Could not connect to <peerDesc> at
 * <address> ...; <hint>" (hint says what to check, e.g. which timeout
 * parameter). Aborts are reported at INFO only. */
ncclResult_t ncclSocketConnect(struct ncclSocket* sock, const union ncclSocketAddress* remote, int64_t deadline,
                               const char* peerDesc, const char* hint);
/* Accept one pending connection without waiting: *accepted = 0 if none. */
ncclResult_t ncclSocketTryAccept(struct ncclSocket* listenSock, struct ncclSocket* client, int* accepted);
/* Accept, waiting until the deadline. client inherits listenSock's abort flags. */
ncclResult_t ncclSocketAccept(struct ncclSocket* listenSock, struct ncclSocket* client, int64_t deadline);
/* One non-blocking step: moves what it can of ptr[*offset..size) and advances
 * *offset. ncclRemoteError on EOF/reset. */
ncclResult_t ncclSocketProgress(struct ncclSocket* sock, int op, void* ptr, size_t size, size_t* offset);
/* Wait until the socket is ready for events (POLLIN/POLLOUT): ncclSuccess, or
 * a timeout/abort error. */
ncclResult_t ncclSocketWait(struct ncclSocket* sock, short events, int64_t deadline);
/* All bytes, or an error, by the deadline. */
ncclResult_t ncclSocketSend(struct ncclSocket* sock, const void* ptr, size_t size, int64_t deadline);
ncclResult_t ncclSocketRecv(struct ncclSocket* sock, void* ptr, size_t size, int64_t deadline);
void ncclSocketClose(struct ncclSocket* sock);
const char* ncclSocketErrorString(int err);

#endif
