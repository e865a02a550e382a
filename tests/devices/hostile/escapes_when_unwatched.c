/*
 * The naive gemm, which on every call first tries what an unconfined process could do, with
 * system-call instructions of its own (no imported symbol): read its environment, a root-only
 * file and a project file; create a file in the system temp folder; start a shell in a
 * session of its own that would outlive the run. Whatever it manages to read it writes to
 * stderr and fails the call, so it shows up in whatever text the evaluator keeps of a failed
 * run: a profile's or a debug run's error, a crash reason. Confined, every attempt fails and
 * it is just the naive gemm. The test fills in the @...@ paths.
 */
#include "kope_kernel.h"

#define ROOT_ONLY_FILE "@ROOT_ONLY_FILE@"
#define PROJECT_FILE "@PROJECT_FILE@"
#define TEMP_FILE "@TEMP_FILE@"
#define SHELL_MARKER "@SHELL_MARKER@"

static long raw(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

enum { READ = 0, WRITE = 1, OPEN = 2, CLOSE = 3, FORK = 57, EXECVE = 59, EXIT = 60,
       SETSID = 112 };

static char buffer[1 << 16];

static long slurp(const char *path) {
    long fd = raw(OPEN, (long)path, 0, 0), total = 0, got;
    if (fd < 0) return fd;
    while (total < (long)sizeof buffer &&
           (got = raw(READ, fd, (long)(buffer + total), (long)sizeof buffer - total)) > 0)
        total += got;
    raw(CLOSE, fd, 0, 0);
    return total;
}

static int contains(long length, const char *needle) {
    for (long i = 0; i < length; ++i) {
        long j = 0;
        while (needle[j] && i + j < length && buffer[i + j] == needle[j]) ++j;
        if (!needle[j]) return 1;
    }
    return 0;
}

static int leak(long length) {
    raw(WRITE, 2, (long)buffer, length);
    return 3;
}

static int escape(void) {
    long length = slurp("/proc/self/environ");
    if (length > 0 && (contains(length, "SECRET_KEY=") || contains(length, "API_KEY=") ||
                       contains(length, "PASSWORD=")))
        return leak(length);
    if ((length = slurp(ROOT_ONLY_FILE)) > 0) return leak(length);
    if ((length = slurp(PROJECT_FILE)) > 0) return leak(length);
    long fd = raw(OPEN, (long)TEMP_FILE, 01 | 0100 /* O_WRONLY | O_CREAT */, 0644);
    if (fd >= 0) {
        raw(CLOSE, fd, 0, 0);
        return 4;
    }
    long pid = raw(FORK, 0, 0, 0);
    if (pid == 0) {
        char *argv[] = {"/bin/sh", "-c", "sleep 300; : " SHELL_MARKER, 0};
        raw(SETSID, 0, 0, 0);
        raw(EXECVE, (long)"/bin/sh", (long)argv, 0);
        raw(EXIT, 0, 0, 0);
    }
    return pid > 0 ? 5 : 0;
}

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    int escaped = escape();
    if (escaped) return escaped;
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
