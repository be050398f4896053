// Kernel 4: MoE routing and the shared-expert gate (spec section 6; CPU reference:
// stages/kernels/src/moe.rs). One thread block of MOE_THREADS threads (a power of two); the
// probabilities live in shared memory (at most MOE_MAX_EXPERTS).
//
// Top-k: k passes, each a block-wide arg-max over the experts not yet taken; on equal
// probabilities the lower index wins, which is what the reference's "first index with the
// strictly greatest probability" selects.

#define MOE_THREADS 256
#define MOE_MAX_EXPERTS 1024
#define MOE_MIN_WEIGHT_SUM 6.1035e-5

__device__ double moe_block_sum(double v, double* sh) {
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

// logits[n] -> idx[k] (selection order), weights[k] (renormalised, times `scale`).
extern "C" __global__ void moe_route(const float* logits, int n, int k, double scale,
                                     int* idx, float* weights) {
    __shared__ double p[MOE_MAX_EXPERTS];
    __shared__ unsigned char taken[MOE_MAX_EXPERTS];
    __shared__ double sh[MOE_THREADS];
    __shared__ int shi[MOE_THREADS];
    __shared__ int selected[MOE_MAX_EXPERTS];
    int t = threadIdx.x;
    if (n > MOE_MAX_EXPERTS || k > n) return;

    // Softmax in f64, the maximum subtracted.
    double m = -__longlong_as_double(0x7ff0000000000000LL);
    for (int i = t; i < n; i += blockDim.x) m = fmax(m, (double)logits[i]);
    sh[t] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = fmax(sh[t], sh[t + s]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    double local = 0.0;
    for (int i = t; i < n; i += blockDim.x) {
        p[i] = exp((double)logits[i] - m);
        taken[i] = 0;
        local += p[i];
    }
    double sum = moe_block_sum(local, sh);
    for (int i = t; i < n; i += blockDim.x) p[i] = p[i] / sum;
    __syncthreads();

    for (int r = 0; r < k; ++r) {
        // Each thread's best candidate: greater p, or equal p and lower index.
        double best = -1.0;
        int besti = -1;
        for (int i = t; i < n; i += blockDim.x) {
            if (!taken[i] && (besti < 0 || p[i] > best)) {
                best = p[i];
                besti = i;
            }
        }
        sh[t] = best;
        shi[t] = besti;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (t < s) {
                double ob = sh[t + s];
                int oi = shi[t + s];
                bool better = oi >= 0 &&
                              (shi[t] < 0 || ob > sh[t] || (ob == sh[t] && oi < shi[t]));
                if (better) {
                    sh[t] = ob;
                    shi[t] = oi;
                }
            }
            __syncthreads();
        }
        if (t == 0) {
            selected[r] = shi[0];
            taken[shi[0]] = 1;
        }
        __syncthreads();
    }

    if (t == 0) {
        // Summed in selection order, as the reference.
        double total = 0.0;
        for (int r = 0; r < k; ++r) total += p[selected[r]];
        total = fmax(total, MOE_MIN_WEIGHT_SUM);
        for (int r = 0; r < k; ++r) {
            idx[r] = selected[r];
            weights[r] = (float)(p[selected[r]] / total * scale);
        }
    }
}

// out[0] = sigmoid(sum_i w[i] * x[i]), the dot in f64.
extern "C" __global__ void moe_shared_gate(const float* w, const float* x, int n, float* out) {
    __shared__ double sh[MOE_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += (double)w[i] * (double)x[i];
    double dot = moe_block_sum(acc, sh);
    if (threadIdx.x == 0) out[0] = (float)(1.0 / (1.0 + exp(-dot)));
}
