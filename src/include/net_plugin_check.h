/* Checks of an external net plugin's answers (src/transport/net_plugin_check.c). */
#ifndef ANYCCL_NET_PLUGIN_CHECK_H
#define ANYCCL_NET_PLUGIN_CHECK_H
#include <stddef.h>
#include "net.h"
#include "net_plugin.h"

#define ANYCCL_PLUGIN_MAX_DEVICES 4096
#define ANYCCL_PLUGIN_MAX_LATENCY_US 1e6

/* devices(): 0..ANYCCL_PLUGIN_MAX_DEVICES, else ncclSystemError (why). */
ncclResult_t anycclPluginCheckDevices(int n, char* why, size_t whyLen);
/* getProperties() as anyccl's properties: speed >= 0, latency a number in
 * 0..1e6 us, port >= 0, maxComms >= 1; names copied (NULL: "?", ""),
 * truncated to their fields. Else ncclSystemError naming the field. */
ncclResult_t anycclPluginCheckProps(const anycclPluginProps_v8* v, anycclNetProperties* p, char* why, size_t whyLen);
/* test(): *doneOut 0 or 1; a completed request's size >= 0 (in *sizeOut,
 * which may be NULL), else ncclSystemError. */
ncclResult_t anycclPluginCheckTest(int done, int size, int* doneOut, size_t* sizeOut, char* why, size_t whyLen);
#endif
