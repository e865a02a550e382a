/*
 * Accumulates into a malloc'd scratch buffer it never zeroes, then copies it out. Right only
 * when the heap happens to hand back zeroed memory; the harness sets MALLOC_PERTURB_ so that
 * fresh heap memory is garbage.
 */
#include <stdlib.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    double *scratch = malloc((size_t)(m * n) * sizeof(double)); /* not zeroed: the bug */
    if (scratch == NULL) return 1;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t j = 0; j < n; ++j) scratch[i * n + j] += (double)A[i * k + p] * B[p * n + j];
        }
    }
    for (int64_t idx = 0; idx < m * n; ++idx) C[idx] = (float)scratch[idx];
    free(scratch);
    return 0;
}
