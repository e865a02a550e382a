#include <math.h>

#include "kope_kernel.h"

/* attrs[0] = eps */
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    const float *weight = (const float *)inputs[1].data;
    const float *bias = (const float *)inputs[2].data;
    float *y = (float *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    double eps = attrs[0];
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            sum += xr[c];
        }
        double mean = sum / cols;
        double sq = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            double d = xr[c] - mean;
            sq += d * d;
        }
        double rstd = 1.0 / sqrt(sq / cols + eps);
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = (float)((xr[c] - mean) * rstd * weight[c] + bias[c]);
        }
    }
    return 0;
}
