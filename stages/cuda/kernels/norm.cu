// Kernels 3 and 7: per-head RMSNorm (QK norm, spec section 5) and the gated RMSNorm of the
// GDN output (spec section 9); CPU reference: stages/kernels/src/norm.rs. One thread block
// per head, a power-of-two number of threads; the sum of squares in f64 through shared memory.

#define NORM_THREADS 256

// Sum of `v` over the block (blockDim.x a power of two, at most NORM_THREADS).
__device__ double norm_block_sum(double v, double* sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double total = sh[0];
    __syncthreads();
    return total;
}

__device__ double norm_inv_rms(const float* head, int dim, double eps, double* sh) {
    double acc = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double v = (double)head[d];
        acc += v * v;
    }
    double ms = norm_block_sum(acc, sh) / (double)dim;
    return 1.0 / sqrt(ms + eps);
}

// y[h][d] = x[h][d] * inv_rms(x[h]) * w[d]; grid = heads.
extern "C" __global__ void rms_norm_heads(const float* x, const float* w, float* y, int dim,
                                          double eps) {
    __shared__ double sh[NORM_THREADS];
    const float* head = x + (size_t)blockIdx.x * dim;
    double scale = norm_inv_rms(head, dim, eps, sh);
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        y[(size_t)blockIdx.x * dim + d] = (float)((double)head[d] * scale * (double)w[d]);
    }
}

// out[h][d] = y[h][d] * inv_rms(y[h]) * w[d] * SiLU(z[h][d]); grid = heads.
extern "C" __global__ void gated_rms_norm(const float* y, const float* w, const float* z,
                                          float* out, int dim, double eps) {
    __shared__ double sh[NORM_THREADS];
    size_t base = (size_t)blockIdx.x * dim;
    double scale = norm_inv_rms(y + base, dim, eps, sh);
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        double zd = (double)z[base + d];
        double silu = zd / (1.0 + exp(-zd));
        out[base + d] = (float)((double)y[base + d] * scale * (double)w[d] * silu);
    }
}
