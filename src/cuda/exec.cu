/* The cuda executor's launch: the phase's element type picks the group of
 * kernels (exec_groups.h, exec_*.cu) that runs it. */
#include <stdint.h>
#include "cuda_exec.h"
#include "exec_groups.h"

typedef int (*acuLaunchFn)(const struct acuPhase*, void*, void*);

extern "C" int acuLaunchPhase(const struct acuPhase* blob, void* stream) {
  static const struct {
    unsigned types;
    acuLaunchFn fn;
  } groups[] = {{ACU_TYPES_I8, acuLaunchI8},   {ACU_TYPES_INT, acuLaunchInt},   {ACU_TYPES_F16, acuLaunchF16},
                {ACU_TYPES_F32, acuLaunchF32}, {ACU_TYPES_E4M3, acuLaunchE4M3}, {ACU_TYPES_E5M2, acuLaunchE5M2}};
  /* the kernel's parameters are put together here: 32 KB, not on the stack */
  alignas(16) static thread_local unsigned char buf[ACU_BLOB_LARGE];
  const unsigned t = blob->type > 11 ? 11 : blob->type;
  for (const auto& g : groups)
    if (g.types >> t & 1) return g.fn(blob, stream, buf);
  return acuLaunchE5M2(blob, stream, buf); /* not reached: the groups hold every type */
}
