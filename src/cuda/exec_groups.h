/* The executor kernel (exec.cuh) is compiled once per group of element
 * types, each group in its own file (exec_*.cu), so that nvcc compiles the
 * groups side by side and each ptxas run stays short; acuLaunchPhase
 * (exec.cu) launches a phase on the kernel of its type's group. A bit per
 * type (ncclDataType_t numbering, 0-11); a type above 11 counts as 11, as
 * in the kernel's own dispatch. A launcher puts the kernel's parameters
 * together in buf: ACU_BLOB_LARGE bytes, 16-aligned. */
#ifndef ANYCCL_CUDA_EXEC_GROUPS_H
#define ANYCCL_CUDA_EXEC_GROUPS_H

#define ACU_TYPE_BIT(t) (1u << (t))
#define ACU_TYPES_ALL 0xfffu
/* int8, uint8 */
#define ACU_TYPES_I8 (ACU_TYPE_BIT(0) | ACU_TYPE_BIT(1))
/* int32, uint32, int64, uint64 */
#define ACU_TYPES_INT (ACU_TYPE_BIT(2) | ACU_TYPE_BIT(3) | ACU_TYPE_BIT(4) | ACU_TYPE_BIT(5))
/* half, bfloat16 */
#define ACU_TYPES_F16 (ACU_TYPE_BIT(6) | ACU_TYPE_BIT(9))
/* float, double */
#define ACU_TYPES_F32 (ACU_TYPE_BIT(7) | ACU_TYPE_BIT(8))
/* fp8 e4m3 */
#define ACU_TYPES_E4M3 ACU_TYPE_BIT(10)
/* fp8 e5m2 */
#define ACU_TYPES_E5M2 ACU_TYPE_BIT(11)

#ifdef __cplusplus
extern "C" {
#endif
struct acuPhase;
int acuLaunchI8(const struct acuPhase* blob, void* stream, void* buf);
int acuLaunchInt(const struct acuPhase* blob, void* stream, void* buf);
int acuLaunchF16(const struct acuPhase* blob, void* stream, void* buf);
int acuLaunchF32(const struct acuPhase* blob, void* stream, void* buf);
int acuLaunchE4M3(const struct acuPhase* blob, void* stream, void* buf);
int acuLaunchE5M2(const struct acuPhase* blob, void* stream, void* buf);
#ifdef __cplusplus
}
#endif

#endif
