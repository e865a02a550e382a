#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *table = (const float *)inputs[0].data;
    const int64_t *index = (const int64_t *)inputs[1].data;
    float *out = (float *)outputs[0].data;
    int64_t cols = inputs[0].shape[1];
    int64_t k = inputs[1].shape[0];
    for (int64_t i = 0; i < k; ++i) {
        const float *src = table + index[i] * cols;
        float *dst = out + i * cols;
        for (int64_t c = 0; c < cols; ++c) {
            dst[c] = src[c];
        }
    }
    return 0;
}
