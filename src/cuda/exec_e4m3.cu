/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_E4M3
#define ACU_LAUNCH acuLaunchE4M3
#include "exec_groups.h"
#include "exec.cuh"
