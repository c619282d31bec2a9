/* anyccl-cpu: the CUDA function and variable qualifiers, as nothing.
 *
 * anyccl-cpu has no device code: every function runs on the host, so the
 * qualifiers that nvcc understands are spelled away here and host code that
 * carries them compiles with a plain C or C++ compiler. Each macro is only
 * defined when nobody defined it first. */
#ifndef ANYCCL_CPU_HOST_DEFINES_H
#define ANYCCL_CPU_HOST_DEFINES_H

#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __shared__
#define __shared__
#endif
#ifndef __constant__
#define __constant__
#endif
#ifndef __managed__
#define __managed__
#endif
#ifndef __device_builtin__
#define __device_builtin__
#endif
#ifndef __cudart_builtin__
#define __cudart_builtin__
#endif
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
#ifndef CUDART_CB
#define CUDART_CB
#endif

/* Default arguments exist only in C++. */
#ifndef __dv
#ifdef __cplusplus
#define __dv(v) = v
#else
#define __dv(v)
#endif
#endif

#endif /* ANYCCL_CPU_HOST_DEFINES_H */
