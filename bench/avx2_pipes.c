// Which instructions of the AVX2 int8 tile (`stages/quant/src/kernels/avx2.rs`) share an
// execution pipe with its `vpmaddwd`: register-only loops of 8 independent `vpmaddwd` per
// turn, alone and with 4 or 8 other instructions beside them (no chains, no loads, written in
// assembly so that no compiler spills them). If a loop with extra instructions takes no
// longer than `vpmaddwd` alone, they run on other pipes; if it takes (8 + n) / 8 as long,
// they compete for the same ones. The last loops set 256 products by the tile's `vpmaddwd`
// against the sign trick the tile does not use, and against `vpmaddubsw` with one operand
// narrowed to 7 or 6 bits (what a change of the quantization would buy; BENCH.md). Each
// loop's median over the rounds, ns per turn.
// A second table runs the tile's chunk loop with its data flow: the weights loaded, each token's
// activation pair broadcast from memory, each `vpaddd` waiting on its `vpmaddwd`, as
// `tiles_256!` does per chunk; then the same without the adds, other tile shapes, and the
// (exact) int32 adds in other orders, the chunk of a 7-bit layout, and the chunk of an exact
// 8-bit layout that stores each weight chunk in its 4 sign variants (below).
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
// What narrower operands would buy (a change of the quantization, not of the kernel): with one
// side at 7 bits (|w| <= 63 against activations offset to u8, or the reverse), `vpmaddubsw`
// cannot saturate and needs no `vpsignb`: 256 products are 8 `vpmaddubsw`, 8 `vpmaddwd` by
// ones and 8 `vpaddd`, against 16 `vpmaddwd` and 16 `vpaddd` for the i16 layout. At 6 bits two
// `vpmaddubsw` results sum in i16 (`vpaddw`) before one widening.
LOOP(madd16_paddd16, M8 M8 OP4("vpaddd") OP4("vpaddd") OP4("vpaddd") OP4("vpaddd"))
LOOP(seven_bit, OP4("vpmaddubsw") OP4("vpmaddubsw") M8 OP4("vpaddd") OP4("vpaddd"))
LOOP(six_bit, OP4("vpmaddubsw") OP4("vpmaddubsw") OP4("vpaddw") OP4("vpmaddwd") OP4("vpaddd"))

// The chunk loops with data flow. `%0` points at a small buffer: activations at bytes 0..16,
// weights from byte 256. Registers: accumulators first, then weights, broadcast, temporaries.
static int chunk_mem[128] __attribute__((aligned(64)));
#define CHUNK_CLOBBER CLOBBER, "xmm12", "xmm13", "xmm14", "xmm15", "memory"
#define BCAST(t, r) "vpbroadcastd " #t "*4(%0), %%ymm" #r "\n\t"
#define WLOAD(g, r) "vmovdqu " #g "*32+256(%0), %%ymm" #r "\n\t"
#define MD(x, w, t) "vpmaddwd %%ymm" #x ", %%ymm" #w ", %%ymm" #t "\n\t"
#define MDM(x, g, t) "vpmaddwd " #g "*32+256(%0), %%ymm" #x ", %%ymm" #t "\n\t"
#define AD(t, a) "vpaddd %%ymm" #t ", %%ymm" #a ", %%ymm" #a "\n\t"
// 2 groups x 4 tokens, the kernel's tile: weights in ymm12/13, broadcast ymm14, temp ymm15.
#define TILE_TOKEN(t, a0, a1) BCAST(t, 14) MD(14, 12, 15) AD(15, a0) MD(14, 13, 15) AD(15, a1)
#define TILE_2X4 WLOAD(0, 12) WLOAD(1, 13) \
    TILE_TOKEN(0, 0, 1) TILE_TOKEN(1, 2, 3) TILE_TOKEN(2, 4, 5) TILE_TOKEN(3, 6, 7)
