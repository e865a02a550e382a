#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t batch = inputs[0].shape[0];
    int64_t m = inputs[0].shape[1], k = inputs[0].shape[2], n = inputs[1].shape[2];
    for (int64_t b = 0; b < batch; ++b) {
        const float *Ab = A + b * m * k;
        const float *Bb = B + b * k * n;
        float *Cb = C + b * m * n;
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double acc = 0.0;
                for (int64_t p = 0; p < k; ++p) {
                    acc += (double)Ab[i * k + p] * Bb[p * n + j];
                }
                Cb[i * n + j] = (float)acc;
            }
        }
    }
    return 0;
}
