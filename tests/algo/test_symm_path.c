/* The cuda backend's choice of one-host kernel (anycclSymmPath, the pure
 * function cuda_symm.c and the sim share), checked on a machine without a
 * GPU against the limits that docs/performance.md and docs/tuning.md give
 * for 4 GPUs: one-shot LL, LL128 one-shot (broadcast, reduce), two-shot in
 * LL or LL128 lines, staged, or none (the FIFO path); with NVLink between
 * the GPUs and without (no LL128 lines, no rooted two-shot kernels), and on
 * 3 and 8 ranks. Every case runs with the default parameters; the second
 * ctest (algo_symm_path_nol128) sets ANYCCL_CUDA_SYMM_LL128=0, which must
 * choose as if NVLink were missing; the third (algo_symm_path_rs) sets
 * ANYCCL_CUDA_SYMM_LL128_RS to 0: a reduce-scatter of 1 MB blocks then
 * takes the staged kernel instead of the LL128 one-shot one. All-gathers
 * see the mesh limit the communicator gets by default (32 MB on up to 4
 * ranks of one host, none on more). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "cuda_exec.h"
#include "plan.h"

static int fails, checks;

#define KB(x) ((size_t)(x) << 10)
#define MB(x) ((size_t)(x) << 20)

enum { NONE, LL, LL128_1, TWO_LL, TWO_LL128, STAGED };
static const char* names[] = {"none (FIFO)", "one-shot LL", "one-shot LL128", "two-shot LL", "two-shot LL128", "staged"};

static int lastInPlaceOnly; /* the last choice's inPlaceOnly */
static int choose(int n, int nvlink, int func, size_t bytes, int* blocks) {
  struct ncclComm c;
  memset(&c, 0, sizeof(c));
  c.nRanks = n;
  c.nHosts = 1;
  c.nvlinkAll = nvlink;
  c.llThreshold = 128 << 10;
  c.forceAlgo = -1;
  c.meshAgMax = n <= 4 ? MB(32) : 0; /* anycclCommTuning's default */
  struct anycclPhase ph;
  memset(&ph, 0, sizeof(ph));
  ph.func = func;
  ph.elemSize = 4;
  ph.count = bytes / 4;
  ph.op.type = ncclFloat32;
  ph.op.op = anycclDevSum;
  ph.nlanes = 1;
  struct anycclSymmChoice ch;
  const int path = anycclSymmPath(&c, &ph, &ch);
  *blocks = ch.blocks;
  lastInPlaceOnly = ch.inPlaceOnly;
  if (path == ANYCCL_SYMM_STAGED) return STAGED;
  if (path != ANYCCL_SYMM_LL) return NONE;
  return ch.twoShot ? (ch.ll128 ? TWO_LL128 : TWO_LL) : ch.ll128 ? LL128_1 : LL;
}


