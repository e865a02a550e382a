/* Does not compile: a missing semicolon. The verdict must point at the line. */
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    float *C = (float *)outputs[0].data
    C[0] = 0.0f;
    return 0;
}
