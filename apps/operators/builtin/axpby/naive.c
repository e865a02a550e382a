#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    const float *y = (const float *)inputs[1].data;
    float *out = (float *)outputs[0].data;
    float alpha = (float)attrs[0];
    float beta = (float)attrs[1];
    int64_t n = kope_numel(&inputs[0]);
    for (int64_t i = 0; i < n; ++i) {
        out[i] = alpha * x[i] + beta * y[i];
    }
    return 0;
}
