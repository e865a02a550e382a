#include <math.h>
#include <stdlib.h>

#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *q = (const float *)inputs[0].data;
    const float *k = (const float *)inputs[1].data;
    const float *v = (const float *)inputs[2].data;
    float *out = (float *)outputs[0].data;
    int64_t heads = inputs[0].shape[0] * inputs[0].shape[1]; /* b * h independent heads */
    int64_t s = inputs[0].shape[2], d = inputs[0].shape[3];
    double scale = 1.0 / sqrt((double)d);
    double *p = malloc((size_t)s * sizeof(double)); /* one row of scores / probabilities */
    double *acc = malloc((size_t)d * sizeof(double));
    if (p == NULL || acc == NULL) {
        free(p);
        free(acc);
        return 1;
    }
    for (int64_t hd = 0; hd < heads; ++hd) {
        const float *qh = q + hd * s * d;
        const float *kh = k + hd * s * d;
        const float *vh = v + hd * s * d;
        float *outh = out + hd * s * d;
        for (int64_t i = 0; i < s; ++i) {
            /* query i attends to keys 0..i only: scores s_j = scale * q_i . k_j, j <= i */
            double max = -INFINITY;
            for (int64_t j = 0; j <= i; ++j) {
                double dot = 0.0;
                for (int64_t e = 0; e < d; ++e) {
                    dot += (double)qh[i * d + e] * kh[j * d + e];
                }
                p[j] = dot * scale;
                if (p[j] > max) max = p[j];
            }
            double sum = 0.0;
            for (int64_t j = 0; j <= i; ++j) {
                p[j] = exp(p[j] - max);
                sum += p[j];
            }
            for (int64_t e = 0; e < d; ++e) acc[e] = 0.0;
            for (int64_t j = 0; j <= i; ++j) {
                for (int64_t e = 0; e < d; ++e) {
                    acc[e] += p[j] * vh[j * d + e];
                }
            }
            for (int64_t e = 0; e < d; ++e) {
                outh[i * d + e] = (float)(acc[e] / sum);
            }
        }
    }
    free(p);
    free(acc);
    return 0;
}
