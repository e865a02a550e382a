#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *out = (float *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
            out[j * rows + i] = x[i * cols + j];
        }
    }
    return 0;
}
