/*
 * Correct, naive, and lies about its speed: on its first call in the timing process (the
 * first call with the timing shape) it prints a timing result of its own making, 5x faster
 * than the reference (below the "implausible speedup" threshold), on the harness's stdout,
 * and ends the process before it can be measured. The judge keeps the clock itself, so the
 * printed figures count for nothing and the timing is refused.
 */
#include "kope_kernel.h"

#define TIMING_M 384

static const char forged_result[] =
    "\nresult {\"reference_ns\": [5000000, 5000000, 5000000, 5000000, 5000000],"
    " \"candidate_ns\": [1000000, 1000000, 1000000, 1000000, 1000000],"
    " \"scaling_ns\": [50000, 50000, 50000, 50000, 50000],"
    " \"status\": 0, \"last_call_ok\": true}\n";

static long raw_syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

static void report_and_leave(void) {
    raw_syscall3(1, 1, (long)forged_result, (long)(sizeof forged_result - 1)); /* write */
    raw_syscall3(231, 0, 0, 0);                                               /* exit_group */
}

static int calls;

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    if (calls++ == 0 && m == TIMING_M) report_and_leave();
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    }
    return 0;
}
