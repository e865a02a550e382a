#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    int64_t *out = (int64_t *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; ++c) {
            if (xr[c] > xr[best]) best = c; /* strictly greater: ties keep the first index */
        }
        out[r] = best;
    }
    return 0;
}
