// Kernel 1: Q3_K dequantisation and Q3_K x f32 mat-vec (spec section 3; CPU reference:
// stages/kernels/src/q3k.rs). Written for Kepler (compute_37): no half intrinsics (the binary16
// scale is decoded with integer operations), reductions through shared memory.
//
// Block layout (110 bytes, 256 elements): hmask[32] | qs[64] | scales[12] | d (binary16, LE).

#define QK_K 256
#define Q3K_BLOCK_BYTES 110

// IEEE binary16 bits -> f32, exact (as q3k::f16_to_f32).
__device__ float q3k_half_to_float(unsigned int h) {
    unsigned int sign = (h & 0x8000u) << 16;
    unsigned int exp = (h >> 10) & 0x1Fu;
    unsigned int man = h & 0x3FFu;
    if (exp == 0) {
        // Subnormal (or zero): man * 2^-24, exact in f32.
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) {
        return __int_as_float((int)(sign | 0x7F800000u | (man << 13)));
    }
    return __int_as_float((int)(sign | ((exp + 112u) << 23) | (man << 13)));
}

// Dequantised element e (0..256) of the block at `b`: (d * scale) * q, both products in f32
// as the reference (they are exact).
__device__ float q3k_element(const unsigned char* b, int e) {
    const unsigned char* hmask = b;
    const unsigned char* qs = b + 32;
    const unsigned char* scales = b + 96;
    unsigned int dbits = (unsigned int)b[108] | ((unsigned int)b[109] << 8);
    int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16, l = e % 16;
    int is = 8 * n + 2 * j + h;
    int lo4 = is < 8 ? (scales[is] & 0xF) : (scales[is - 8] >> 4);
    int hi2 = (scales[8 + is % 4] >> (2 * (is / 4))) & 3;
    int scale = (lo4 | (hi2 << 4)) - 32;
    int q2 = (qs[32 * n + 16 * h + l] >> (2 * j)) & 3;
    int high = (hmask[16 * h + l] >> (4 * n + j)) & 1;
    int q = q2 - (high ? 0 : 4);
    float dl = q3k_half_to_float(dbits) * (float)scale;
    return dl * (float)q;
}

// y[blk * 256 + e]: one thread per element.
extern "C" __global__ void q3k_dequant(const unsigned char* blocks, float* y, int nblocks) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblocks * QK_K) return;
    y[i] = q3k_element(blocks + (size_t)(i / QK_K) * Q3K_BLOCK_BYTES, i % QK_K);
}

// out[r] = sum_c W[r][c] * x[c]: one thread block of 256 threads per row; thread t takes
// element t of every super-block of the row. Products and the sum in f64, rounded once.
extern "C" __global__ void q3k_matvec(const unsigned char* w, const float* x, float* out,
                                      int rows, int cols) {
    __shared__ double part[QK_K];
    int row = blockIdx.x;
    int t = threadIdx.x;
    if (row >= rows) return;
    int nb = cols / QK_K;
    const unsigned char* rb = w + (size_t)row * nb * Q3K_BLOCK_BYTES;
    double acc = 0.0;
    for (int blk = 0; blk < nb; ++blk) {
        float v = q3k_element(rb + (size_t)blk * Q3K_BLOCK_BYTES, t);
        acc += (double)v * (double)x[blk * QK_K + t];
    }
    part[t] = acc;
    __syncthreads();
    for (int s = QK_K / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) out[row] = (float)part[0];
}
