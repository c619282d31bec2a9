/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_F16
#define ACU_LAUNCH acuLaunchF16
#include "exec_groups.h"
#include "exec.cuh"
