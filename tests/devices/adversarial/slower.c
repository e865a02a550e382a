/*
 * Correct but wasteful: the naive kernel's work done eight times over (each pass stores into
 * C, which may alias A and B as far as the compiler knows, so no pass can be skipped). Its
 * speedup must come out well below the naive kernel's: below half of it even when the two
 * evaluations, timed apart, meet different loads on a busy machine.
 */
#include "kope_kernel.h"

#define PASSES 8

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int pass = 0; pass < PASSES; ++pass) {
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double acc = 0.0;
                for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
                C[i * n + j] = (float)acc;
            }
        }
    }
    return 0;
}