int main(void) {
  const int l128 = getenv("ANYCCL_CUDA_SYMM_LL128") == NULL || atoi(getenv("ANYCCL_CUDA_SYMM_LL128")) != 0;
  const size_t rs = getenv("ANYCCL_CUDA_SYMM_LL128_RS") ? (size_t)atoll(getenv("ANYCCL_CUDA_SYMM_LL128_RS")) : MB(1);
  struct {
    int n, nvlink, func;
    size_t bytes;
    int want;       /* with LL128 lines allowed */
    int wantNo;     /* without (no NVLink, or ANYCCL_CUDA_SYMM_LL128=0) */
    int blocks;     /* with LL128 (0: not checked) */
  } cases[] = {
      /* all-reduce on 4: one-shot to 128 KB, two-shot LL lines to 512 KB, LL128 to 2 MB (LL: 1 MB), staged to 16 MB */
      {4, 1, FUNC_ALLREDUCE, KB(128), LL, LL, 64},
      {4, 1, FUNC_ALLREDUCE, KB(256), TWO_LL, TWO_LL, 32},
      {4, 1, FUNC_ALLREDUCE, KB(512), TWO_LL128, TWO_LL, 35}, /* 1093 lines a chunk, 32 a block */
      {4, 1, FUNC_ALLREDUCE, MB(1), TWO_LL128, TWO_LL, 69},
      {4, 1, FUNC_ALLREDUCE, MB(2), TWO_LL128, STAGED, 128},
      {4, 1, FUNC_ALLREDUCE, MB(4), STAGED, STAGED, 0},
      {4, 1, FUNC_ALLREDUCE, MB(8), STAGED, STAGED, 0},
      {4, 1, FUNC_ALLREDUCE, MB(16), STAGED, STAGED, 0},
      {4, 1, FUNC_ALLREDUCE, MB(32), NONE, NONE, 0},
      /* broadcast on 4: LL to 341 KB, LL128 one-shot to 512 KB, two-shot LL128 to 1 MB */
      {4, 1, FUNC_BROADCAST, KB(256), LL, LL, 128},
      {4, 1, FUNC_BROADCAST, KB(512), LL128_1, NONE, 128},
      {4, 1, FUNC_BROADCAST, MB(1), TWO_LL128, NONE, 69},
      {4, 1, FUNC_BROADCAST, MB(2), NONE, NONE, 0},
      /* reduce on 4: LL to 256 KB (512 KB without LL128), LL128 one-shot to 1 MB, two-shot LL128 to 2 MB */
      {4, 1, FUNC_REDUCE, KB(256), LL, LL, 128},
      {4, 1, FUNC_REDUCE, KB(512), LL128_1, LL, 128},
      {4, 1, FUNC_REDUCE, MB(1), LL128_1, NONE, 128},
      {4, 1, FUNC_REDUCE, MB(2), TWO_LL128, NONE, 128},
      {4, 1, FUNC_REDUCE, MB(4), NONE, NONE, 0},
      /* 3 ranks: all-reduce one-shot to 512 KB, two-shot to 4 MB in LL128 lines (2 MB in LL lines) */
      {3, 1, FUNC_ALLREDUCE, KB(512), LL, LL, 0},
      {3, 1, FUNC_ALLREDUCE, MB(3), TWO_LL128, STAGED, 0},
      {3, 1, FUNC_ALLREDUCE, MB(4), TWO_LL128, STAGED, 0},
      /* 8 ranks: no two-shot kernels by default; rooted LL128 one-shot still */
      {8, 1, FUNC_ALLREDUCE, KB(512), STAGED, STAGED, 0},
      {8, 1, FUNC_REDUCE, KB(512), LL128_1, NONE, 0},
      {8, 1, FUNC_BROADCAST, MB(1), NONE, NONE, 0},
      /* reduce-scatter on 4 (bytes: a rank's block): LL to 512 KB, LL128 one-shot to 1 MB
       * (ANYCCL_CUDA_SYMM_LL128_RS; the third ctest sets 0: staged), then staged to 4 MB */
      {4, 1, FUNC_REDUCESCATTER, KB(512), LL, LL, 128},
      {4, 1, FUNC_REDUCESCATTER, MB(1), LL128_1, STAGED, 0},
      {4, 1, FUNC_REDUCESCATTER, MB(2), STAGED, STAGED, 0},
      {4, 1, FUNC_REDUCESCATTER, MB(8), NONE, NONE, 0},
      {8, 1, FUNC_REDUCESCATTER, MB(1), STAGED, STAGED, 0}, /* (no LL128 one-shot by default on 8) */
      /* all-gather on 4 (bytes: a rank's block): LL to 512 KB, then the mesh (FIFO) to 32 MB in all,
       * never staged; on 8 ranks no mesh: staged to 16 MB in all */
      {4, 1, FUNC_ALLGATHER, KB(512), LL, LL, 0},
      {4, 1, FUNC_ALLGATHER, MB(1), NONE, NONE, 0},
      {4, 1, FUNC_ALLGATHER, MB(4), NONE, NONE, 0},
      {8, 1, FUNC_ALLGATHER, MB(1), STAGED, STAGED, 0},
      {8, 1, FUNC_ALLGATHER, MB(4), NONE, NONE, 0},
      /* 2 ranks: no two-shot; staged to 16 MB (past 8 MB only on the ranks' own buffers: see below) */
      {2, 1, FUNC_ALLREDUCE, MB(1), LL, LL, 0},
      {2, 1, FUNC_BROADCAST, MB(1), LL, LL, 0},
      {2, 1, FUNC_ALLREDUCE, MB(8), STAGED, STAGED, 0},
      {2, 1, FUNC_ALLREDUCE, MB(16), STAGED, STAGED, 0},
      {2, 1, FUNC_ALLREDUCE, MB(32), NONE, NONE, 0},
      {2, 1, FUNC_REDUCESCATTER, MB(4), STAGED, STAGED, 0},
      {2, 1, FUNC_ALLGATHER, MB(2), NONE, NONE, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (int nv = 1; nv >= 0; nv--) {
      int blocks = 0;
      const int got = choose(cases[i].n, nv, cases[i].func, cases[i].bytes, &blocks);
      int want = nv && l128 ? cases[i].want : cases[i].wantNo;
      if (want == LL128_1 && cases[i].func == FUNC_REDUCESCATTER && cases[i].bytes > rs) want = STAGED;
      checks++;
      if (got != want) {
        fails++;
        fprintf(stderr, "FAIL: %s of %zu bytes on %d ranks, NVLink %s, LL128 %s: %s, want %s\n",
                anycclFuncName(cases[i].func), cases[i].bytes, cases[i].n, nv ? "yes" : "no", l128 ? "on" : "off",
                names[got], names[want]);
      } else if (nv && l128 && cases[i].blocks && blocks != cases[i].blocks) {
        fails++;
        fprintf(stderr, "FAIL: %s of %zu bytes on %d ranks: %d blocks, want %d\n", anycclFuncName(cases[i].func),
                cases[i].bytes, cases[i].n, blocks, cases[i].blocks);
      }
    }
  /* the staging area (and the sizes that run on the ranks' own buffers)
   * against the sizes that copy in and out: 16 / 8 MB on 2 ranks, 16 / 16
   * on 4, 32 / 32 on 8 */
  const struct { int n; size_t area, copy; } st[] = {{2, MB(16), MB(8)}, {4, MB(16), MB(16)}, {8, MB(32), MB(32)}};
  for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
    struct ncclComm c;
    memset(&c, 0, sizeof(c));
    c.nRanks = st[i].n;
    checks++;
    if (anycclCudaStageBytes(&c) != st[i].area || anycclCudaStageCopyBytes(&c) != st[i].copy) {
      fails++;
      fprintf(stderr, "FAIL: %d ranks: staging area %zu and copied sizes to %zu, want %zu and %zu\n", st[i].n,
              anycclCudaStageBytes(&c), anycclCudaStageCopyBytes(&c), st[i].area, st[i].copy);
    }
  }
  /* 2 ranks: 8 MB may stage, 16 MB runs only in place; 4 ranks: 16 MB may stage */
  const struct { int n; size_t bytes; int inPlaceOnly; } ip[] = {{2, MB(8), 0}, {2, MB(16), 1}, {4, MB(16), 0}};
  for (size_t i = 0; i < sizeof(ip) / sizeof(ip[0]); i++) {
    int blocks = 0;
    checks++;
    if (choose(ip[i].n, 1, FUNC_ALLREDUCE, ip[i].bytes, &blocks) != STAGED || lastInPlaceOnly != ip[i].inPlaceOnly) {
      fails++;
      fprintf(stderr, "FAIL: AllReduce of %zu bytes on %d ranks: in place only %d, want staged and %d\n",
              ip[i].bytes, ip[i].n, lastInPlaceOnly, ip[i].inPlaceOnly);
    }
  }
  printf("%d passed, %d failed\n", checks - fails, fails);
  return fails ? 1 : 0;
}
