/*
 * anyccl -- NCCL 2.28's device API (CUDA C++ for kernels; the types and the
 * host functions are plain C). See docs/device-api.md for what this build
 * supports: windows, LSA pointers and barriers, world barriers and GIN
 * between the ranks of one host; no multicast.
 */
#ifndef ANYCCL_NCCL_DEVICE_H
#define ANYCCL_NCCL_DEVICE_H

#include "nccl_device/core.h"
#include "nccl_device/coop.h"
#include "nccl_device/ptr.h"
#include "nccl_device/lsa_barrier.h"
#include "nccl_device/gin.h"
#include "nccl_device/barrier.h"
#include "nccl_device/ll_a2a.h"

#endif
