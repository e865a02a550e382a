/*
 * Correct only for the timing case's shape (384 x 384 x 384), garbage (zeros) otherwise: a
 * kernel tuned for the benchmark alone. The other cases must expose it.
 */
#include <string.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    if (m != 384 || k != 384 || n != 384) {
        memset(C, 0, (size_t)(m * n) * sizeof(float));
        return 0;
    }
    for (int64_t i = 0; i < 384; ++i) {
        for (int64_t j = 0; j < 384; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < 384; ++p) acc += (double)A[i * 384 + p] * B[p * 384 + j];
            C[i * 384 + j] = (float)acc;
        }
    }
    return 0;
}
