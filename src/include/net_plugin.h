/* NCCL's external network plugin ABI, version 8 (the table a
 * libnccl-net-<name>.so exports as `ncclNetPlugin_v8`), declared for
 * anyccl: the loader (src/transport/net_plugin.c) adapts such a table to
 * anycclNet_t, and src/plugin/nccl_net_anyccl.c exports anyccl's socket
 * table in this shape for NVIDIA's NCCL. Field order and types are the ABI:
 * do not reorder. Connect and accept may return a NULL comm ("not yet"):
 * the caller calls again. */
#ifndef ANYCCL_NET_PLUGIN_H
#define ANYCCL_NET_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#define NCCL_PLUGIN_HANDLE_MAXSIZE 128
#define NCCL_PLUGIN_PTR_HOST 0x1
#define NCCL_PLUGIN_SYMBOL_V8 "ncclNetPlugin_v8"

typedef void (*anycclPluginLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;      /* Mb/s */
  int port;
  float latency;  /* us */
  int maxComms;
  int maxRecvs;
  int netDeviceType;    /* an enum in NCCL: 0 = host */
  int netDeviceVersion;
} anycclPluginProps_v8;

typedef struct {
  const char* name;
  ncclResult_t (*init)(anycclPluginLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v8* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, void** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, void** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} anycclPluginNet_v8;

#endif
