// Kernel 2: partial NEOX RoPE (spec section 4; CPU reference: stages/kernels/src/rope.rs).
// Only the first 64 of each 256-dim head rotate, pairing i with i + 32 (HF rotate_half, not
// interleaved); dims 64..256 pass through. theta, sin and cos in f64, one rounding per output.

#define ROPE_HEAD_DIM 256
#define ROPE_DIM 64

// One thread per element of x (heads x 256).
extern "C" __global__ void rope_neox_partial(const float* x, float* y, int heads,
                                             unsigned int pos) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= heads * ROPE_HEAD_DIM) return;
    int d = idx % ROPE_HEAD_DIM;
    const float* head = x + (idx - d);
    if (d >= ROPE_DIM) {
        y[idx] = x[idx];
        return;
    }
    const int half = ROPE_DIM / 2;
    int i = d % half;
    // freq_i = 1e7^(-2i/64), ln 1e7 = 7 ln 10 as in the reference.
    double ln_base = 7.0 * 2.302585092994045684;
    double freq = exp(-(2.0 * (double)i / (double)ROPE_DIM) * ln_base);
    double s, c;
    sincos((double)pos * freq, &s, &c);
    double x0 = (double)head[i];
    double x1 = (double)head[i + half];
    y[idx] = d < half ? (float)(x0 * c - x1 * s) : (float)(x0 * s + x1 * c);
}
