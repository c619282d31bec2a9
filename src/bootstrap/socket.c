/* TCP socket layer: addresses, interface discovery, listen / connect / accept,
 * and deadline-bounded, abort-aware send and receive. See socket.h. */
#define _GNU_SOURCE
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "debug.h"
#include "param.h"

/* ---- time ---------------------------------------------------------------- */

int64_t ncclSocketClockMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ncclSocketDeadlineMs(int64_t timeoutMs) {
  return timeoutMs < 0 ? -1 : ncclSocketClockMs() + timeoutMs;
}

int64_t ncclSocketRemainingMs(int64_t deadline) {
  if (deadline < 0) return INT32_MAX;
  int64_t left = deadline - ncclSocketClockMs();
  return left > 0 ? left : 0;
}

/* Poll slice: at most NCCL_SOCKET_POLL_MS, at most what is left. */
static int sliceMs(int64_t deadline) {
  int64_t left = ncclSocketRemainingMs(deadline);
  return left < NCCL_SOCKET_POLL_MS ? (int)left : NCCL_SOCKET_POLL_MS;
}

/* ---- addresses ----------------------------------------------------------- */

socklen_t ncclSocketAddrLen(const union ncclSocketAddress* addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static const char* ipText(const union ncclSocketAddress* addr, char* buf, size_t len) {
  const void* src = addr->sa.sa_family == AF_INET6 ? (const void*)&addr->sin6.sin6_addr
                                                   : (const void*)&addr->sin.sin_addr;
  if (addr->sa.sa_family != AF_INET && addr->sa.sa_family != AF_INET6) snprintf(buf, len, "<unset>");
  else if (inet_ntop(addr->sa.sa_family, src, buf, len) == NULL) snprintf(buf, len, "<invalid>");
  return buf;
}

const char* ncclSocketIpToString(const union ncclSocketAddress* addr, char* buf) {
  return ipText(addr, buf, NCCL_SOCKET_NAME_MAXLEN);
}

const char* ncclSocketToString(const union ncclSocketAddress* addr, char* buf) {
  char ip[INET6_ADDRSTRLEN];
  ipText(addr, ip, sizeof(ip));
  if (addr->sa.sa_family == AF_INET6)
    snprintf(buf, NCCL_SOCKET_NAME_MAXLEN, "[%s]:%d", ip, ncclSocketAddrPort(addr) & 0xffff);
  else
    snprintf(buf, NCCL_SOCKET_NAME_MAXLEN, "%s:%d", ip, ncclSocketAddrPort(addr) & 0xffff);
  return buf;
}

int ncclSocketAddrPort(const union ncclSocketAddress* addr) {
  if (addr->sa.sa_family == AF_INET6) return ntohs(addr->sin6.sin6_port);
  if (addr->sa.sa_family == AF_INET) return ntohs(addr->sin.sin_port);
  return 0;
}

void ncclSocketAddrSetPort(union ncclSocketAddress* addr, int port) {
  if (addr->sa.sa_family == AF_INET6) addr->sin6.sin6_port = htons((uint16_t)port);
  else addr->sin.sin_port = htons((uint16_t)port);
}

int ncclSocketAddrEqual(const union ncclSocketAddress* a, const union ncclSocketAddress* b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET)
    return a->sin.sin_port == b->sin.sin_port && a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  if (a->sa.sa_family == AF_INET6)
    return a->sin6.sin6_port == b->sin6.sin6_port &&
           memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(struct in6_addr)) == 0;
  return 0;
}

int ncclSocketFamilyParam(void) {
  const char* s = anycclParamStr(PARAM_SOCKET_FAMILY);
  if (s == NULL || s[0] == '\0') return AF_UNSPEC;
  if (strcasecmp(s, "AF_INET") == 0 || strcmp(s, "4") == 0) return AF_INET;
  if (strcasecmp(s, "AF_INET6") == 0 || strcmp(s, "6") == 0) return AF_INET6;
  static int warned; /* benign race: at worst two WARNs */
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    WARN("NCCL_SOCKET_FAMILY=%s is not AF_INET or AF_INET6; using either family", s);
  return AF_UNSPEC;
}

