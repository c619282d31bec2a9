/* What an external net plugin answers, checked before anyccl uses it (pure
 * functions: fuzz/fuzz_netplugin.c calls them directly; net_plugin.c calls
 * them on every answer). A plugin is code in our process, so these are not
 * a defence against a hostile one; they turn a buggy answer (a NaN latency,
 * a negative size) into one clear error instead of undefined behaviour. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "net_plugin_check.h"

ncclResult_t anycclPluginCheckDevices(int n, char* why, size_t whyLen) {
  if (n >= 0 && n <= ANYCCL_PLUGIN_MAX_DEVICES) return ncclSuccess;
  snprintf(why, whyLen, "devices() gave %d devices (expected 0..%d)", n, ANYCCL_PLUGIN_MAX_DEVICES);
  return ncclSystemError;
}

ncclResult_t anycclPluginCheckProps(const anycclPluginProps_v8* v, anycclNetProperties* p, char* why, size_t whyLen) {
  memset(p, 0, sizeof(*p));
  const char* bad = NULL;
  char value[64] = "";
  if (v->speed < 0) bad = "speed (Mb/s)", snprintf(value, sizeof(value), "%d", v->speed);
  else if (!(v->latency >= 0 && v->latency <= ANYCCL_PLUGIN_MAX_LATENCY_US))
    bad = "latency (us)", snprintf(value, sizeof(value), "%g", (double)v->latency);
  else if (v->port < 0) bad = "port", snprintf(value, sizeof(value), "%d", v->port);
  else if (v->maxComms < 1) bad = "maxComms", snprintf(value, sizeof(value), "%d", v->maxComms);
  if (bad) {
    snprintf(why, whyLen, "getProperties() gave %s %s", bad, value);
    return ncclSystemError;
  }
  snprintf(p->name, sizeof(p->name), "%s", v->name ? v->name : "?");
  snprintf(p->pciPath, sizeof(p->pciPath), "%s", v->pciPath ? v->pciPath : "");
  p->guid = v->guid;
  p->speed = v->speed;
  p->port = v->port;
  p->maxComms = v->maxComms;
  p->latency = (int)v->latency;
  return ncclSuccess;
}

ncclResult_t anycclPluginCheckTest(int done, int size, int* doneOut, size_t* sizeOut, char* why, size_t whyLen) {
  *doneOut = done != 0;
  if (sizeOut) *sizeOut = 0;
  if (!done) return ncclSuccess;
  if (size < 0) {
    snprintf(why, whyLen, "test() completed a request of %d bytes", size);
    return ncclSystemError;
  }
  if (sizeOut) *sizeOut = (size_t)size;
  return ncclSuccess;
}
