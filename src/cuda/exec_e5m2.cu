/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_E5M2
#define ACU_LAUNCH acuLaunchE5M2
#include "exec_groups.h"
#include "exec.cuh"
