/* Starts a process with fork(): the symbol allowlist must reject it before it runs. */
#define _GNU_SOURCE
#include <unistd.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    pid_t child = fork();
    if (child == 0) _exit(0);
    return child < 0;
}
