/* Handing file descriptors between the processes of one host (a datagram
 * Unix socket in the abstract namespace, SCM_RIGHTS): the cuda backend's
 * windows over ncclMemAlloc memory map their peers' allocations from them.
 *
 * Collective in two steps around an exchange of addresses (the caller's
 * bootstrap all-gather): each process opens a box and publishes its
 * address; then each sends its descriptor to the boxes it must reach and
 * takes the ones sent to it. A message carries the receiver's random token,
 * so a stray sender on the host cannot plant a descriptor. */
#ifndef ANYCCL_FDPASS_H
#define ANYCCL_FDPASS_H

#include <stdint.h>
#include "nccl.h"

struct anycclFdAddr {
  int32_t pid;
  uint32_t seq;
  uint64_t token;
};

struct anycclFdBox {
  int sock;
  struct anycclFdAddr addr;
};

ncclResult_t anycclFdBoxOpen(struct anycclFdBox* box);
void anycclFdBoxClose(struct anycclFdBox* box);

/* Sends fd, tagged with index, to each of the nTo boxes in to[], and takes
 * nFrom descriptors sent to this box: from[i] is the one tagged i (0 <= i <
 * nSlots; slots not sent stay -1). Waits at most timeoutMs (0: forever) and
 * ends early when *abortFlag turns non-zero. On failure every descriptor
 * taken is closed again. */
ncclResult_t anycclFdBoxSwap(struct anycclFdBox* box, int fd, int index, const struct anycclFdAddr* to, int nTo,
                             int* from, int nSlots, int nFrom, int timeoutMs, volatile uint32_t* abortFlag);

#endif
