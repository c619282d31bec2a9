/* File descriptors between the processes of one host (fdpass.h). */
#define _GNU_SOURCE
#include "fdpass.h"
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "checks.h"

static uint32_t boxSeq;

static socklen_t boxName(const struct anycclFdAddr* a, struct sockaddr_un* sa) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  /* abstract: a leading NUL, no file; gone with the socket */
  int len = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "anyccl-fd.%d.%u", (int)a->pid, (unsigned)a->seq);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

ncclResult_t anycclFdBoxOpen(struct anycclFdBox* box) {
  box->sock = -1;
  box->addr.pid = (int32_t)getpid();
  box->addr.seq = __atomic_add_fetch(&boxSeq, 1, __ATOMIC_RELAXED);
  if (getrandom(&box->addr.token, sizeof(box->addr.token), 0) != sizeof(box->addr.token)) {
    WARN("fd exchange: getrandom failed: %s", strerror(errno));
    return ncclSystemError;
  }
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    WARN("fd exchange: socket(AF_UNIX): %s", strerror(errno));
    return ncclSystemError;
  }
  struct sockaddr_un sa;
  socklen_t len = boxName(&box->addr, &sa);
  if (bind(s, (struct sockaddr*)&sa, len) != 0) {
    WARN("fd exchange: bind(@anyccl-fd.%d.%u): %s", (int)box->addr.pid, (unsigned)box->addr.seq, strerror(errno));
    close(s);
    return ncclSystemError;
  }
  box->sock = s;
  return ncclSuccess;
}

void anycclFdBoxClose(struct anycclFdBox* box) {
  if (box->sock >= 0) close(box->sock);
  box->sock = -1;
}

struct fdMsg {
  uint64_t token; /* the receiver's */
  int32_t index, pad;
};

/* 1 sent, 0 try again, -1 failed */
static int sendOne(int sock, const struct anycclFdAddr* to, int fd, int index) {
  struct fdMsg m = {to->token, index, 0};
  struct iovec iov = {&m, sizeof(m)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct sockaddr_un sa;
  struct msghdr mh = {0};
  mh.msg_name = &sa;
  mh.msg_namelen = boxName(to, &sa);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(m)) return 1;
  /* a full queue, or the peer's box not there yet (it opens before the address exchange, so only a dead
   * peer stays away): try again until the deadline */
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNREFUSED || errno == ENOENT) return 0;
  WARN("fd exchange: sendmsg to @anyccl-fd.%d.%u: %s", (int)to->pid, (unsigned)to->seq, strerror(errno));
  return -1;
}

/* 1 took one (or dropped a stray message), 0 nothing there, -1 failed */
static int recvOne(struct anycclFdBox* box, int* from, int nSlots, int* got) {
  struct fdMsg m;
  struct iovec iov = {&m, sizeof(m)};
  union {
    char buf[CMSG_SPACE(sizeof(int) * 4)];
    struct cmsghdr align;
  } ctl;
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  ssize_t n = recvmsg(box->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    WARN("fd exchange: recvmsg: %s", strerror(errno));
    return -1;
  }
  int fd = -1, extra = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k; i++) {
        int f;
        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fd < 0)
          fd = f;
        else {
          close(f);
          extra = 1;
        }
      }
    }
  int ok = n == (ssize_t)sizeof(m) && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && !extra && fd >= 0 &&
           m.token == box->addr.token && m.index >= 0 && m.index < nSlots && from[m.index] < 0;
  if (!ok) { /* not one of ours: drop it */
    if (fd >= 0) close(fd);
    return 1;
  }
  from[m.index] = fd;
  (*got)++;
  return 1;
}

static long long nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

ncclResult_t anycclFdBoxSwap(struct anycclFdBox* box, int fd, int index, const struct anycclFdAddr* to, int nTo,
                             int* from, int nSlots, int nFrom, int timeoutMs, volatile uint32_t* abortFlag) {
  for (int i = 0; i < nSlots; i++) from[i] = -1;
  int sent = 0, got = 0;
  long long deadline = timeoutMs > 0 ? nowMs() + timeoutMs : 0;
  ncclResult_t res = ncclSuccess;
  while (sent < nTo || got < nFrom) {
    int progress = 0;
    while (sent < nTo) { /* in order: a peer's turn comes when its predecessors took theirs */
      int r = sendOne(box->sock, &to[sent], fd, index);
      if (r < 0) res = ncclSystemError;
      if (r <= 0) break;
      sent++;
      progress = 1;
    }
    if (res != ncclSuccess) break;
    while (got < nFrom) {
      int r = recvOne(box, from, nSlots, &got);
      if (r < 0) res = ncclSystemError;
      if (r <= 0) break;
      progress = 1;
    }
    if (res != ncclSuccess) break;
    if (sent == nTo && got == nFrom) break;
    if (abortFlag && __atomic_load_n(abortFlag, __ATOMIC_ACQUIRE)) {
      WARN("fd exchange: the communicator was aborted");
      res = ncclInternalError;
      break;
    }
    if (deadline && nowMs() > deadline) {
      WARN("fd exchange: %d of %d descriptors sent, %d of %d taken after %d ms: a peer process did not take part "
           "(died, or runs in another network namespace)", sent, nTo, got, nFrom, timeoutMs);
      res = ncclSystemError;
      break;
    }
    if (!progress) {
      struct pollfd p = {box->sock, POLLIN, 0};
      poll(&p, 1, 1);
    }
  }
  if (res != ncclSuccess)
    for (int i = 0; i < nSlots; i++)
      if (from[i] >= 0) {
        close(from[i]);
        from[i] = -1;
      }
  return res;
}
