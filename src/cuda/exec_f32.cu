/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_F32
#define ACU_LAUNCH acuLaunchF32
#include "exec_groups.h"
#include "exec.cuh"
