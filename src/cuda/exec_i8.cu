/* The executor kernel for one group of element types (exec_groups.h). */
#define ACU_TYPES ACU_TYPES_I8
#define ACU_LAUNCH acuLaunchI8
#include "exec_groups.h"
#include "exec.cuh"
