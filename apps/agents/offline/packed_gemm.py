"""The C that the `packed_gemm` strategy puts into a kernel: a packed, register-tiled GEMM.

`kope_packed_gemm(m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, kc_block)` computes
c[i*ldc + j] = sum_p a[i*a_row + p*a_col] * b[p*b_row + j*b_col] in float, for i < m, j < n.
It is the BLIS scheme in plain C with GCC vector extensions:

* k is cut into slabs of `kc_block`; per slab, B is packed into contiguous panels of
  KOPE_NR columns (zero-padded at the right edge), so the micro-kernel streams it linearly.
* A is read in place when its rows are contiguous along k; otherwise (a transposed operand)
  the slab's rows are copied so that they are.
* The micro-kernel holds a KOPE_MR x KOPE_NR tile of C in vector registers, KOPE_NV vectors
  per row: with AVX-512, 6 x 64 in twenty-four 16-float vectors (four B vectors and a
  broadcast make 29 of its 32 registers); otherwise AVX2's 6 x 16 in twelve 8-float vectors
  (15 of 16). Every loaded value feeds several fused multiply-adds and C is touched once per
  slab. A wider tile than AVX2's made a 512² GEMM 1.4x faster on an AVX-512 Xeon (2.43 ->
  1.72 ms, 2 threads, with 12 x 32). On an AVX-512 EPYC, 6 x 64 needs ten loads per 24
  multiply-adds where 12 x 32 needs fourteen: a 384² GEMM on one thread took 1.01 ms instead
  of 1.065 (on two, 0.54 ms instead of 0.58; PyTorch's mm, 0.57).
* The micro-kernel is contracted to fused multiply-adds (`fp-contract=fast` on it alone): under
  -std=c11 gcc otherwise keeps each multiply and add apart unless the kernel's flags say
  -ffast-math. On the same Xeon: 1.71 -> 0.96 ms (PyTorch's mm: 0.83 ms).
* Threads (OpenMP) share the packing, then the grid of tiles. Inside an already parallel loop
  the nested region runs on one thread, as OpenMP's default says.
* A product of fewer than a quarter panel of columns (a matrix times a vector) is computed
  as dot products instead, rows across the threads: padded to a panel, one column cost as
  much as KOPE_NR (KernelBench's matrix-vector product: 18 ms naive, 166 ms packed).
* Under a causal mask half the product is not needed: `kope_masked_gemm(..., kc_block, lower)`
  leaves out the tiles right of the diagonal when only c[i][j <= i] is wanted (KOPE_C_LOWER,
  attention's scores), or stops each row block's sums at its last row when a[i][p > i] is 0
  (KOPE_A_LOWER, its probabilities times values). Row blocks are dealt to the threads in
  turn, since each has more to do than the one before.
* The packing buffers are scratch (`kope_scratch`), kept from one call to the next for one
  caller at a time (a concurrent one gets buffers from malloc). Freed and allocated again
  each call, a buffer of megabytes comes back from the kernel as fresh pages, and faulting
  them in cost as much as the GEMM (conv2d's 3.7 MB of patches: 4.0 ms a call instead of 1.7
  in the evaluator). Slots 0 and 1 are the GEMM's; a strategy that needs buffers of its own
  around the call takes others.

The sums are float: for a kernel that accumulated in double this changes rounding, which the
evaluator's tolerance decides on. Without memory for its buffers it computes the plain
loops instead (slow, still right): it never fails, so the call can sit in a loop that another
strategy makes parallel (OpenMP forbids a `return` out of one).
"""

from __future__ import annotations

HELPER_NAME = "kope_packed_gemm"
MASKED_HELPER_NAME = "kope_masked_gemm"
SCRATCH_NAME = "kope_scratch"
FIRST_FREE_SCRATCH_SLOT = 2  # slots 0 and 1 hold the GEMM's packed panels

