/*
 * Splits the reduction dimension across OpenMP threads, each into its own partial product,
 * then merges the partials into the shared output without a critical section or atomics: a
 * read-modify-write race in which the last thread to write wins and the other partial
 * products are lost.
 *
 * A race that needs luck to show is no test on a busy two-core machine, so the window is as
 * wide as it gets: every thread reads the shared output, all wait at a barrier, then every
 * thread writes back what it read plus its own part.
 */
#include <stdlib.h>
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
    size_t bytes = (size_t)(m * n) * sizeof(float);
    memset(C, 0, bytes);
    #pragma omp parallel
    {
        float *partial = calloc((size_t)(m * n), sizeof(float));
        float *seen = malloc(bytes);
        int ready = partial != NULL && seen != NULL;
        #pragma omp for schedule(static)
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t i = 0; ready && i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) partial[i * n + j] += A[i * k + p] * B[p * n + j];
            }
        }
        if (ready) memcpy(seen, C, bytes); /* read the shared output ... */
        #pragma omp barrier
        for (int64_t idx = 0; ready && idx < m * n; ++idx) {
            C[idx] = seen[idx] + partial[idx]; /* ... and write it back: no lock */
        }
        free(partial);
        free(seen);
    }
    return 0;
}
