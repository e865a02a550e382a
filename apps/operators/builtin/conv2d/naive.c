#include "kope_kernel.h"

/* attrs[0] = stride, attrs[1] = padding */
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    const float *weight = (const float *)inputs[1].data;
    const float *bias = (const float *)inputs[2].data;
    float *y = (float *)outputs[0].data;
    int64_t n = inputs[0].shape[0], c = inputs[0].shape[1];
    int64_t h = inputs[0].shape[2], w = inputs[0].shape[3];
    int64_t k = inputs[1].shape[0], r = inputs[1].shape[2], s = inputs[1].shape[3];
    int64_t oh = outputs[0].shape[2], ow = outputs[0].shape[3];
    int64_t stride = (int64_t)attrs[0], padding = (int64_t)attrs[1];
    for (int64_t b = 0; b < n; ++b) {
        for (int64_t o = 0; o < k; ++o) {
            for (int64_t i = 0; i < oh; ++i) {
                for (int64_t j = 0; j < ow; ++j) {
                    double acc = bias[o];
                    for (int64_t ch = 0; ch < c; ++ch) {
                        for (int64_t p = 0; p < r; ++p) {
                            int64_t row = i * stride - padding + p;
                            if (row < 0 || row >= h) continue; /* zero padding */
                            for (int64_t q = 0; q < s; ++q) {
                                int64_t col = j * stride - padding + q;
                                if (col < 0 || col >= w) continue;
                                acc += (double)x[((b * c + ch) * h + row) * w + col] *
                                       weight[((o * c + ch) * r + p) * s + q];
                            }
                        }
                    }
                    y[((b * k + o) * oh + i) * ow + j] = (float)acc;
                }
            }
        }
    }
    return 0;
}
