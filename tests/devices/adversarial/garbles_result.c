/*
 * Prints a `result` line that is not JSON and ends its process with status 0 before the
 * harness can print the real one. The evaluator parses the last `result` line of a process
 * that exited cleanly: a line it cannot read must give a verdict (crashed), not an exception.
 */
#include "kope_kernel.h"

static const char garbled_result[] = "\nresult {not json\n";

static long raw_syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    raw_syscall3(1, 1, (long)garbled_result, (long)(sizeof garbled_result - 1)); /* write */
    raw_syscall3(231, 0, 0, 0);                                                 /* exit_group */
    return 0;
}