int ncclSocketSplitHostPort(const char* hostPort, char* host, size_t hostLen, int* portOut) {
  const char* portStr;
  size_t n;
  if (hostPort == NULL || hostPort[0] == '\0' || hostLen < 2) return -1;
  if (hostPort[0] == '[') {
    const char* end = strchr(hostPort, ']');
    if (end == NULL || end[1] != ':' || end - hostPort - 1 <= 0) return -1;
    n = end - hostPort - 1;
    if (n >= hostLen) return -1;
    memcpy(host, hostPort + 1, n);
    portStr = end + 2;
  } else {
    const char* colon = strrchr(hostPort, ':');
    if (colon == NULL || colon == hostPort) return -1;
    n = colon - hostPort;
    if (n >= hostLen) return -1;
    if (memchr(hostPort, ':', n) != NULL) return -1; /* bare IPv6 needs [] */
    memcpy(host, hostPort, n);
    portStr = colon + 1;
  }
  host[n] = '\0';
  char* endp;
  errno = 0;
  long port = strtol(portStr, &endp, 10);
  if (portStr[0] == '\0' || *endp != '\0' || errno || port <= 0 || port > 65535) return -1;
  *portOut = (int)port;
  return 0;
}

ncclResult_t ncclSocketParseAddr(union ncclSocketAddress* addr, const char* hostPort, char* why, int whyLen) {
  char host[256];
  int port;
  memset(addr, 0, sizeof(*addr));
  if (ncclSocketSplitHostPort(hostPort, host, sizeof(host), &port) != 0) goto malformed;

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = ncclSocketFamilyParam();
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL) {
    snprintf(why, whyLen, "cannot resolve host '%s': %s", host, rc ? gai_strerror(rc) : "no address");
    return ncclInvalidArgument;
  }
  struct addrinfo* pick = NULL;
  for (struct addrinfo* p = res; p; p = p->ai_next) /* IPv4 first when both */
    if (p->ai_family == AF_INET) { pick = p; break; }
  for (struct addrinfo* p = res; p && !pick; p = p->ai_next)
    if (p->ai_family == AF_INET6) pick = p;
  if (pick == NULL) {
    freeaddrinfo(res);
    snprintf(why, whyLen, "host '%s' has no IPv4/IPv6 address", host);
    return ncclInvalidArgument;
  }
  memcpy(addr, pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  ncclSocketAddrSetPort(addr, port);
  return ncclSuccess;
malformed:
  snprintf(why, whyLen, "expected host:port, ipv4:port or [ipv6]:port with a port in 1..65535");
  return ncclInvalidArgument;
}

ncclResult_t ncclSocketGetAddrFromString(union ncclSocketAddress* addr, const char* hostPort) {
  char why[320];
  ncclResult_t res = ncclSocketParseAddr(addr, hostPort, why, sizeof(why));
  if (res != ncclSuccess) WARN("Bad address '%s': %s", hostPort ? hostPort : "(null)", why);
  return res;
}

/* ---- interfaces ---------------------------------------------------------- */

int ncclSocketIfMatches(const char* ifName, const char* spec) {
  if (spec == NULL || spec[0] == '\0') return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') { exclude = 1; spec++; }
  if (*spec == '=') { exact = 1; spec++; }
  int matched = 0;
  const char* tok = spec;
  while (*tok && !matched) {
    const char* end = strchr(tok, ',');
    size_t len = end ? (size_t)(end - tok) : strlen(tok);
    if (len > 0) {
      if (exact) matched = strlen(ifName) == len && strncmp(ifName, tok, len) == 0;
      else matched = strncmp(ifName, tok, len) == 0;
    }
    if (end == NULL) break;
    tok = end + 1;
  }
  return exclude ? !matched : matched;
}

