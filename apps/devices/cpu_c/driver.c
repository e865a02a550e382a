/*
 * driver.c: runs one cpu-c kernel on one test case as a plain C program, for the diagnostics
 * that cannot run inside Python (cachegrind profiles, AddressSanitizer + UBSan runs).
 *
 *     driver CASEFILE OUTFILE [REPEATS]
 *
 * CASEFILE is written by casefile.py, which documents its format. Every tensor gets its own
 * 64-byte aligned allocation of exactly its size, so a sanitizer sees any access past its end.
 * Outputs start as NaN (float dtypes) or 0. OUTFILE receives the output tensors' bytes,
 * concatenated in order.
 *
 * Exit status: 0; 2 for bad usage, a bad case file or an I/O failure; otherwise the kernel's
 * non-zero return value (1 when its low 8 bits are 0), which is also printed to stderr.
 *
 * Built with -DKOPE_DEBUG_DUMPS, it also implements kope_dump (see kope_kernel.h): records are
 * appended to the file named by the KOPE_DUMP_FILE environment variable, each one being
 *     "KDMP", int32 name_len, name bytes, int32 dtype, int64 count, int64 stored,
 *     stored elements (stored = min(count, 4096); 0 when the dtype is unknown)
 * in native (little-endian) byte order. After 256 records further dumps are dropped with a
 * note on stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kope_kernel.h"

#define CASE_MAGIC "KOPECASE"
#define CASE_VERSION 1
#define MAX_TENSORS 64
#define MAX_NDIM 16
#define MAX_ATTRS 4096
#define BAD_CASE_EXIT 2

typedef struct {
    const unsigned char *next;
    size_t left;
} reader;

typedef struct {
    kope_tensor *inputs, *outputs;
    int32_t n_inputs, n_outputs, n_attrs;
    double *attrs;
} kernel_case;

static _Noreturn void fail(const char *what, const char *detail) {
    fprintf(stderr, "driver: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(BAD_CASE_EXIT);
}

static size_t dtype_size(int32_t dtype) {
    switch (dtype) {
    case KOPE_FLOAT32: case KOPE_INT32: return 4;
    case KOPE_FLOAT64: case KOPE_INT64: return 8;
    case KOPE_UINT8: case KOPE_BOOL: return 1;
    default: return 0;
    }
}

static void *checked_malloc(size_t bytes) {
    void *memory = malloc(bytes ? bytes : 1);
    if (!memory) fail("out of memory", NULL);
    return memory;
}

static unsigned char *read_whole_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) fail("cannot open the case file", strerror(errno));
    size_t capacity = 1 << 16, used = 0;
    unsigned char *bytes = checked_malloc(capacity);
    size_t got;
    while ((got = fread(bytes + used, 1, capacity - used, file)) > 0) {
        used += got;
        if (used == capacity) {
            capacity *= 2;
            bytes = realloc(bytes, capacity);
            if (!bytes) fail("out of memory", NULL);
        }
    }
    if (ferror(file)) fail("cannot read the case file", strerror(errno));
    fclose(file);
    *size = used;
    return bytes;
}

static const void *take(reader *r, size_t bytes, const char *what) {
    if (bytes > r->left) fail("case file is truncated while reading", what);
    const void *start = r->next;
    r->next += bytes;
    r->left -= bytes;
    return start;
}

static int32_t take_int32(reader *r, const char *what) {
    int32_t value;
    memcpy(&value, take(r, sizeof value, what), sizeof value);
    return value;
}

static int32_t take_count(reader *r, const char *what, int32_t max) {
    int32_t count = take_int32(r, what);
    if (count < 0 || count > max) fail("case file has an out-of-range count of", what);
    return count;
}

static void *aligned_buffer(size_t bytes) {
    void *memory = NULL;
    if (posix_memalign(&memory, 64, bytes ? bytes : 1) != 0) fail("out of memory", NULL);
    return memory;
}

static size_t tensor_bytes(const kope_tensor *t) {
    return (size_t)kope_numel(t) * dtype_size(t->dtype);
}

/* Reads dtype, ndim and shape and computes contiguous strides; data is left to the caller. */
static void take_tensor_header(reader *r, kope_tensor *t) {
    t->dtype = take_int32(r, "a dtype");
    if (dtype_size(t->dtype) == 0) fail("case file has an unknown dtype code", NULL);
    t->ndim = take_count(r, "dimensions", MAX_NDIM);
    int64_t *shape = checked_malloc(sizeof(int64_t) * (size_t)t->ndim);
    int64_t *strides = checked_malloc(sizeof(int64_t) * (size_t)t->ndim);
    memcpy(shape, take(r, sizeof(int64_t) * (size_t)t->ndim, "a shape"),
           sizeof(int64_t) * (size_t)t->ndim);
    int64_t numel = 1;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
        if (shape[i] < 0) fail("case file has a negative dimension", NULL);
        strides[i] = numel;
        if (shape[i] > 0 && numel > (INT64_MAX / 8) / shape[i]) fail("tensor is too large", NULL);
        numel *= shape[i];
    }
    t->shape = shape;
    t->strides = strides;
}

static void fill_output(kope_tensor *t) {
    int64_t numel = kope_numel(t);
    if (t->dtype == KOPE_FLOAT32) {
        for (int64_t i = 0; i < numel; ++i) ((float *)t->data)[i] = NAN;
    } else if (t->dtype == KOPE_FLOAT64) {
        for (int64_t i = 0; i < numel; ++i) ((double *)t->data)[i] = NAN;
    } else {
        memset(t->data, 0, tensor_bytes(t));
    }
}

