/*
 * Allocates 16 MiB blocks forever, touching every page and never freeing, the way a leak
 * does. The blocks are chained so the compiler cannot drop them. RLIMIT_AS makes malloc fail
 * at last, and this kernel, like careless code, writes through the NULL it gets back.
 */
#include <stdlib.h>
#include <string.h>
#include "kope_kernel.h"

#define BLOCK_BYTES (16u << 20)

static void *volatile newest_block;

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    for (;;) {
        void **block = malloc(BLOCK_BYTES);
        memset(block, 1, BLOCK_BYTES);
        block[0] = newest_block;
        newest_block = block;
    }
    return 0;
}
