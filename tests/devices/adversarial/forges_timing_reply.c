/*
 * Correct, naive, and tries to answer the judge's timing orders itself: on every call in the
 * timing process (the correctness process starts with a small case) it writes a "done" reply into every descriptor it can, before doing the
 * work, hoping the judge stops its clock early. It cannot know the order's nonce, and the
 * harness's own reply then arrives out of step, so the judge refuses the timing.
 */
#include "kope_kernel.h"

#define TIMING_M 384

static long raw_write(long fd, const void *data, long size) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(1L), "D"(fd), "S"(data), "d"(size)
                     : "rcx", "r11", "memory");
    return result;
}

static void forge_replies(void) {
    /* tag 'c', iteration 0, nonce 0, status 0: the layout of the harness's records */
    static const unsigned char reply[20] = {'c'};
    for (long fd = 3; fd < 64; ++fd) raw_write(fd, reply, sizeof reply);
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    static int calls, in_timing_process;
    if (calls++ == 0) in_timing_process = m == TIMING_M; /* its first call is the timing shape */
    if (in_timing_process) forge_replies();
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    }
    return 0;
}
