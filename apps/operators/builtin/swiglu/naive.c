#include <math.h>

#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *a = (const float *)inputs[0].data;
    const float *b = (const float *)inputs[1].data;
    float *y = (float *)outputs[0].data;
    int64_t n = kope_numel(&inputs[0]);
    for (int64_t i = 0; i < n; ++i) {
        float silu = a[i] / (1.0f + expf(-a[i]));
        y[i] = silu * b[i];
    }
    return 0;
}