// The same products without the adds: each vpmaddwd writes its own register.
#define NOADD_TOKEN(t, a0, a1) BCAST(t, 14) MD(14, 12, a0) MD(14, 13, a1)
#define TILE_2X4_NOADD WLOAD(0, 12) WLOAD(1, 13) \
    NOADD_TOKEN(0, 0, 1) NOADD_TOKEN(1, 2, 3) NOADD_TOKEN(2, 4, 5) NOADD_TOKEN(3, 6, 7)
// With the adds but one activation pair for all tokens (no broadcasts).
#define REG_TOKEN(a0, a1) MD(14, 12, 15) AD(15, a0) MD(14, 13, 15) AD(15, a1)
#define TILE_2X4_NOBCAST WLOAD(0, 12) WLOAD(1, 13) \
    REG_TOKEN(0, 1) REG_TOKEN(2, 3) REG_TOKEN(4, 5) REG_TOKEN(6, 7)
// 12 accumulators with the weights as memory operands (no registers left for them):
// 4 groups x 3 tokens and 6 groups x 2 tokens.
#define MEM_TOKEN4(t, a0, a1, a2, a3, b) BCAST(t, b) \
    MDM(b, 0, 14) AD(14, a0) MDM(b, 1, 15) AD(15, a1) MDM(b, 2, 14) AD(14, a2) MDM(b, 3, 15) AD(15, a3)
#define TILE_4X3_MEM MEM_TOKEN4(0, 0, 1, 2, 3, 12) MEM_TOKEN4(1, 4, 5, 6, 7, 13) \
    MEM_TOKEN4(2, 8, 9, 10, 11, 12)
#define MEM_TOKEN6(t, a0, a1, a2, a3, a4, a5, b) BCAST(t, b) \
    MDM(b, 0, 14) AD(14, a0) MDM(b, 1, 15) AD(15, a1) MDM(b, 2, 14) AD(14, a2) \
    MDM(b, 3, 15) AD(15, a3) MDM(b, 4, 14) AD(14, a4) MDM(b, 5, 15) AD(15, a5)
#define TILE_6X2_MEM MEM_TOKEN6(0, 0, 1, 2, 3, 4, 5, 12) MEM_TOKEN6(1, 6, 7, 8, 9, 10, 11, 13)
// The int32 adds reordered (exact, so any order gives the tile's bits): two k-pairs of one
// (group, token) summed before the one add into its chain (2 groups x 4 tokens over 2 pairs:
// weights ymm8-11, the two broadcasts ymm12/13, temporaries ymm14/15); then each token pair's
// four products issued before their four adds.
#define ADD3(a, b, d) "vpaddd %%ymm" #a ", %%ymm" #b ", %%ymm" #d "\n\t"
#define TREE_TOKEN(t, u, a0, a1) BCAST(t, 12) BCAST(u, 13) \
    MD(12, 8, 14) MD(13, 10, 15) ADD3(14, 15, 14) AD(14, a0) \
    MD(12, 9, 14) MD(13, 11, 15) ADD3(14, 15, 14) AD(14, a1)
#define TILE_TREE WLOAD(0, 8) WLOAD(1, 9) WLOAD(2, 10) WLOAD(3, 11) \
    TREE_TOKEN(0, 1, 0, 1) TREE_TOKEN(2, 3, 2, 3) TREE_TOKEN(4, 5, 4, 5) TREE_TOKEN(6, 7, 6, 7)
#define FOUR_THEN_ADDS(t, u, a0, a1, a2, a3) BCAST(t, 14) MD(14, 12, 8) MD(14, 13, 9) \
    BCAST(u, 15) MD(15, 12, 10) MD(15, 13, 11) AD(8, a0) AD(9, a1) AD(10, a2) AD(11, a3)
#define TILE_PRODUCTS_FIRST WLOAD(0, 12) WLOAD(1, 13) \
    FOUR_THEN_ADDS(0, 1, 0, 1, 2, 3) FOUR_THEN_ADDS(2, 3, 4, 5, 6, 7)
