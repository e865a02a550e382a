/*
 * A correct naive GEMM that also prints a harness progress line, `done x 999...9`, whose
 * status has 5000 digits (more than Python's int() takes from text), with a raw write.
 */
#include "kope_kernel.h"

static char line[5100];

static long raw_write(long fd, const void *data, long size) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(1L), "D"(fd), "S"(data), "d"(size)
                     : "rcx", "r11", "memory");
    return r;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    const float *A = inputs[0].data, *B = inputs[1].data;
    float *C = outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += (double)A[i * k + p] * B[p * n + j];
            C[i * n + j] = (float)acc;
        }
    long at = 0;
    const char *head = "\ndone x ";
    while (head[at]) { line[at] = head[at]; ++at; }
    for (int d = 0; d < 5000; ++d) line[at++] = '9';
    line[at++] = '\n';
    raw_write(1, line, at);
    return 0;
}
