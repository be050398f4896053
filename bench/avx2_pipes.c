// Which instructions of the AVX2 int8 tile (`stages/quant/src/kernels/avx2.rs`) share an
// execution pipe with its `vpmaddwd`: register-only loops of 8 independent `vpmaddwd` per
// turn, alone and with 4 or 8 other instructions beside them (no chains, no loads, written in
// assembly so that no compiler spills them). If a loop with extra instructions takes no
// longer than `vpmaddwd` alone, they run on other pipes; if it takes (8 + n) / 8 as long,
// they compete for the same ones. The last loops set 256 products by the tile's `vpmaddwd`
// against the sign trick the tile does not use. Each loop's median over the rounds, ns per turn.
// Build and run: bench/avx2_pipes.sh [ROUNDS]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TURNS 50000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define MADD(d) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #d "\n\t"
#define M8 MADD(0) MADD(1) MADD(2) MADD(3) MADD(4) MADD(5) MADD(6) MADD(7)
#define OP4(op) op " %%ymm12, %%ymm13, %%ymm8\n\t" op " %%ymm12, %%ymm13, %%ymm9\n\t" \
                op " %%ymm12, %%ymm13, %%ymm10\n\t" op " %%ymm12, %%ymm13, %%ymm11\n\t"
#define CVT4 "vcvtdq2ps %%ymm12, %%ymm8\n\tvcvtdq2ps %%ymm12, %%ymm9\n\t" \
             "vcvtdq2ps %%ymm12, %%ymm10\n\tvcvtdq2ps %%ymm12, %%ymm11\n\t"
#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                "xmm10", "xmm11"
#define LOOP(NAME, BODY)                                                             \
    __attribute__((target("avx2,fma"))) static double NAME(void) {                  \
        __asm__ volatile("vpxor %%xmm12, %%xmm12, %%xmm12\n\t"                       \
                         "vpxor %%xmm13, %%xmm13, %%xmm13\n\t"                       \
                         "vpxor %%xmm14, %%xmm14, %%xmm14\n\t"                       \
                         "vpxor %%xmm15, %%xmm15, %%xmm15" ::: "xmm12", "xmm13", "xmm14", "xmm15"); \
        double t = now();                                                            \
        for (long i = 0; i < TURNS; i++) __asm__ volatile(BODY ::: CLOBBER);         \
        return (now() - t) / TURNS * 1e9;                                            \
    }

LOOP(madd, M8)
LOOP(madd_paddd4, M8 OP4("vpaddd"))
LOOP(madd_paddd8, M8 OP4("vpaddd") OP4("vpaddd"))
LOOP(madd_cvt4, M8 CVT4)
LOOP(madd_addps4, M8 OP4("vaddps"))
LOOP(madd_mulps4, M8 OP4("vmulps"))
LOOP(madd_fma4, M8 OP4("vfmadd231ps"))
// The signed x signed int8 product without VNNI by the sign trick, for comparison: per 32
// products `vpsignb` (weights take the activations' signs), `vpmaddubsw` (|x| x signed w, i16
// pair sums) and `vpmaddwd` by ones (widening to int32); 8 of each are 256 products, as are
// 16 `vpmaddwd` on i16. Independent instructions, as in the loops above: the pipes they take,
// not the data flowing between them.
LOOP(madd16, M8 M8)
LOOP(maddubs8, OP4("vpmaddubsw") OP4("vpmaddubsw"))
LOOP(sign_trick, OP4("vpsignb") OP4("vpsignb") OP4("vpmaddubsw") OP4("vpmaddubsw") M8)

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) rounds = 7;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("this CPU lacks AVX2 or FMA\n");
        return 0;
    }
    enum { N = 10 };
    const char *names[N] = {"8 vpmaddwd",           "8 vpmaddwd + 4 vpaddd",
                            "8 vpmaddwd + 8 vpaddd", "8 vpmaddwd + 4 vcvtdq2ps",
                            "8 vpmaddwd + 4 vaddps", "8 vpmaddwd + 4 vmulps",
                            "8 vpmaddwd + 4 vfmadd231ps", "16 vpmaddwd (256 products)",
                            "8 vpmaddubsw",          "8 vpsignb + 8 vpmaddubsw + 8 vpmaddwd"};
    double (*runs[N])(void) = {madd, madd_paddd4, madd_paddd8, madd_cvt4,
                               madd_addps4, madd_mulps4, madd_fma4, madd16,
                               maddubs8, sign_trick};
    double *r = malloc(sizeof(double) * N * rounds);
    if (!r) return 1;
    // The loops alternate within each round, so that all of them see the same load.
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < N; j++) r[j * rounds + k] = runs[j]();
    printf("%-40s %12s %14s\n", "turn", "ns per turn", "vs vpmaddwd");
    double base = 0;
    for (int j = 0; j < N; j++) {
        qsort(r + j * rounds, rounds, sizeof(double), cmp);
        double med = r[j * rounds + rounds / 2];
        if (j == 0) base = med;
        printf("%-40s %12.3f %13.2fx\n", names[j], med, med / base);
    }
    free(r);
    return 0;
}
