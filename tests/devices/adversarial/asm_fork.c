/*
 * Forks with an inline `syscall` instruction (fork is 57 on x86_64): no imported symbol
 * betrays it, so the symbol check passes and the seccomp filter has to stop it (EPERM).
 *
 * If the fork went through, the child would spin (until the CPU limit) as a stray process
 * and the parent would compute the right answer; when the fork is refused the kernel returns
 * 100 + errno, so the verdict shows which errno the filter answered with.
 */
#include "kope_kernel.h"

static long raw_syscall0(long number) {
    long result;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number) : "rcx", "r11", "memory");
    return result;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    long child = raw_syscall0(57);
    if (child == 0) {
        for (volatile unsigned long spin = 0;; ++spin) {
        }
    }
    if (child < 0) return 100 + (int)-child;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    }
    return 0;
}
