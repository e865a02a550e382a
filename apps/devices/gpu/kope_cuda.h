/*
 * kope_cuda.h: the interface every cuda-target kernel implements.
 *
 * The same tensor struct and entry point as the cpu-c target (kope_kernel.h), with `data`
 * pointing to device memory. kope_kernel is a host function: it launches the kernels on the
 * current (default) stream and returns 0 on success; the harness synchronises the device after
 * it returns, so a kernel need not. GPU-only dtypes continue the codes of kope_kernel.h.
 */
#ifndef KOPE_CUDA_H
#define KOPE_CUDA_H

#ifdef __cplusplus
extern "C" { /* so the kope_kernel a .cu file defines keeps its C name */
#endif
#include "kope_kernel.h"
#ifdef __cplusplus
}
#endif

enum {
    KOPE_FLOAT16 = 6,
    KOPE_BFLOAT16 = 7,
    KOPE_INT8 = 8,
    KOPE_INT16 = 9,
};

/* Returns a nonzero status when the last launch failed (an invalid configuration, say). */
#define KOPE_CHECK_LAUNCH() do { if (cudaGetLastError() != cudaSuccess) return 1; } while (0)

#endif /* KOPE_CUDA_H */
