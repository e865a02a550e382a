#include "kope_kernel.h"

/* attrs[0] = kernel, attrs[1] = stride */
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t n = inputs[0].shape[0], c = inputs[0].shape[1];
    int64_t h = inputs[0].shape[2], w = inputs[0].shape[3];
    int64_t oh = outputs[0].shape[2], ow = outputs[0].shape[3];
    int64_t kernel = (int64_t)attrs[0], stride = (int64_t)attrs[1];
    for (int64_t plane = 0; plane < n * c; ++plane) {
        const float *xp = x + plane * h * w;
        float *yp = y + plane * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
            for (int64_t j = 0; j < ow; ++j) {
                double sum = 0.0;
                for (int64_t p = 0; p < kernel; ++p) {
                    for (int64_t q = 0; q < kernel; ++q) {
                        sum += xp[(i * stride + p) * w + (j * stride + q)];
                    }
                }
                yp[i * ow + j] = (float)(sum / (double)(kernel * kernel));
            }
        }
    }
    return 0;
}
