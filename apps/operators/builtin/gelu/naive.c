#include <math.h>

#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t n = kope_numel(&inputs[0]);
    const float inv_sqrt2 = 0.70710678118654752440f;
    for (int64_t i = 0; i < n; ++i) {
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * inv_sqrt2));
    }
    return 0;
}
