/* Never returns: the evaluator's time limit must stop it. */
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    for (volatile unsigned long spin = 0;; ++spin) {
    }
    return 0;
}
