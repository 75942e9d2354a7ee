/* <cuda_runtime.h> of the CPU emulation (cuda_runtime_api.h says why): the
 * runtime API, and in C++ the device side the kernels use (emu_device.h). */
#ifndef ACTC_CUDA_EMU_RUNTIME_H
#define ACTC_CUDA_EMU_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "emu_device.h"
#endif
#endif
