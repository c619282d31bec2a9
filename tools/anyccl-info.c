/* anyccl-info: version, backend, devices, and every parameter with its
 * value and help. `anyccl-info --markdown` prints the parameter table as
 * the Markdown that docs/parameters.md is made from. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include "nccl.h"
#include "param.h"

/* Internal symbol exported for tools (see src/core/param.c). */
const anycclParamInfo* anycclParamTable(int* count);
const char* anycclParamValueText(anycclParamId id, char* buf, int len);

static const char* backendName(anycclParamBackend b) {
  return b == PARAM_FOR_CPU ? "cpu" : b == PARAM_FOR_CUDA ? "cuda" : "all";
}

static void printMarkdown(void) {
  int n;
  const anycclParamInfo* t = anycclParamTable(&n);
  printf("| name | backend | type | default | meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++)
    printf("| `%s` | %s | %s | %s | %s |\n", t[i].name, backendName(t[i].backend),
           t[i].type == PARAM_INT ? "int" : "string", t[i].deflt[0] ? t[i].deflt : "(unset)", t[i].help);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
    printMarkdown();
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: %s [--markdown]\n", argv[0]);
    return 2;
  }
  int v = 0;
  ncclGetVersion(&v);
  printf("anyccl %s, NCCL API %d.%d.%d (version code %d)\n", ANYCCL_VERSION_STRING, NCCL_MAJOR, NCCL_MINOR,
         NCCL_PATCH, v);
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  printf("backend: cpu (anyccl-cpu runtime %d, driver %d)\n", rt, drv);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  printf("devices: %d\n", ndev);
  for (int d = 0; d < ndev; d++) {
    char bus[32] = "";
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof(prop));
    cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
    cudaGetDeviceProperties(&prop, d);
    printf("  %d: %s  busId %s  memory %.1f GiB\n", d, prop.name, bus, prop.totalGlobalMem / 1073741824.0);
  }
  int n;
  const anycclParamInfo* t = anycclParamTable(&n);
  printf("parameters ([all]: every backend reads it; [cpu], [cuda]: that backend only):\n");
  for (int i = 0; i < n; i++) {
    char buf[256];
    anycclParamValueText((anycclParamId)i, buf, sizeof(buf));
    printf("  %-26s = %-12s [%s] (default %s)\n      %s\n", t[i].name, buf[0] ? buf : "(unset)",
           backendName(t[i].backend), t[i].deflt[0] ? t[i].deflt : "(unset)", t[i].help);
  }
  return 0;
}
