#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *pred = (const float *)inputs[0].data;
    const float *target = (const float *)inputs[1].data;
    float *loss = (float *)outputs[0].data; /* a 0-d tensor: one float */
    int64_t n = kope_numel(&inputs[0]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double d = (double)pred[i] - (double)target[i];
        sum += d * d;
    }
    loss[0] = (float)(sum / (double)n);
    return 0;
}
