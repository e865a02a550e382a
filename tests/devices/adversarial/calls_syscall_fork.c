/*
 * Forks through the generic syscall(2) wrapper rather than fork(): `syscall` is not on the
 * symbol allowlist, so this is rejected before it runs.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    long child = syscall(SYS_fork);
    if (child == 0) syscall(SYS_exit_group, 0);
    return child < 0;
}