static int usableIfAddr(const struct ifaddrs* ifa, int family) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) return 0;
  int fam = ifa->ifa_addr->sa_family;
  if (fam != AF_INET && fam != AF_INET6) return 0;
  if (family != AF_UNSPEC && fam != family) return 0;
  if (fam == AF_INET6) {
    const struct sockaddr_in6* s6 = (const struct sockaddr_in6*)ifa->ifa_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) return 0; /* needs a scope id; not routable */
  }
  return 1;
}

int ncclSocketFindInterfacesSpec(const char* spec, int family, char* names, union ncclSocketAddress* addrs,
                                 int maxIfs) {
  struct ifaddrs* list;
  if (getifaddrs(&list) != 0) {
    WARN("getifaddrs failed: %s", strerror(errno));
    return 0;
  }
  int n = 0;
  for (struct ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!usableIfAddr(ifa, family) || !ncclSocketIfMatches(ifa->ifa_name, spec)) continue;
    int fam = ifa->ifa_addr->sa_family;
    int i;
    for (i = 0; i < n; i++)
      if (strncmp(names + i * NCCL_SOCKET_IFNAME_MAXLEN, ifa->ifa_name, NCCL_SOCKET_IFNAME_MAXLEN - 1) == 0) break;
    if (i < n) { /* seen: an IPv4 address replaces an IPv6 one */
      if (fam == AF_INET && addrs[i].sa.sa_family == AF_INET6) {
        memset(&addrs[i], 0, sizeof(addrs[i]));
        memcpy(&addrs[i], ifa->ifa_addr, sizeof(struct sockaddr_in));
      }
      continue;
    }
    if (n == maxIfs) continue;
    snprintf(names + n * NCCL_SOCKET_IFNAME_MAXLEN, NCCL_SOCKET_IFNAME_MAXLEN, "%s", ifa->ifa_name);
    memset(&addrs[n], 0, sizeof(addrs[n]));
    memcpy(&addrs[n], ifa->ifa_addr, fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    n++;
  }
  freeifaddrs(list);
  return n;
}

int ncclSocketFindInterfaces(char* names, union ncclSocketAddress* addrs, int maxIfs) {
  const char* spec = anycclParamStr(PARAM_SOCKET_IFNAME);
  int family = ncclSocketFamilyParam();
  if (spec && spec[0]) return ncclSocketFindInterfacesSpec(spec, family, names, addrs, maxIfs);
  int n = ncclSocketFindInterfacesSpec("^docker,lo", family, names, addrs, maxIfs);
  if (n == 0) n = ncclSocketFindInterfacesSpec("lo", family, names, addrs, maxIfs);
  return n;
}

static int sameSubnet(const struct sockaddr* a, const struct sockaddr* mask, const union ncclSocketAddress* b) {
  if (a->sa_family != b->sa.sa_family || mask == NULL) return 0;
  if (a->sa_family == AF_INET) {
    uint32_t m = ((const struct sockaddr_in*)mask)->sin_addr.s_addr;
    return (((const struct sockaddr_in*)a)->sin_addr.s_addr & m) == (b->sin.sin_addr.s_addr & m);
  }
  const uint8_t* x = ((const struct sockaddr_in6*)a)->sin6_addr.s6_addr;
  const uint8_t* m = ((const struct sockaddr_in6*)mask)->sin6_addr.s6_addr;
  const uint8_t* y = b->sin6.sin6_addr.s6_addr;
  for (int i = 0; i < 16; i++)
    if ((x[i] & m[i]) != (y[i] & m[i])) return 0;
  return 1;
}

