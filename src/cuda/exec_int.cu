/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_INT
#define ACU_LAUNCH acuLaunchInt
#include "exec_groups.h"
#include "exec.cuh"
