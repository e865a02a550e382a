/* Loads an outside library at run time with dlopen: rejected before it runs. */
#include <dlfcn.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    void *library = dlopen("libcurl.so.4", RTLD_NOW);
    return library == NULL;
}
