/* Writes its inputs to a file with stdio: rejected before it runs. */
#include <stdio.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    FILE *file = fopen("/tmp/kope-stolen-inputs.bin", "wb");
    if (file == NULL) return 1;
    fwrite(inputs[0].data, sizeof(float), (size_t)kope_numel(&inputs[0]), file);
    fclose(file);
    return 0;
}
