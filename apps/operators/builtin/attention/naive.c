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
    int64_t sq = inputs[0].shape[2], d = inputs[0].shape[3];
    int64_t skv = inputs[1].shape[2];
    double scale = 1.0 / sqrt((double)d);
    double *p = malloc((size_t)skv * sizeof(double)); /* one row of scores / probabilities */
    double *acc = malloc((size_t)d * sizeof(double));
    if (p == NULL || acc == NULL) {
        free(p);
        free(acc);
        return 1;
    }
    for (int64_t hd = 0; hd < heads; ++hd) {
        const float *qh = q + hd * sq * d;
        const float *kh = k + hd * skv * d;
        const float *vh = v + hd * skv * d;
        float *outh = out + hd * sq * d;
        for (int64_t i = 0; i < sq; ++i) {
            /* scores s_j = scale * q_i . k_j, and their maximum */
            double max = -INFINITY;
            for (int64_t j = 0; j < skv; ++j) {
                double dot = 0.0;
                for (int64_t e = 0; e < d; ++e) {
                    dot += (double)qh[i * d + e] * kh[j * d + e];
                }
                p[j] = dot * scale;
                if (p[j] > max) max = p[j];
            }
            /* softmax weights, unnormalised, and their sum */
            double sum = 0.0;
            for (int64_t j = 0; j < skv; ++j) {
                p[j] = exp(p[j] - max);
                sum += p[j];
            }
            /* out_i = sum_j p_j v_j / sum */
            for (int64_t e = 0; e < d; ++e) acc[e] = 0.0;
            for (int64_t j = 0; j < skv; ++j) {
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