#define CHUNK_LOOP(NAME, BODY)                                                       \
    __attribute__((target("avx2,fma"))) static double NAME(void) {                  \
        double t = now();                                                            \
        for (long i = 0; i < TURNS; i++)                                             \
            __asm__ volatile(BODY ::"r"(chunk_mem) : CHUNK_CLOBBER);                 \
        return (now() - t) / TURNS * 1e9;                                            \
    }
// The 7-bit layout's chunk, 2 groups x 4 tokens over 4 k values (256 products, twice the
// tile's chunk): u8 activations broadcast, `vpmaddubsw` into i16 pair sums, `vpmaddwd` by ones
// (ymm11) into int32, the add into the chain.
#define MUB(x, w, t) "vpmaddubsw %%ymm" #w ", %%ymm" #x ", %%ymm" #t "\n\t"
#define SEVEN_TOKEN(t, a0, a1) BCAST(t, 14) MUB(14, 12, 15) MD(15, 11, 15) AD(15, a0) \
    MUB(14, 13, 15) MD(15, 11, 15) AD(15, a1)
#define TILE_SEVEN WLOAD(0, 12) WLOAD(1, 13) \
    SEVEN_TOKEN(0, 0, 1) SEVEN_TOKEN(1, 2, 3) SEVEN_TOKEN(2, 4, 5) SEVEN_TOKEN(3, 6, 7)
// Exact 8-bit x 8-bit through `vpmaddubsw` without `vpsignb`: x0 w0 + x1 w1 =
// s0 (|x0| w0 + (s0 s1) |x1| w1), with s the signs of the activations. Each weight chunk is
// stored in the 4 variants (w0, +-w1, w2, +-w3); per token and chunk the quantizer writes |x|
// (the unsigned operand), the pair (s0, s2) that `vpmaddwd` multiplies by instead of ones, and
// the byte offset of the variant its signs pick. So each token loads its own weights from a
// loaded address (no weight register shared by the tokens): per token a broadcast of |x|
// (ymm14) and of the signs (ymm11), the offset (rax), then per group `vpmaddubsw` from memory,
// `vpmaddwd` and the add. Offsets at bytes 64..80, the variants from byte 256.
#define VARIANT_TOKEN(t, a0, a1) "movl " #t "*4+64(%0), %%eax\n\t" BCAST(t, 14)                    \
    "vpbroadcastd " #t "*4+32(%0), %%ymm11\n\t"                                            \
    "vpmaddubsw 256(%0,%%rax), %%ymm14, %%ymm15\n\t" MD(15, 11, 15) AD(15, a0)              \
    "vpmaddubsw 384(%0,%%rax), %%ymm14, %%ymm15\n\t" MD(15, 11, 15) AD(15, a1)
#define TILE_VARIANT VARIANT_TOKEN(0, 0, 1) VARIANT_TOKEN(1, 2, 3) VARIANT_TOKEN(2, 4, 5) \
    VARIANT_TOKEN(3, 6, 7)
