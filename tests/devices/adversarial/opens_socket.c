/* Opens a network socket (to send the inputs somewhere, say): rejected before it runs. */
#include <sys/socket.h>
#include <unistd.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)attrs; (void)n_attrs;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    close(fd);
    return 0;
}
