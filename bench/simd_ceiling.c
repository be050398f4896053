// The f32 multiply-add ceiling of this core for each vector width the engine can use:
// 128-bit multiply then add (what WebAssembly SIMD128's f32x4.mul and f32x4.add become), 128-bit
// FMA (what relaxed SIMD's f32x4.relaxed_madd can become), 256-bit FMA (the AVX2 path) and
// 512-bit FMA (the AVX-512 path). Twelve independent accumulator chains hide the latencies;
// the four loops are alternated over the rounds and each one's median is printed.
// Build and run: bench/simd_ceiling.sh
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12
#define ITERS 20000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static volatile float sink;

static double sse_mul_add(void) {
    __m128 v = _mm_set1_ps(1e-7f), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm_setzero_ps(); y[i] = _mm_set1_ps(1e-7f + i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm_add_ps(a[i], _mm_mul_ps(v, y[i]));
        __asm__ volatile("" : "+x"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm_add_ps(a[0], a[i]);
    sink = _mm_cvtss_f32(a[0]);
    return ITERS * CHAINS * 4 * 2 / s / 1e9;
}

__attribute__((target("fma"))) static double fma128(void) {
    __m128 v = _mm_set1_ps(1e-7f), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm_setzero_ps(); y[i] = _mm_set1_ps(1e-7f + i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm_fmadd_ps(v, y[i], a[i]);
        __asm__ volatile("" : "+x"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm_add_ps(a[0], a[i]);
    sink = _mm_cvtss_f32(a[0]);
    return ITERS * CHAINS * 4 * 2 / s / 1e9;
}

__attribute__((target("avx2,fma"))) static double fma256(void) {
    __m256 v = _mm256_set1_ps(1e-7f), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm256_setzero_ps(); y[i] = _mm256_set1_ps(1e-7f + i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm256_fmadd_ps(v, y[i], a[i]);
        __asm__ volatile("" : "+x"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm256_add_ps(a[0], a[i]);
    sink = _mm256_cvtss_f32(a[0]);
    return ITERS * CHAINS * 8 * 2 / s / 1e9;
}

__attribute__((target("avx512f"))) static double fma512(void) {
    __m512 v = _mm512_set1_ps(1e-7f), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm512_setzero_ps(); y[i] = _mm512_set1_ps(1e-7f + i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(v, y[i], a[i]);
        __asm__ volatile("" : "+v"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm512_add_ps(a[0], a[i]);
    sink = _mm512_reduce_add_ps(a[0]);
    return ITERS * CHAINS * 16 * 2 / s / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) rounds = 7;
    const char *names[4] = {"128-bit mul + add (SIMD128)", "128-bit FMA (relaxed SIMD)",
                            "256-bit FMA (AVX2)", "512-bit FMA (AVX-512)"};
    double (*runs[4])(void) = {sse_mul_add, fma128, fma256, fma512};
    double *r = malloc(sizeof(double) * 4 * rounds);
    if (!r) return 1;
    int have512 = __builtin_cpu_supports("avx512f"), have_fma = __builtin_cpu_supports("fma");
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < 4; j++)
            r[j * rounds + k] = (j == 0 || (j < 3 && have_fma) || (j == 3 && have512)) ? runs[j]() : 0;
    double base = 0;
    for (int j = 0; j < 4; j++) {
        qsort(r + j * rounds, rounds, sizeof(double), cmp);
        double m = r[j * rounds + rounds / 2];
        if (j == 0) base = m;
        printf("%-30s %7.1f GFLOP/s  %4.2fx SIMD128\n", names[j], m, m / base);
    }
    free(r);
    return 0;
}
