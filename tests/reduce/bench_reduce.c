/* Throughput of anycclReduce: out = in0 OP in1 on arrays of a given size.
 * Usage: bench_reduce [bytes per array, default 1 MiB] [seconds per case]
 * (best of 7 trials, for shared machines)
 * Reports GB/s of memory traffic (two arrays read, one written) and of one
 * array's bytes (what a reduce step moves per rank). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

/* CPU time of this thread: on a shared machine, time spent descheduled
 * does not count (set BENCH_WALL=1 for wall-clock time). */
static int g_wall;
static double now(void) {
  struct timespec ts;
  clock_gettime(g_wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
  double secs = argc > 2 ? atof(argv[2]) : 0.3;
  g_wall = getenv("BENCH_WALL") != NULL;
  unsigned char *a = aligned_alloc(64, bytes + 64), *b = aligned_alloc(64, bytes + 64), *o = aligned_alloc(64, bytes + 64);
  for (size_t i = 0; i < bytes; i++) {
    /* every byte in 0x38..0x3f: ordinary normal values for every float type */
    a[i] = (unsigned char)(0x38 + (i * 7) % 8);
    b[i] = (unsigned char)(0x38 + (i * 5 + 3) % 8);
  }
  struct {
    ncclDataType_t t;
    anycclDevRedOp op;
    unsigned flags;
    const char* name;
  } cases[] = {
      {ncclFloat32, anycclDevSum, 0, "fp32 sum"},
      {ncclFloat32, anycclDevMax, 0, "fp32 max"},
      {ncclFloat32, anycclDevPreMulSum, 3, "fp32 premulsum"},
      {ncclFloat64, anycclDevSum, 0, "fp64 sum"},
      {ncclInt32, anycclDevSum, 0, "int32 sum"},
      {ncclInt64, anycclDevSum, 0, "int64 sum"},
      {ncclInt8, anycclDevSum, 0, "int8 sum"},
      {ncclBfloat16, anycclDevSum, 0, "bf16 sum"},
      {ncclBfloat16, anycclDevProd, 0, "bf16 prod"},
      {ncclBfloat16, anycclDevMax, 0, "bf16 max"},
      {ncclBfloat16, anycclDevPreMulSum, 3, "bf16 premulsum"},
      {ncclFloat16, anycclDevSum, 0, "fp16 sum"},
      {ncclFloat16, anycclDevPreMulSum, 3, "fp16 premulsum"},
      {ncclFloat8e4m3, anycclDevSum, 0, "e4m3 sum"},
      {ncclFloat8e5m2, anycclDevSum, 0, "e5m2 sum"},
      {ncclFloat8e5m2, anycclDevPreMulSum, 3, "e5m2 premulsum"},
      {ncclInt32, anycclDevSumPostDiv, 4, "int32 sum+postdiv"},
  };
  printf("%zu bytes per array\n", bytes);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t es = anycclTypeSize(cases[c].t), n = bytes / es;
    anycclRedOp op = {cases[c].t, cases[c].op, 0, 4};
    switch (cases[c].t) {
      case ncclFloat32: op.scalar = 0x3e800000; break; /* 0.25f */
      case ncclBfloat16: op.scalar = 0x3e80; break;
      case ncclFloat16: op.scalar = 0x3400; break;
      case ncclFloat8e5m2: op.scalar = 0x34; break;
      default: op.scalar = 3; break;
    }
    for (int alias = 0; alias < 2; alias++) {
      void* out = alias ? (void*)a : (void*)o;
      anycclReduce(&op, n, a, b, out, NULL, cases[c].flags);
      /* best of several short trials: the machine may be shared */
      double best = 1e30;
      for (int trial = 0; trial < 7; trial++) {
        long iters = 0;
        double t0 = now(), t;
        do {
          for (int k = 0; k < 10; k++) anycclReduce(&op, n, a, b, out, NULL, cases[c].flags);
          iters += 10;
          t = now() - t0;
        } while (t < secs / 7);
        if (t / iters < best) best = t / iters;
      }
      double per = (double)bytes / best / 1e9;
      printf("%-20s %-9s %7.2f GB/s traffic (3 arrays)  %7.2f GB/s per array  %6.3f ns/elem\n", cases[c].name,
             alias ? "out=in0" : "separate", 3 * per, per, best / n * 1e9);
    }
  }
  free(a);
  free(b);
  free(o);
  return 0;
}