static kernel_case parse_case(const unsigned char *bytes, size_t size) {
    reader r = {bytes, size};
    if (memcmp(take(&r, 8, "the magic"), CASE_MAGIC, 8) != 0) fail("not a KOPECASE file", NULL);
    if (take_int32(&r, "the version") != CASE_VERSION) fail("unsupported case file version", NULL);
    kernel_case c;
    c.n_inputs = take_count(&r, "inputs", MAX_TENSORS);
    c.n_outputs = take_count(&r, "outputs", MAX_TENSORS);
    c.n_attrs = take_count(&r, "attributes", MAX_ATTRS);
    c.inputs = checked_malloc(sizeof(kope_tensor) * (size_t)c.n_inputs);
    c.outputs = checked_malloc(sizeof(kope_tensor) * (size_t)c.n_outputs);
    c.attrs = checked_malloc(sizeof(double) * (size_t)c.n_attrs);
    for (int32_t i = 0; i < c.n_inputs; ++i) {
        take_tensor_header(&r, &c.inputs[i]);
        size_t bytes = tensor_bytes(&c.inputs[i]);
        const void *data = take(&r, bytes, "input data");
        c.inputs[i].data = aligned_buffer(bytes);
        memcpy(c.inputs[i].data, data, bytes);
    }
    for (int32_t i = 0; i < c.n_outputs; ++i) {
        take_tensor_header(&r, &c.outputs[i]);
        c.outputs[i].data = aligned_buffer(tensor_bytes(&c.outputs[i]));
        fill_output(&c.outputs[i]);
    }
    size_t attr_bytes = sizeof(double) * (size_t)c.n_attrs;
    memcpy(c.attrs, take(&r, attr_bytes, "attributes"), attr_bytes);
    if (r.left != 0) fail("case file has trailing bytes", NULL);
    return c;
}

static void write_outputs(const char *path, const kernel_case *c) {
    FILE *file = fopen(path, "wb");
    if (!file) fail("cannot create the output file", strerror(errno));
    for (int32_t i = 0; i < c->n_outputs; ++i) {
        size_t bytes = tensor_bytes(&c->outputs[i]);
        if (fwrite(c->outputs[i].data, 1, bytes, file) != bytes) {
            fail("cannot write the output file", strerror(errno));
        }
    }
    if (fclose(file) != 0) fail("cannot write the output file", strerror(errno));
}

static long parse_repeats(const char *text) {
    char *end;
    errno = 0;
    long repeats = strtol(text, &end, 10);
    if (errno || *end || repeats < 1) fail("REPEATS must be a positive integer", text);
    return repeats;
}

static int exit_status_for(int kernel_status) {
    if (kernel_status == 0) return 0;
    fprintf(stderr, "driver: kope_kernel returned %d\n", kernel_status);
    return (kernel_status & 0xff) ? (kernel_status & 0xff) : 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) fail("usage: driver CASEFILE OUTFILE [REPEATS]", NULL);
    long repeats = argc == 4 ? parse_repeats(argv[3]) : 1;
    size_t size;
    unsigned char *bytes = read_whole_file(argv[1], &size);
    kernel_case c = parse_case(bytes, size);
    free(bytes);
    int status = 0;
    for (long i = 0; i < repeats && status == 0; ++i) {
        status = kope_kernel(c.inputs, c.n_inputs, c.outputs, c.n_outputs, c.attrs, c.n_attrs);
    }
    write_outputs(argv[2], &c);
    return exit_status_for(status);
}

#ifdef KOPE_DEBUG_DUMPS
#define DUMP_MAX_VALUES 4096
#define DUMP_MAX_RECORDS 256

static void write_dump_record(FILE *file, const char *name, const void *data, int64_t count,
                              int32_t dtype) {
    int32_t name_len = (int32_t)strnlen(name, 255);
    size_t item = dtype_size(dtype);
    int64_t stored = 0;
    if (data && item && count > 0) stored = count < DUMP_MAX_VALUES ? count : DUMP_MAX_VALUES;
    fwrite("KDMP", 1, 4, file);
    fwrite(&name_len, sizeof name_len, 1, file);
    fwrite(name, 1, (size_t)name_len, file);
    fwrite(&dtype, sizeof dtype, 1, file);
    fwrite(&count, sizeof count, 1, file);
    fwrite(&stored, sizeof stored, 1, file);
    if (stored) fwrite(data, item, (size_t)stored, file);
}

static void append_dump_record(const char *name, const void *data, int64_t count, int32_t dtype) {
    const char *path = getenv("KOPE_DUMP_FILE");
    if (!path) return;
    /* Opened and closed every time: a sanitizer stops the program with _exit, which would
       lose anything left in a stdio buffer. */
    FILE *file = fopen(path, "ab");
    if (!file) return;
    write_dump_record(file, name ? name : "(null)", data, count, dtype);
    fclose(file);
}

void kope_dump(const char *name, const void *data, int64_t count, int32_t dtype) {
    static int records;
#pragma omp critical(kope_dump)
    {
        if (records < DUMP_MAX_RECORDS) {
            append_dump_record(name, data, count, dtype);
            ++records;
        } else if (records == DUMP_MAX_RECORDS) {
            fprintf(stderr, "driver: KOPE_DUMP limit of %d records reached; later ones dropped\n",
                    DUMP_MAX_RECORDS);
            ++records;
        }
    }
}
#endif
