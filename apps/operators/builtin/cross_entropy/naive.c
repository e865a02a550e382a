#include <math.h>

#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *logits = (const float *)inputs[0].data;
    const int64_t *target = (const int64_t *)inputs[1].data;
    float *loss = (float *)outputs[0].data; /* a 0-d tensor: one float */
    int64_t batch = inputs[0].shape[0], classes = inputs[0].shape[1];
    double total = 0.0;
    for (int64_t b = 0; b < batch; ++b) {
        const float *row = logits + b * classes;
        float max = row[0];
        for (int64_t c = 1; c < classes; ++c) {
            if (row[c] > max) max = row[c];
        }
        double sum = 0.0;
        for (int64_t c = 0; c < classes; ++c) {
            sum += expf(row[c] - max);
        }
        double lse = (double)max + log(sum);
        total += lse - (double)row[target[b]];
    }
    loss[0] = (float)(total / (double)batch);
    return 0;
}
