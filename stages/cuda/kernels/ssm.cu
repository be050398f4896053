// Kernels 5 and 6: the gated delta-rule recurrence (spec section 7) and the causal depthwise
// conv1d + SiLU with its state roll (spec section 8); CPU reference: stages/kernels/src/ssm.rs.
//
// Recurrence: the state is stored transposed, s[h][j][i] = S_h[i][j], so row j is contiguous
// over the key index i. One thread block per (h, j) row, one thread per i (blockDim.x a power
// of two >= S, at most SSM_THREADS): decay, predict (row . k), delta = (v - pred) * beta,
// rank-1 write, and the read-out *after* the write (row . q) / sqrt(S). f64 throughout.

#define SSM_THREADS 256
#define CONV_KERNEL 4

__device__ double ssm_block_sum(double v, double* sh) {
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

extern "C" __global__ void ssm_delta_rule(const float* state_in, const float* q, const float* k,
                                          const float* v, const float* g, const float* beta,
                                          float* y, float* state_out, int S) {
    __shared__ double sh[SSM_THREADS];
    int h = blockIdx.x / S;
    int j = blockIdx.x % S;
    int i = threadIdx.x;
    bool live = i < S;
    size_t at = ((size_t)h * S + j) * S + i;
    double decay = exp((double)g[h]);
    double ki = live ? (double)k[h * S + i] : 0.0;
    double qi = live ? (double)q[h * S + i] : 0.0;
    double r = live ? (double)state_in[at] * decay : 0.0;
    double pred = ssm_block_sum(r * ki, sh);
    double delta = ((double)v[h * S + j] - pred) * (double)beta[h];
    r += ki * delta;
    if (live) state_out[at] = (float)r;
    double read = ssm_block_sum(r * qi, sh);
    if (i == 0) y[h * S + j] = (float)(read / sqrt((double)S));
}

// One thread per channel: a = sum_{t<3} state[c][t] * w[c][t] + x[c] * w[c][3];
// out[c] = SiLU(a); the state rolls towards the past: (state[c][1], state[c][2], x[c]).
extern "C" __global__ void ssm_conv1d_silu(const float* x, const float* w, const float* state,
                                           float* out, float* state_out, int channels) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int hist = CONV_KERNEL - 1;
    const float* st = state + (size_t)c * hist;
    const float* wc = w + (size_t)c * CONV_KERNEL;
    double past = 0.0;
    for (int t = 0; t < hist; ++t) past += (double)st[t] * (double)wc[t];
    double a = past + (double)x[c] * (double)wc[hist];
    out[c] = (float)(a / (1.0 + exp(-a)));
    for (int t = 0; t + 1 < hist; ++t) state_out[(size_t)c * hist + t] = st[t + 1];
    state_out[(size_t)c * hist + hist - 1] = x[c];
}
