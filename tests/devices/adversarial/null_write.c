/*
 * Writes through a NULL pointer: the candidate process dies of SIGSEGV, which the verdict
 * must report as a crash, naming the signal and the run.
 */
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    /* volatile twice over, or gcc drops (or traps) a store it can prove goes to NULL */
    volatile float *volatile nowhere = NULL;
    *nowhere = 1.0f;
    return 0;
}
