/* Example 1 of NCCL's documentation: one process, several devices.
 *
 * Unchanged CUDA + NCCL host code. Built against anyccl-cpu, each "device"
 * is a virtual GPU backed by host memory; built against CUDA and NCCL, it
 * runs on real GPUs:
 *   cc one_process_multi_device.c $(pkg-config --cflags --libs anyccl-cpu anyccl)
 *   nvcc -x cu one_process_multi_device.c -lnccl          (real GPUs)
 *
 * Usage: one_process_multi_device [ndev] [count]   (default 4 devices, 32M floats / 128 MiB
 * in NCCL's example; 1M floats here so that it also runs quickly on a laptop)
 */
#include <stdio.h>
#include <stdlib.h>
#include "cuda_runtime.h"
#include "nccl.h"

#define CUDACHECK(cmd)                                                                        \
  do {                                                                                        \
    cudaError_t e = cmd;                                                                      \
    if (e != cudaSuccess) {                                                                   \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));   \
      exit(EXIT_FAILURE);                                                                     \
    }                                                                                         \
  } while (0)

#define NCCLCHECK(cmd)                                                                        \
  do {                                                                                        \
    ncclResult_t r = cmd;                                                                     \
    if (r != ncclSuccess) {                                                                   \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));   \
      exit(EXIT_FAILURE);                                                                     \
    }                                                                                         \
  } while (0)

int main(int argc, char* argv[]) {
  int nDev = argc > 1 ? atoi(argv[1]) : 4;
  int size = argc > 2 ? atoi(argv[2]) : 1024 * 1024;
  int nVisible = 0;
  CUDACHECK(cudaGetDeviceCount(&nVisible));
  if (nDev < 1 || nDev > nVisible || size < 1) {
    printf("usage: %s [ndev 1..%d] [count >= 1]\n", argv[0], nVisible);
    return EXIT_FAILURE;
  }

  ncclComm_t* comms = malloc(nDev * sizeof(ncclComm_t));
  int* devs = malloc(nDev * sizeof(int));
  for (int i = 0; i < nDev; ++i) devs[i] = i;

  /* allocating and initializing device buffers */
  float** sendbuff = malloc(nDev * sizeof(float*));
  float** recvbuff = malloc(nDev * sizeof(float*));
  cudaStream_t* s = malloc(sizeof(cudaStream_t) * nDev);
  float* host = malloc(size * sizeof(float));

  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(devs[i]));
    CUDACHECK(cudaMalloc((void**)sendbuff + i, size * sizeof(float)));
    CUDACHECK(cudaMalloc((void**)recvbuff + i, size * sizeof(float)));
    /* device i contributes i+1 (plus a position-dependent part) */
    for (int k = 0; k < size; k++) host[k] = (float)(i + 1) + (float)(k % 13);
    CUDACHECK(cudaMemcpy(sendbuff[i], host, size * sizeof(float), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(recvbuff[i], 0, size * sizeof(float)));
    CUDACHECK(cudaStreamCreate(s + i));
  }

  /* initializing NCCL */
  NCCLCHECK(ncclCommInitAll(comms, nDev, devs));

  /* calling NCCL communication API. Group API is required when using
   * multiple devices per thread */
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; ++i)
    NCCLCHECK(ncclAllReduce((const void*)sendbuff[i], (void*)recvbuff[i], size, ncclFloat, ncclSum, comms[i], s[i]));
  NCCLCHECK(ncclGroupEnd());

  /* synchronizing on CUDA streams to wait for completion of NCCL operation */
  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(devs[i]));
    CUDACHECK(cudaStreamSynchronize(s[i]));
  }

  /* checking the result: element k is sum_i (i+1) + nDev * (k % 13) */
  int errors = 0;
  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(devs[i]));
    CUDACHECK(cudaMemcpy(host, recvbuff[i], size * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int k = 0; k < size; k++) {
      float expect = (float)(nDev * (nDev + 1) / 2) + (float)(nDev * (k % 13));
      if (host[k] != expect) {
        if (bad == 0)
          printf("device %d: element %d is %g, expected %g\n", devs[i], k, host[k], expect);
        bad++;
      }
    }
    printf("device %d: recvbuff[0..2] = %g %g %g ... (%d of %d elements wrong)\n", devs[i], host[0],
           size > 1 ? host[1] : 0.0, size > 2 ? host[2] : 0.0, bad, size);
    errors += bad;
  }

  /* free device buffers */
  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(devs[i]));
    CUDACHECK(cudaFree(sendbuff[i]));
    CUDACHECK(cudaFree(recvbuff[i]));
    CUDACHECK(cudaStreamDestroy(s[i]));
  }

  /* finalizing NCCL */
  for (int i = 0; i < nDev; ++i) ncclCommDestroy(comms[i]);

  free(host);
  free(s);
  free(sendbuff);
  free(recvbuff);
  free(devs);
  free(comms);
  printf(errors ? "Failed: %d wrong elements\n" : "Success \n", errors);
  return errors ? EXIT_FAILURE : EXIT_SUCCESS;
}