HELPER_SOURCE = r"""#include <stdlib.h>
#include <string.h>

/* kope_packed_gemm: c[i*ldc + j] = sum_p a[i*a_row + p*a_col] * b[p*b_row + j*b_col] (float),
 * i < m, j < n: k in slabs of kc_block, B packed into KOPE_NR-column panels, a KOPE_MR x
 * KOPE_NR tile of C held in vector registers; the plain loops when there is no memory to
 * pack into. */
#ifdef __AVX512F__ /* 32 vector registers of 16 floats: a 6 x 64 tile, 24 accumulators */
typedef float kope_vf __attribute__((vector_size(64)));
#define KOPE_VL 16
#define KOPE_NV 4
#else /* AVX2's 16 registers of 8 floats: a 6 x 16 tile, 12 accumulators */
typedef float kope_vf __attribute__((vector_size(32)));
#define KOPE_VL 8
#define KOPE_NV 2
#endif
#define KOPE_MR 6
#define KOPE_NR (KOPE_NV * KOPE_VL)

/* Contracted to fused multiply-adds whatever the kernel's flags: ISO C (-std=c11) compiles
 * x * b + acc as a multiply and an add, half the arithmetic the FMA units could do. */
__attribute__((optimize("fp-contract=fast")))
static void kope_micro_tile(const float *a, int64_t a_row, const float *bp, int64_t kc,
                            float *c, int64_t ldc, int64_t mr, int64_t nr, int accumulate) {
    const float *rows[KOPE_MR];
    kope_vf acc[KOPE_MR][KOPE_NV];
#pragma GCC unroll 16
    for (int r = 0; r < KOPE_MR; ++r) {
        rows[r] = a + (r < mr ? r : 0) * a_row; /* rows past the edge: computed, not stored */
#pragma GCC unroll 8
        for (int v = 0; v < KOPE_NV; ++v) acc[r][v] = (kope_vf){0};
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; ++p) {
        kope_vf b[KOPE_NV];
#pragma GCC unroll 8
        for (int v = 0; v < KOPE_NV; ++v) {
            memcpy(&b[v], bp + p * KOPE_NR + v * KOPE_VL, sizeof b[v]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < KOPE_MR; ++r) {
            float x = rows[r][p];
#pragma GCC unroll 8
            for (int v = 0; v < KOPE_NV; ++v) acc[r][v] += x * b[v];
        }
    }
    for (int64_t r = 0; r < mr; ++r) {
        float tile[KOPE_NR];
        memcpy(tile, acc[r], sizeof acc[r]);
        float *row = c + r * ldc;
        if (accumulate) {
            for (int64_t j = 0; j < nr; ++j) row[j] += tile[j];
        } else {
            for (int64_t j = 0; j < nr; ++j) row[j] = tile[j];
        }
    }
}

/* Dot products, rows shared between the threads, each sum vectorized (an OpenMP simd
 * reduction may reorder it): for a product of few columns (a matrix times a vector), where a
 * panel of KOPE_NR columns would be mostly padding, KOPE_NR times the work for one column;
 * and when there is no memory to pack into. */
#define KOPE_NARROW (KOPE_NR / 4)
static void kope_plain_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row,
                            int64_t a_col, const float *b, int64_t b_row, int64_t b_col,
                            float *c, int64_t ldc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t p = 0; p < k; ++p) {
                sum += a[i * a_row + p * a_col] * b[p * b_row + j * b_col];
            }
            c[i * ldc + j] = sum;
        }
    }
}

static void kope_pack_rows(const float *a, int64_t a_row, int64_t a_col, int64_t m,
                           int64_t kc, float *dst) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < kc; ++p) dst[i * kc + p] = a[i * a_row + p * a_col];
    }
}

static void kope_pack_panel(const float *b, int64_t b_row, int64_t b_col, int64_t nr,
                            int64_t kc, float *dst) {
    for (int64_t p = 0; p < kc; ++p) {
        const float *row = b + p * b_row;
        float *out = dst + p * KOPE_NR;
        if (b_col == 1) {
            memcpy(out, row, sizeof(float) * (size_t)nr);
        } else {
            for (int64_t j = 0; j < nr; ++j) out[j] = row[j * b_col];
        }
        for (int64_t j = nr; j < KOPE_NR; ++j) out[j] = 0.0f;
    }
}

/* kope_scratch: a buffer of at least `count` floats for `slot`, kept from one call to the next
 * (grown, never shrunk or freed): a buffer of megabytes from malloc is fresh pages each call,
 * and faulting them in costs as much as a small GEMM. While one caller holds the slot, another
 * (a thread of a parallel loop around the call) gets a buffer of its own from malloc; *held
 * says which it was, for kope_scratch_done. NULL when there is no memory. */
#define KOPE_SCRATCH_SLOTS 8
static float *kope_scratch_buffers[KOPE_SCRATCH_SLOTS];
static size_t kope_scratch_sizes[KOPE_SCRATCH_SLOTS];
static int kope_scratch_taken[KOPE_SCRATCH_SLOTS];

static float *kope_scratch(int slot, size_t count, int *held) {
    *held = !__atomic_exchange_n(&kope_scratch_taken[slot], 1, __ATOMIC_ACQUIRE);
    if (!*held) return malloc(sizeof(float) * count);
    if (kope_scratch_sizes[slot] < count) {
        free(kope_scratch_buffers[slot]);
        kope_scratch_buffers[slot] = malloc(sizeof(float) * count);
        kope_scratch_sizes[slot] = kope_scratch_buffers[slot] != NULL ? count : 0;
    }
    return kope_scratch_buffers[slot];
}

static void kope_scratch_done(int slot, float *buffer, int held) {
    if (held) {
        __atomic_store_n(&kope_scratch_taken[slot], 0, __ATOMIC_RELEASE);
    } else {
        free(buffer);
    }
}

/* What a causal product leaves out, by row i of c (and of a):
 * KOPE_C_LOWER: only c[i][j] with j <= i is wanted (attention's masked scores): tiles wholly
 *   right of the diagonal are not computed, and those elements of c are left as they were.
 * KOPE_A_LOWER: a[i][p] is 0 for p > i (masked probabilities): each row block's sums stop at
 *   its last row, exactly, since what is left out adds zeros. */
#define KOPE_FULL 0
#define KOPE_C_LOWER 1
#define KOPE_A_LOWER 2

/* The panels a row block ending at `last_row` needs, and how much of the slab at pc. */
static int64_t kope_lower_panels(int lower, int64_t last_row, int64_t panels) {
    if (lower != KOPE_C_LOWER) return panels;
    return last_row / KOPE_NR + 1 < panels ? last_row / KOPE_NR + 1 : panels;
}

static int64_t kope_lower_depth(int lower, int64_t last_row, int64_t pc, int64_t kc) {
    if (lower != KOPE_A_LOWER) return kc;
    return last_row + 1 - pc < kc ? last_row + 1 - pc : kc;
}

/* kope_masked_gemm: kope_packed_gemm, less what `lower` says a causal mask leaves out. */
static void kope_masked_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row,
                             int64_t a_col, const float *b, int64_t b_row, int64_t b_col,
                             float *c, int64_t ldc, int64_t kc_block, int lower) {
    if (lower == KOPE_FULL && n < KOPE_NARROW) {
        kope_plain_gemm(m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc);
        return;
    }
    int64_t row_blocks = (m + KOPE_MR - 1) / KOPE_MR, panels = (n + KOPE_NR - 1) / KOPE_NR;
    if (k < kc_block) kc_block = k > 0 ? k : 1; /* one slab: no bigger than it needs */
    float *packed_a = NULL;
    int held_a = 0, held_b = 0;
    float *packed_b = kope_scratch(0, (size_t)(panels * KOPE_NR * kc_block + 1), &held_b);
    if (a_col != 1) packed_a = kope_scratch(1, (size_t)(m * kc_block + 1), &held_a);
    if (packed_b == NULL || (a_col != 1 && packed_a == NULL)) { /* no room to pack */
        if (a_col != 1) kope_scratch_done(1, packed_a, held_a);
        kope_scratch_done(0, packed_b, held_b);
        kope_plain_gemm(m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc);
        return;
    }
    int64_t pc = 0;
    do { /* at least once: with k = 0 the tiles store zeros */
        int64_t kc = k - pc < kc_block ? k - pc : kc_block;
#pragma omp parallel
        {
            if (packed_a != NULL) {
#pragma omp for schedule(static) nowait
                for (int64_t ib = 0; ib < row_blocks; ++ib) {
                    int64_t mr = m - ib * KOPE_MR < KOPE_MR ? m - ib * KOPE_MR : KOPE_MR;
                    kope_pack_rows(a + ib * KOPE_MR * a_row + pc * a_col, a_row, a_col, mr, kc,
                                   packed_a + ib * KOPE_MR * kc);
                }
            }
#pragma omp for schedule(static)
            for (int64_t jb = 0; jb < panels; ++jb) {
                int64_t nr = n - jb * KOPE_NR < KOPE_NR ? n - jb * KOPE_NR : KOPE_NR;
                kope_pack_panel(b + pc * b_row + jb * KOPE_NR * b_col, b_row, b_col, nr, kc,
                                packed_b + jb * KOPE_NR * kc_block);
            }
            if (lower == KOPE_FULL) {
#pragma omp for schedule(static) collapse(2)
                for (int64_t ib = 0; ib < row_blocks; ++ib) {
                    for (int64_t jb = 0; jb < panels; ++jb) {
                        int64_t mr = m - ib * KOPE_MR < KOPE_MR ? m - ib * KOPE_MR : KOPE_MR;
                        int64_t nr = n - jb * KOPE_NR < KOPE_NR ? n - jb * KOPE_NR : KOPE_NR;
                        const float *rows = packed_a != NULL ? packed_a + ib * KOPE_MR * kc
                                                             : a + ib * KOPE_MR * a_row + pc;
                        kope_micro_tile(rows, packed_a != NULL ? kc : a_row,
                                        packed_b + jb * KOPE_NR * kc_block, kc,
                                        c + ib * KOPE_MR * ldc + jb * KOPE_NR, ldc, mr, nr,
                                        pc > 0);
                    }
                }
            } else {
                /* a row block's work grows with its index: dealt out one at a time, in turn,
                 * the threads get even shares */
#pragma omp for schedule(static, 1)
                for (int64_t ib = 0; ib < row_blocks; ++ib) {
                    int64_t mr = m - ib * KOPE_MR < KOPE_MR ? m - ib * KOPE_MR : KOPE_MR;
                    int64_t last_row = ib * KOPE_MR + mr - 1;
                    int64_t depth = kope_lower_depth(lower, last_row, pc, kc);
                    if (depth <= 0) continue; /* past its last row: the slab adds zeros */
                    const float *rows = packed_a != NULL ? packed_a + ib * KOPE_MR * kc
                                                         : a + ib * KOPE_MR * a_row + pc;
                    for (int64_t jb = 0; jb < kope_lower_panels(lower, last_row, panels); ++jb) {
                        int64_t nr = n - jb * KOPE_NR < KOPE_NR ? n - jb * KOPE_NR : KOPE_NR;
                        kope_micro_tile(rows, packed_a != NULL ? kc : a_row,
                                        packed_b + jb * KOPE_NR * kc_block, depth,
                                        c + ib * KOPE_MR * ldc + jb * KOPE_NR, ldc, mr, nr,
                                        pc > 0);
                    }
                }
            }
        }
        pc += kc;
    } while (pc < k);
    if (a_col != 1) kope_scratch_done(1, packed_a, held_a);
    kope_scratch_done(0, packed_b, held_b);
}

static inline void kope_packed_gemm(int64_t m, int64_t n, int64_t k, const float *a,
                                    int64_t a_row, int64_t a_col, const float *b, int64_t b_row,
                                    int64_t b_col, float *c, int64_t ldc, int64_t kc_block) {
    kope_masked_gemm(m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc, kc_block, KOPE_FULL);
}
"""
