// The f32 multiply-add ceiling of this core for each vector width the engine can use:
// 128-bit multiply then add (what WebAssembly SIMD128's f32x4.mul and f32x4.add become), 128-bit
// FMA (what relaxed SIMD's f32x4.relaxed_madd can become), 256-bit FMA (the AVX2 path),
// 512-bit FMA (the AVX-512 path), and the AVX-512 VNNI integer dot products of the int8 paths.
// Twelve independent accumulator chains hide the latencies; the loops are alternated over the
// rounds and each one's median is printed.
//
// The 128-bit multiply + add loop is compiled for AVX: on a CPU with AVX, V8 emits the
// three-operand VEX forms (`vmulps xmm0,xmm2,xmm3` / `vaddps`, seen with
// `node --print-wasm-code`). The two-operand SSE forms need a register copy per multiply and
// ran 15% slower here, which an earlier version of this file reported as the ceiling.
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

__attribute__((target("avx"))) static double sse_mul_add(void) {
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

// Integer dot products of the int8 paths, in multiply-adds per second (not FLOP/s): vpdpbusd
// does 4 u8 x i8 products per 32-bit lane, vpdpwssd 2 i16 x i16.
__attribute__((target("avx512f,avx512vnni"))) static double dpbusd512(void) {
    __m512i v = _mm512_set1_epi8(1), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm512_setzero_si512(); y[i] = _mm512_set1_epi8((char)i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpbusd_epi32(a[i], v, y[i]);
        __asm__ volatile("" : "+v"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm512_add_epi32(a[0], a[i]);
    sink = (float)_mm512_reduce_add_epi32(a[0]);
    return ITERS * CHAINS * 64 / s / 1e9;
}

__attribute__((target("avx512f,avx512vnni"))) static double dpwssd512(void) {
    __m512i v = _mm512_set1_epi16(1), a[CHAINS], y[CHAINS];
    for (int i = 0; i < CHAINS; i++) { a[i] = _mm512_setzero_si512(); y[i] = _mm512_set1_epi16((short)i); }
    double t = now();
    for (long n = 0; n < ITERS; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpwssd_epi32(a[i], v, y[i]);
        __asm__ volatile("" : "+v"(v));
    }
    double s = now() - t;
    for (int i = 1; i < CHAINS; i++) a[0] = _mm512_add_epi32(a[0], a[i]);
    sink = (float)_mm512_reduce_add_epi32(a[0]);
    return ITERS * CHAINS * 32 / s / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) rounds = 7;
    enum { N = 6 };
    const char *names[N] = {"128-bit mul + add (SIMD128)", "128-bit FMA (relaxed SIMD)",
                            "256-bit FMA (AVX2)", "512-bit FMA (AVX-512)",
                            "512-bit vpdpbusd (u8 x i8)", "512-bit vpdpwssd (i16 x i16)"};
    double (*runs[N])(void) = {sse_mul_add, fma128, fma256, fma512, dpbusd512, dpwssd512};
    int have[N] = {1, __builtin_cpu_supports("fma"), __builtin_cpu_supports("fma"),
                   __builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx512vnni"),
                   __builtin_cpu_supports("avx512vnni")};
    double *r = malloc(sizeof(double) * N * rounds);
    if (!r) return 1;
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < N; j++) r[j * rounds + k] = have[j] ? runs[j]() : 0;
    double med[N];
    for (int j = 0; j < N; j++) {
        qsort(r + j * rounds, rounds, sizeof(double), cmp);
        med[j] = r[j * rounds + rounds / 2];
    }
    printf("%-30s %9s %9s %12s\n", "instructions", "G MAC/s", "GFLOP/s", "vs SIMD128");
    for (int j = 0; j < N; j++) {
        if (!have[j]) {
            printf("%-30s  (not on this CPU)\n", names[j]);
            continue;
        }
        // The float loops count 2 FLOP per multiply-add; the integer ones count products.
        double macs = j < 4 ? med[j] / 2 : med[j];
        char flops[16] = "-";
        if (j < 4) snprintf(flops, sizeof flops, "%.1f", med[j]);
        printf("%-30s %9.1f %9s %11.2fx\n", names[j], macs, flops, macs / (med[0] / 2));
    }
    free(r);
    return 0;
}
