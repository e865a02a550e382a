/*
 * Computes the right answer, then clears its inputs (casting away const). The judge hashes
 * the input files after the run: a kernel must not write its inputs.
 */
#include <string.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    }
    for (int32_t t = 0; t < n_inputs; ++t) {
        memset(inputs[t].data, 0, (size_t)kope_numel(&inputs[t]) * sizeof(float));
    }
    return 0;
}
