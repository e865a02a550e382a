/*
 * kope_kernel.h: the one interface every cpu-c kernel implements.
 *
 * A kernel receives its inputs and outputs as DLPack-like tensors and the operator's scalar
 * attributes (in the order the operator declares them) as doubles, and returns 0 on success.
 * Outputs are allocated by the caller with the shapes the operator declares. Strides are in
 * elements; tensors handed to kernels are contiguous (row-major) unless the operator says so.
 */
#ifndef KOPE_KERNEL_H
#define KOPE_KERNEL_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KOPE_FLOAT32 = 0,
    KOPE_FLOAT64 = 1,
    KOPE_INT32 = 2,
    KOPE_INT64 = 3,
    KOPE_UINT8 = 4,
    KOPE_BOOL = 5,
} kope_dtype;

typedef struct {
    void *data;
    int32_t dtype;          /* a kope_dtype */
    int32_t ndim;
    const int64_t *shape;   /* ndim entries */
    const int64_t *strides; /* ndim entries, in elements */
} kope_tensor;

/* Number of elements of a tensor. */
static inline int64_t kope_numel(const kope_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

/* Every kernel defines exactly this function. */
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs);

/*
 * Debug runs only: KOPE_DUMP("name", ptr, count, KOPE_FLOAT32) records `count` elements of a
 * buffer under a name. Elsewhere it compiles to nothing.
 */
#ifdef KOPE_DEBUG_DUMPS
void kope_dump(const char *name, const void *data, int64_t count, int32_t dtype);
#define KOPE_DUMP(name, data, count, dtype) kope_dump((name), (data), (count), (dtype))
#else
#define KOPE_DUMP(name, data, count, dtype) ((void)0)
#endif

#endif /* KOPE_KERNEL_H */