int ncclSocketFindInterfaceMatchSubnet(char* name, union ncclSocketAddress* local,
                                       const union ncclSocketAddress* remote) {
  struct ifaddrs* list;
  if (getifaddrs(&list) != 0) return 0;
  int found = 0;
  for (struct ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
    if (!usableIfAddr(ifa, remote->sa.sa_family)) continue;
    if (!sameSubnet(ifa->ifa_addr, ifa->ifa_netmask, remote)) continue;
    snprintf(name, NCCL_SOCKET_IFNAME_MAXLEN, "%s", ifa->ifa_name);
    memset(local, 0, sizeof(*local));
    memcpy(local, ifa->ifa_addr, ncclSocketAddrLen((const union ncclSocketAddress*)ifa->ifa_addr));
    ncclSocketAddrSetPort(local, 0);
    found = 1;
  }
  freeifaddrs(list);
  return found;
}

/* ---- sockets ------------------------------------------------------------- */

void ncclSocketInit(struct ncclSocket* sock, volatile uint32_t* abortFlag, volatile uint32_t* abortFlag2) {
  memset(sock, 0, sizeof(*sock));
  sock->fd = -1;
  sock->abortFlag = abortFlag;
  sock->abortFlag2 = abortFlag2;
}

int ncclSocketAborted(const struct ncclSocket* sock) {
  if (sock->abortFlag && __atomic_load_n(sock->abortFlag, __ATOMIC_ACQUIRE)) return 1;
  if (sock->abortFlag2 && __atomic_load_n(sock->abortFlag2, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

const char* ncclSocketErrorString(int err) {
  switch (err) {
    case ncclSocketErrOk: return "no error";
    case ncclSocketErrTimedOut: return "timed out";
    case ncclSocketErrAborted: return "aborted";
    case ncclSocketErrClosed: return "connection closed by peer";
    default: return "system error";
  }
}

static void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void ncclSocketClose(struct ncclSocket* sock) {
  if (sock->fd >= 0) close(sock->fd);
  sock->fd = -1;
}

ncclResult_t ncclSocketListen(struct ncclSocket* sock, const union ncclSocketAddress* local, int reuseAddr) {
  char name[NCCL_SOCKET_NAME_MAXLEN];
  int fd = socket(local->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    WARN("socket() for a listener on %s failed: %s", ncclSocketToString(local, name), strerror(errno));
    sock->err = ncclSocketErrSys;
    return ncclSystemError;
  }
  int one = 1;
  if (reuseAddr) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = ncclSocketAddrLen(local);
  if (bind(fd, &local->sa, len) != 0) {
    int e = errno;
    const char* hint = e == EADDRINUSE ? " (is another job using this port?)"
                       : e == EADDRNOTAVAIL
                           ? " (the address is not one of this host's; check NCCL_COMM_ID / NCCL_SOCKET_IFNAME)"
                           : "";
    WARN("Cannot listen on %s: bind failed: %s%s", ncclSocketToString(local, name), strerror(e), hint);
    close(fd);
    sock->err = ncclSocketErrSys;
    return ncclSystemError;
  }
  if (listen(fd, SOMAXCONN) != 0) {
    WARN("listen() on %s failed: %s", ncclSocketToString(local, name), strerror(errno));
    close(fd);
    sock->err = ncclSocketErrSys;
    return ncclSystemError;
  }
  union ncclSocketAddress bound;
  memset(&bound, 0, sizeof(bound));
  len = sizeof(bound);
  getsockname(fd, &bound.sa, &len);
  sock->addr = bound;
  sock->fd = fd;
  sock->err = ncclSocketErrOk;
  INFO(NCCL_NET, "Socket: listening on %s", ncclSocketToString(&bound, name));
  return ncclSuccess;
}

/* One connect attempt. Returns 0 connected, else an errno (EINTR for abort,
 * ETIMEDOUT for the deadline). */
static int connectOnce(struct ncclSocket* sock, const union ncclSocketAddress* remote, int64_t deadline) {
  int fd = socket(remote->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  setNoDelay(fd);
  int rc = connect(fd, &remote->sa, ncclSocketAddrLen(remote));
  int err = rc == 0 ? 0 : errno;
  while (err == EINPROGRESS || err == EINTR) {
    if (ncclSocketAborted(sock)) { err = ECANCELED; break; }
    if (ncclSocketRemainingMs(deadline) == 0) { err = ETIMEDOUT; break; }
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int n = poll(&pfd, 1, sliceMs(deadline));
    if (n > 0) {
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      break;
    }
    if (n < 0 && errno != EINTR) { err = errno; break; }
  }
  if (err == 0) {
    /* A retried connect to a closed local port can connect to itself. */
    union ncclSocketAddress me, peer;
    socklen_t l1 = sizeof(me), l2 = sizeof(peer);
    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    if (getsockname(fd, &me.sa, &l1) == 0 && getpeername(fd, &peer.sa, &l2) == 0 && ncclSocketAddrEqual(&me, &peer))
      err = ECONNREFUSED;
  }
  if (err) {
    close(fd);
    return err;
  }
  sock->fd = fd;
  sock->addr = *remote;
  return 0;
}

ncclResult_t ncclSocketConnect(struct ncclSocket* sock, const union ncclSocketAddress* remote, int64_t deadline,
                               const char* peerDesc, const char* hint) {
  char name[NCCL_SOCKET_NAME_MAXLEN];
  int64_t start = ncclSocketClockMs();
  int backoffMs = 10, attempts = 0, err, lastErr = 0;
  sock->fd = -1;
  ncclSocketToString(remote, name);
  for (;;) {
    attempts++;
    err = connectOnce(sock, remote, deadline);
    /* Report what the peer said (e.g. refused) rather than our own deadline. */
    if (err == ETIMEDOUT && ncclSocketRemainingMs(deadline) == 0 && lastErr != 0) err = lastErr;
    lastErr = err;
    if (err == 0) {
      sock->err = ncclSocketErrOk;
      TRACE(NCCL_NET, "Socket: connected to %s after %d attempt(s)", name, attempts);
      return ncclSuccess;
    }
    if (err == ECANCELED) break;
    int retry = err == ECONNREFUSED || err == ETIMEDOUT || err == EAGAIN || err == ECONNRESET;
    if (!retry || ncclSocketRemainingMs(deadline) == 0) break;
    /* Back off, but wake for the abort flag and the deadline. */
    int64_t wake = ncclSocketClockMs() + backoffMs;
    while (!ncclSocketAborted(sock) && ncclSocketClockMs() < wake && ncclSocketRemainingMs(deadline) > 0) {
      int64_t left = wake - ncclSocketClockMs();
      int ms = left < sliceMs(deadline) ? (int)left : sliceMs(deadline);
      if (ms > 0) poll(NULL, 0, ms);
    }
    if (ncclSocketAborted(sock)) { err = ECANCELED; break; }
    if (ncclSocketRemainingMs(deadline) == 0) break;
    if (backoffMs < 200) backoffMs *= 2;
  }
  if (err == ECANCELED) {
    sock->err = ncclSocketErrAborted;
    INFO(NCCL_NET, "Socket: connect to %s aborted", name);
    return ncclInternalError;
  }
  int timedOut = ncclSocketRemainingMs(deadline) == 0;
  sock->err = timedOut ? ncclSocketErrTimedOut : ncclSocketErrSys;
  double secs = (ncclSocketClockMs() - start) / 1000.0;
  WARN("Could not connect to %s at %s: %s (%d attempt%s over %.1f s%s). %s", peerDesc ? peerDesc : "peer", name,
       strerror(err), attempts, attempts == 1 ? "" : "s", secs, timedOut ? ", until the deadline" : "",
       hint ? hint : "Check that the peer is running and reachable (NCCL_SOCKET_IFNAME, firewalls).");
  return ncclSystemError;
}

ncclResult_t ncclSocketTryAccept(struct ncclSocket* listenSock, struct ncclSocket* client, int* accepted) {
  union ncclSocketAddress peer;
  memset(&peer, 0, sizeof(peer));
  socklen_t len = sizeof(peer);
  *accepted = 0;
  int fd;
  do {
    fd = accept4(listenSock->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    /* Nothing pending, or a connection that died in the queue. */
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO) return ncclSuccess;
    INFO(NCCL_NET, "Socket: accept failed: %s", strerror(errno));
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return ncclSuccess; /* transient */
    listenSock->err = ncclSocketErrSys;
    return ncclSystemError;
  }
  setNoDelay(fd);
  ncclSocketInit(client, listenSock->abortFlag, listenSock->abortFlag2);
  client->fd = fd;
  client->addr = peer;
  *accepted = 1;
  return ncclSuccess;
}

ncclResult_t ncclSocketWait(struct ncclSocket* sock, short events, int64_t deadline) {
  for (;;) {
    if (ncclSocketAborted(sock)) { sock->err = ncclSocketErrAborted; return ncclInternalError; }
    struct pollfd pfd = {.fd = sock->fd, .events = events};
    int n = poll(&pfd, 1, sliceMs(deadline));
    if (n > 0) return ncclSuccess; /* ready, or an error the next call will see */
    if (n < 0 && errno != EINTR) {
      INFO(NCCL_NET, "Socket: poll failed: %s", strerror(errno));
      sock->err = ncclSocketErrSys;
      return ncclSystemError;
    }
    if (ncclSocketRemainingMs(deadline) == 0) { sock->err = ncclSocketErrTimedOut; return ncclSystemError; }
  }
}

ncclResult_t ncclSocketAccept(struct ncclSocket* listenSock, struct ncclSocket* client, int64_t deadline) {
  for (;;) {
    int accepted;
    NCCLCHECK(ncclSocketTryAccept(listenSock, client, &accepted));
    if (accepted) return ncclSuccess;
    ncclResult_t res = ncclSocketWait(listenSock, POLLIN, deadline);
    if (res != ncclSuccess) return res;
  }
}

ncclResult_t ncclSocketProgress(struct ncclSocket* sock, int op, void* ptr, size_t size, size_t* offset) {
  char* p = (char*)ptr;
  while (*offset < size) {
    ssize_t n = op == NCCL_SOCKET_SEND ? send(sock->fd, p + *offset, size - *offset, MSG_NOSIGNAL)
                                       : recv(sock->fd, p + *offset, size - *offset, 0);
    if (n > 0) { *offset += n; continue; }
    if (n == 0 && op == NCCL_SOCKET_RECV) { sock->err = ncclSocketErrClosed; return ncclRemoteError; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)) {
      sock->err = ncclSocketErrClosed;
      return ncclRemoteError;
    }
    char name[NCCL_SOCKET_NAME_MAXLEN];
    INFO(NCCL_NET, "Socket: %s %s failed: %s", op == NCCL_SOCKET_SEND ? "send to" : "recv from",
         ncclSocketToString(&sock->addr, name), strerror(errno));
    sock->err = ncclSocketErrSys;
    return ncclSystemError;
  }
  return ncclSuccess;
}

static ncclResult_t transferAll(struct ncclSocket* sock, int op, void* ptr, size_t size, int64_t deadline) {
  size_t offset = 0;
  for (;;) {
    NCCLCHECK(ncclSocketProgress(sock, op, ptr, size, &offset));
    if (offset == size) return ncclSuccess;
    ncclResult_t res = ncclSocketWait(sock, op == NCCL_SOCKET_SEND ? POLLOUT : POLLIN, deadline);
    if (res != ncclSuccess) return res;
  }
}

ncclResult_t ncclSocketSend(struct ncclSocket* sock, const void* ptr, size_t size, int64_t deadline) {
  return transferAll(sock, NCCL_SOCKET_SEND, (void*)ptr, size, deadline);
}

ncclResult_t ncclSocketRecv(struct ncclSocket* sock, void* ptr, size_t size, int64_t deadline) {
  return transferAll(sock, NCCL_SOCKET_RECV, ptr, size, deadline);
}
