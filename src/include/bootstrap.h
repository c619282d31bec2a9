/* Bootstrap: out-of-band exchange among the ranks of a communicator, over TCP,
 * as NCCL does it. The unique id carries the root's address and a random
 * magic; every connection begins with the magic and is dropped if it is wrong.
 * Every wait is bounded (bootstrapTimeoutMs) and watches *abortFlag. */
#ifndef ANYCCL_BOOTSTRAP_H
#define ANYCCL_BOOTSTRAP_H

#include <stdint.h>
#include "nccl.h"

struct bootstrapState; /* opaque */

/* The bound of every bootstrap wait, and of network connection setup, in ms:
 * ANYCCL_BOOTSTRAP_TIMEOUT, or ANYCCL_OP_TIMEOUT when that is -1 (the
 * default); -1 when there is none (0 = forever). */
int64_t bootstrapTimeoutMs(void);

/* Fill an id: if NCCL_COMM_ID is set, the id names that address (no root is
 * started here: rank 0 starts it in bootstrapInit); otherwise a root thread is
 * started, listening on the bootstrap interface, and the id carries its
 * address and a fresh random magic. */
ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id);

/* Join: connect to the root, learn the ring, exchange all listen addresses.
 * Blocks until all nranks joined (bounded). abortFlag may be NULL. */
ncclResult_t bootstrapInit(const ncclUniqueId* id, int rank, int nranks, volatile uint32_t* abortFlag,
                           struct bootstrapState** state);

/* allData holds nranks * size bytes; this rank's slice (rank*size) is filled in
 * by the caller; on return every slice is filled. */
ncclResult_t bootstrapAllGather(struct bootstrapState* state, void* allData, int size);
/* Tagged point-to-point messages; a recv matches (peer, tag) and keeps
 * unexpected messages for later. Messages of one (peer, tag) stay in order. */
ncclResult_t bootstrapSend(struct bootstrapState* state, int peer, int tag, const void* data, int size);
ncclResult_t bootstrapRecv(struct bootstrapState* state, int peer, int tag, void* data, int size);
ncclResult_t bootstrapBarrier(struct bootstrapState* state, int tag);
/* Until reset with NULL, the calling thread's bootstrap calls on any state
 * also end when *flag is set (a split waits on its parent's bootstrap, and
 * aborting the new communicator must end that wait). */
void bootstrapSetCallAbort(volatile uint32_t* flag);
/* Close sockets and free; Abort also makes blocked calls return. */
ncclResult_t bootstrapClose(struct bootstrapState* state);
ncclResult_t bootstrapAbort(struct bootstrapState* state);

/* The address (text, "ip:port" or "[ip6]:port") and interface name chosen for
 * bootstrap traffic; used in INFO lines. */
const char* bootstrapIfName(void);

#endif
