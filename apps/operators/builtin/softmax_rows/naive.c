#include <math.h>

#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float max = xr[0];
        for (int64_t c = 1; c < cols; ++c) {
            if (xr[c] > max) max = xr[c];
        }
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = expf(xr[c] - max);
            sum += yr[c];
        }
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = (float)(yr[c] / sum);
        }
    }
    return 0;
}
