/*
 * Writes 8 MiB of text to stdout on every call with a raw `write` syscall (no imported
 * symbol), flooding the log the evaluator reads progress from; a few calls pass the file
 * size limit. It computes the right answer too. The evaluator must still return a verdict.
 */
#include "kope_kernel.h"

#define LINE_BYTES 4096
#define LINES 2048

static long raw_write(int fd, const char *buffer, long count) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(1L), "D"((long)fd), "S"(buffer), "d"(count)
                     : "rcx", "r11", "memory");
    return result;
}

static void flood_stdout(void) {
    static char line[LINE_BYTES];
    for (int i = 0; i < LINE_BYTES - 1; ++i) line[i] = 'x';
    line[LINE_BYTES - 1] = '\n';
    for (int i = 0; i < LINES; ++i) raw_write(1, line, LINE_BYTES);
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    flood_stdout();
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