__attribute__((target("avx2,fma"))) static double tile_variant(void) {
    double t = now();
    for (long i = 0; i < TURNS; i++)
        __asm__ volatile(TILE_VARIANT ::"r"(chunk_mem) : CHUNK_CLOBBER, "rax");
    return (now() - t) / TURNS * 1e9;
}
CHUNK_LOOP(tile_2x4, TILE_2X4)
CHUNK_LOOP(tile_2x4_noadd, TILE_2X4_NOADD)
CHUNK_LOOP(tile_2x4_nobcast, TILE_2X4_NOBCAST)
CHUNK_LOOP(tile_4x3_mem, TILE_4X3_MEM)
CHUNK_LOOP(tile_6x2_mem, TILE_6X2_MEM)
CHUNK_LOOP(tile_tree, TILE_TREE)
CHUNK_LOOP(tile_products_first, TILE_PRODUCTS_FIRST)
CHUNK_LOOP(tile_seven, TILE_SEVEN)

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Runs the n loops `rounds` times, alternating them within each round so that all of them
// see the same load, and writes each loop's median (ns per turn) into `med`. 0 on success.
static int medians(double (*const *runs)(void), int n, int rounds, double *med) {
    double *r = malloc(sizeof(double) * n * rounds);
    if (!r) return 1;
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < n; j++) r[j * rounds + k] = runs[j]();
    for (int j = 0; j < n; j++) {
        qsort(r + j * rounds, rounds, sizeof(double), cmp);
        med[j] = r[j * rounds + rounds / 2];
    }
    free(r);
    return 0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) rounds = 7;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("this CPU lacks AVX2 or FMA\n");
        return 0;
    }
    enum { N = 13 };
    const char *names[N] = {"8 vpmaddwd",           "8 vpmaddwd + 4 vpaddd",
                            "8 vpmaddwd + 8 vpaddd", "8 vpmaddwd + 4 vcvtdq2ps",
                            "8 vpmaddwd + 4 vaddps", "8 vpmaddwd + 4 vmulps",
                            "8 vpmaddwd + 4 vfmadd231ps", "16 vpmaddwd (256 products)",
                            "8 vpmaddubsw",          "8 vpsignb + 8 vpmaddubsw + 8 vpmaddwd",
                            "16 vpmaddwd + 16 vpaddd (256, i16)",
                            "8 vpmaddubsw + 8 vpmaddwd + 8 vpaddd (7-bit)",
                            "8 vpmaddubsw + 4 vpaddw + 4 vpmaddwd + 4 vpaddd (6-bit)"};
    double (*const runs[N])(void) = {madd, madd_paddd4, madd_paddd8, madd_cvt4,
                                     madd_addps4, madd_mulps4, madd_fma4, madd16,
                                     maddubs8, sign_trick, madd16_paddd16, seven_bit, six_bit};
    double med[N];
    if (medians(runs, N, rounds, med)) return 1;
    printf("%-56s %12s %14s\n", "turn", "ns per turn", "vs vpmaddwd");
    for (int j = 0; j < N; j++) printf("%-56s %12.3f %13.2fx\n", names[j], med[j], med[j] / med[0]);

    // The sign-variant chunk's offsets: one per token, each variant in turn.
    for (int t = 0; t < 4; t++) chunk_mem[16 + t] = 32 * t;
    enum { M = 9 };
    const char *chunk_names[M] = {"2 x 4 without the adds", "2 x 4, as the tile",
                                  "2 x 4 without the broadcasts", "4 x 3, weights from memory",
                                  "6 x 2, weights from memory", "2 x 4, two pairs summed first",
                                  "2 x 4, 4 products then 4 adds",
                                  "2 x 4, 7-bit (256 products)",
                                  "2 x 4, 8-bit sign variants (256 products)"};
    double (*const chunks[M])(void) = {tile_2x4_noadd, tile_2x4, tile_2x4_nobcast, tile_4x3_mem,
                                       tile_6x2_mem, tile_tree, tile_products_first, tile_seven,
                                       tile_variant};
    // In i16-layout `vpmaddwd`s of 16 products: the 7-bit chunk's 256 products count 16.
    const int madds[M] = {8, 8, 8, 12, 12, 16, 8, 16, 16};
    double turn[M];
    if (medians(chunks, M, rounds, turn)) return 1;
    printf("\n%-40s %12s %18s %12s\n", "chunk with data flow (groups x tokens)", "ns per turn",
           "ns per 16 products", "vs no adds");
    for (int j = 0; j < M; j++) {
        double per = turn[j] / madds[j], noadd = turn[0] / madds[0];
        printf("%-40s %12.3f %18.4f %11.2fx\n", chunk_names[j], turn[j], per, per / noadd);
    }
    return 0;
}
