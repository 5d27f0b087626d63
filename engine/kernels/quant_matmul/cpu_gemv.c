/* x @ W.T for a few tokens with W in GGUF blocks, on a CPU: each block is dequantized into a 256-float buffer that
 * stays in L1 and multiplied by every token's slice of x at once, so the weights are read once, as stored
 * (0.53-1.06 bytes per weight), and never written back as floats. Rows are split over threads.
 *
 * The per-type decoding is llama.cpp's (ggml-quants.c `dequantize_row_*`, the same arithmetic as gguf/quants.py and
 * engine/kernels/dequantize/reference.py): super-block scale times sub-block scale, times the quant, minus dmin times
 * the sub-block min. Built and loaded by engine/kernels/quant_matmul/cpu.py. */

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define MAX_TOKENS 16
#define MAX_THREADS 64

enum { Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_XS = 23, MXFP4 = 39 };

static const int8_t IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float fp16(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    float f;
    if (exp == 0) {
        f = (float)mant * (1.0f / 16777216.0f); /* subnormal (or zero): mant * 2^-24 */
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One block -> y[block_size]. */
static void dequant_block(int kind, const uint8_t *b, float *y) {
    switch (kind) {
    case Q8_0: {
        const float d = fp16(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int i = 0; i < 32; i++) y[i] = d * q[i];
        break;
    }
    case Q4_K: {
        const float d = fp16(b), dmin = fp16(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
            uint8_t sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[j + l] = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
        }
        break;
    }
    case Q5_K: {
        const float d = fp16(b), dmin = fp16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[j + l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) y[j + 32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
        break;
    }
    case Q6_K: {
        const float d = fp16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
            for (int h = 0; h < 2; h++) { /* 16 weights share each sub-block scale: constant scales per loop */
                const float s1 = d * sc[h], s2 = d * sc[h + 2], s3 = d * sc[h + 4], s4 = d * sc[h + 6];
                for (int l = 16 * h; l < 16 * h + 16; l++) {
                    const int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[n + l] = s1 * q1;
                    y[n + l + 32] = s2 * q2;
                    y[n + l + 64] = s3 * q3;
                    y[n + l + 96] = s4 * q4;
                }
            }
        }
        break;
    }
    case IQ4_XS: {
        const float d = fp16(b);
        const uint16_t scales_h = (uint16_t)(b[2] | (b[3] << 8));
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        for (int ib = 0; ib < 8; ib++, qs += 16) {
            const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            float table[16];
            for (int k = 0; k < 16; k++) table[k] = dl * IQ4_VALUES[k];
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = table[qs[j] & 0xf];
                y[32 * ib + j + 16] = table[qs[j] >> 4];
            }
        }
        break;
    }
    case MXFP4: {
        uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : (uint32_t)(b[0] - 1) << 23; /* 2^(e - 128) */
        float d;
        memcpy(&d, &bits, 4);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < 16; j++) {
            y[j] = MXFP4_VALUES[qs[j] & 0xf] * d;
            y[j + 16] = MXFP4_VALUES[qs[j] >> 4] * d;
        }
        break;
    }
    }
}

static int block_geometry(int kind, int *block_size, int *type_size) {
    switch (kind) {
    case Q8_0: *block_size = 32; *type_size = 34; return 0;
    case Q4_K: *block_size = 256; *type_size = 144; return 0;
    case Q5_K: *block_size = 256; *type_size = 176; return 0;
    case Q6_K: *block_size = 256; *type_size = 210; return 0;
    case IQ4_XS: *block_size = 256; *type_size = 136; return 0;
    case MXFP4: *block_size = 32; *type_size = 17; return 0;
    default: return -1;
    }
}

typedef struct {
    int kind, block_size, type_size, tokens;
    const uint8_t *w;
    const float *x;
    float *y;
    int64_t row_begin, row_end, rows, cols, row_bytes;
} Job;

typedef float v8 __attribute__((vector_size(32))); /* 8 floats: AVX registers on x86, two NEON ones on ARM */

static inline v8 load8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static void *run_rows(void *arg) {
    const Job *job = (const Job *)arg;
    const int bs = job->block_size, T = job->tokens;
    const int64_t nblocks = job->cols / bs;
    const int per_pass = 256 / bs;
    float buf[256] __attribute__((aligned(64)));
    for (int64_t r = job->row_begin; r < job->row_end; r++) {
        const uint8_t *row = job->w + r * job->row_bytes;
        v8 acc[MAX_TOKENS];
        for (int t = 0; t < T; t++) acc[t] = (v8){0};
        /* 32-weight kinds (Q8_0, MXFP4) decode 8 blocks per pass, so every pass multiplies 256 weights */
        for (int64_t blk = 0; blk < nblocks; blk += per_pass) {
            const int nb = nblocks - blk < per_pass ? (int)(nblocks - blk) : per_pass, width = nb * bs;
            for (int k = 0; k < nb; k++) dequant_block(job->kind, row + (blk + k) * job->type_size, buf + k * bs);
            const float *xb = job->x + blk * bs;
            for (int t = 0; t < T; t++) {
                const float *xt = xb + t * job->cols;
                v8 s0 = {0}, s1 = {0};
                for (int i = 0; i < width; i += 16) {
                    s0 += load8(buf + i) * load8(xt + i);
                    s1 += load8(buf + i + 8) * load8(xt + i + 8);
                }
                acc[t] += s0 + s1;
            }
        }
        for (int t = 0; t < T; t++) {
            const v8 a = acc[t];
            job->y[t * job->rows + r] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        }
    }
    return NULL;
}

/* y[T, rows] = x[T, cols] @ W.T; W = rows x (cols / block_size) blocks of `kind`, rows `row_bytes` apart.
 * Returns 0, or -1 for an unknown kind / too many tokens. */
int aw_quant_gemv(int kind, const uint8_t *w, int64_t rows, int64_t cols, int64_t row_bytes, const float *x,
                  int tokens, float *y, int threads) {
    Job jobs[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int block_size, type_size;
    if (block_geometry(kind, &block_size, &type_size) || tokens < 1 || tokens > MAX_TOKENS || cols % block_size)
        return -1;
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (rows * cols < (int64_t)1 << 16) threads = 1; /* thread start costs more than the work */
    if (threads > rows) threads = (int)rows;
    const int64_t per = (rows + threads - 1) / threads;
    for (int i = 0; i < threads; i++) {
        Job job = {kind, block_size, type_size, tokens, w, x, y, i * per, (i + 1) * per < rows ? (i + 1) * per : rows,
                   rows, cols, row_bytes};
        jobs[i] = job;
    }
    for (int i = 1; i < threads; i++) pthread_create(&ids[i], NULL, run_rows, &jobs[i]);
    run_rows(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}

/* Dequantize `nblocks` consecutive blocks (for the bit-exactness test against the torch reference). */
int aw_dequantize(int kind, const uint8_t *w, int64_t nblocks, float *y) {
    int block_size, type_size;
    if (block_geometry(kind, &block_size, &type_size)) return -1;
    for (int64_t i = 0; i < nblocks; i++) dequant_block(kind, w + i * type_size, y + i * block_size);
    return 0;
}
