/* NCCL's external network plugin ABI, versions 7 to 11 (the tables a
 * libnccl-net-<name>.so exports as `ncclNetPlugin_v7` ... `ncclNetPlugin_v11`),
 * declared for anyccl: the loader (src/transport/net_plugin.c) adapts such
 * a table to anycclNet_t, and plugin/nccl_net_anyccl.c exports anyccl's
 * socket table in every one of these shapes for NVIDIA's NCCL. Field order
 * and types are the ABI: do not reorder. Connect and accept may return a
 * NULL comm ("not yet"): the caller calls again.
 *
 * What changes from one version to the next:
 *   v7   regMr takes an int size; isend/irecv take int sizes
 *   v8   regMr takes size_t; properties gain regIsGlobal
 *   v9   isend/irecv take size_t sizes; properties gain forceFlush, vProps,
 *        maxP2pBytes, maxCollBytes; makeVDevice
 *   v10  init takes a profiler callback; connect takes a comm config;
 *        isend/irecv take profiler handles
 *   v11  init gives a context (per communicator) that listen, connect,
 *        finalize and setNetAttr take; properties gain maxMultiRequestSize */
#ifndef ANYCCL_NET_PLUGIN_H
#define ANYCCL_NET_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#define NCCL_PLUGIN_HANDLE_MAXSIZE 128
#define NCCL_PLUGIN_PTR_HOST 0x1
#define NCCL_PLUGIN_MAX_DEVS_PER_NIC 4
#define NCCL_PLUGIN_TRAFFIC_CLASS_UNDEF -1

typedef void (*anycclPluginLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
typedef ncclResult_t (*anycclPluginProfCb_t)(void** eHandle, int type, void* phandle, int64_t pluginId, void* extData);

typedef struct { /* ncclNetDeviceHandle_v7_t .. v11: device offload (anyccl asks for none) */
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} anycclPluginDevHandle;

typedef struct {
  int ndevs;
  int devs[NCCL_PLUGIN_MAX_DEVS_PER_NIC];
} anycclPluginVProps;

typedef struct {
  int trafficClass;
} anycclPluginCommConfig; /* v10, v11 */

typedef struct {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
} anycclPluginCommAttr_v11;

typedef struct {
  anycclPluginCommAttr_v11 sendCommAttr, recvCommAttr;
  uint32_t op, algo, proto;
} anycclPluginNetAttr_v11;

/* ---- properties ---------------------------------------------------------- */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;      /* Mb/s */
  int port;
  float latency;  /* us */
  int maxComms;
  int maxRecvs;
  int netDeviceType;    /* an enum in NCCL: 0 = host */
  int netDeviceVersion;
} anycclPluginProps_v7;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} anycclPluginProps_v8;

typedef struct { /* v9 and v10 */
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  anycclPluginVProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} anycclPluginProps_v9;

typedef struct { /* the fields of v9, then one more (the same layout as NCCL's flat struct) */
  anycclPluginProps_v9 base;
  int maxMultiRequestSize;
} anycclPluginProps_v11;

/* ---- tables ---------------------------------------------------------------- */
/* members every version has at the same place */
#define PLUGIN_DMABUF_DEREG                                                                                         \
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle); \
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
#define PLUGIN_FLUSH_TO_CONSUMED                                                                          \
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request); \
  ncclResult_t (*test)(void* request, int* done, int* sizes);                                             \
  ncclResult_t (*closeSend)(void* sendComm);                                                              \
  ncclResult_t (*closeRecv)(void* recvComm);                                                              \
  ncclResult_t (*closeListen)(void* listenComm);                                                          \
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);                             \
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
typedef anycclPluginDevHandle anycclPluginDev;

typedef struct {
  const char* name;
  ncclResult_t (*init)(anycclPluginLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v7* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, anycclPluginDev** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, anycclPluginDev** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  PLUGIN_DMABUF_DEREG
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  PLUGIN_FLUSH_TO_CONSUMED
} anycclPluginNet_v7;

typedef struct {
  const char* name;
  ncclResult_t (*init)(anycclPluginLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v8* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, anycclPluginDev** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, anycclPluginDev** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  PLUGIN_DMABUF_DEREG
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  PLUGIN_FLUSH_TO_CONSUMED
} anycclPluginNet_v8;

typedef struct {
  const char* name;
  ncclResult_t (*init)(anycclPluginLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v9* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, anycclPluginDev** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, anycclPluginDev** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  PLUGIN_DMABUF_DEREG
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  PLUGIN_FLUSH_TO_CONSUMED
  ncclResult_t (*makeVDevice)(int* d, anycclPluginVProps* props);
} anycclPluginNet_v9;

typedef struct {
  const char* name;
  ncclResult_t (*init)(anycclPluginLogger_t logFunction, anycclPluginProfCb_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v9* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, anycclPluginCommConfig* config, void* handle, void** sendComm,
                          anycclPluginDev** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, anycclPluginDev** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  PLUGIN_DMABUF_DEREG
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  PLUGIN_FLUSH_TO_CONSUMED
  ncclResult_t (*makeVDevice)(int* d, anycclPluginVProps* props);
} anycclPluginNet_v10;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, anycclPluginCommConfig* config, anycclPluginLogger_t logFunction,
                       anycclPluginProfCb_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, anycclPluginProps_v11* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, anycclPluginDev** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, anycclPluginDev** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  PLUGIN_DMABUF_DEREG
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  PLUGIN_FLUSH_TO_CONSUMED
  ncclResult_t (*makeVDevice)(int* d, anycclPluginVProps* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, anycclPluginNetAttr_v11* netAttr);
} anycclPluginNet_v11;

#endif
