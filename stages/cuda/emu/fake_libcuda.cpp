// A fake libcuda.so.1 for testing the cuda harness without a GPU: the driver calls the
// harness makes, with memory in host RAM and each kernel run by the CUDA-on-CPU shim
// (cuda_emu.h) from the same .cu sources the PTX comes from. Not a GPU: it checks the
// harness's plumbing (arguments, grids, copies) and the kernels' semantics, not their PTX.
#include "cuda_emu.h"
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

thread_local EmuDim threadIdx, blockIdx, blockDim;
thread_local std::barrier<>* emu_barrier;

#include "../kernels/q3k.cu"
#include "../kernels/rope.cu"
#include "../kernels/norm.cu"
#include "../kernels/moe.cu"
#include "../kernels/ssm.cu"

typedef void (*Thunk)(void** p);
#define P(T, i) (*(T*)p[i])
static void k_q3k_dequant(void** p) { q3k_dequant(P(const unsigned char*, 0), P(float*, 1), P(int, 2)); }
static void k_q3k_matvec(void** p) { q3k_matvec(P(const unsigned char*, 0), P(const float*, 1), P(float*, 2), P(int, 3), P(int, 4)); }
static void k_rope(void** p) { rope_neox_partial(P(const float*, 0), P(float*, 1), P(int, 2), P(unsigned, 3)); }
static void k_rms(void** p) { rms_norm_heads(P(const float*, 0), P(const float*, 1), P(float*, 2), P(int, 3), P(double, 4)); }
static void k_gated(void** p) { gated_rms_norm(P(const float*, 0), P(const float*, 1), P(const float*, 2), P(float*, 3), P(int, 4), P(double, 5)); }
static void k_route(void** p) { moe_route(P(const float*, 0), P(int, 1), P(int, 2), P(double, 3), P(int*, 4), P(float*, 5)); }
static void k_gate(void** p) { moe_shared_gate(P(const float*, 0), P(const float*, 1), P(int, 2), P(float*, 3)); }
static void k_delta(void** p) { ssm_delta_rule(P(const float*, 0), P(const float*, 1), P(const float*, 2), P(const float*, 3), P(const float*, 4), P(const float*, 5), P(float*, 6), P(float*, 7), P(int, 8)); }
static void k_conv(void** p) { ssm_conv1d_silu(P(const float*, 0), P(const float*, 1), P(const float*, 2), P(float*, 3), P(float*, 4), P(int, 5)); }

struct Entry { const char* name; Thunk f; };
static const Entry KERNELS[] = {
    {"q3k_dequant", k_q3k_dequant}, {"q3k_matvec", k_q3k_matvec}, {"rope_neox_partial", k_rope},
    {"rms_norm_heads", k_rms}, {"gated_rms_norm", k_gated}, {"moe_route", k_route},
    {"moe_shared_gate", k_gate}, {"ssm_delta_rule", k_delta}, {"ssm_conv1d_silu", k_conv},
};

extern "C" {
int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int* v) { *v = 11080; return 0; }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int) { *d = 0; return 0; }
int cuDeviceGetName(char* s, int len, int) { std::strncpy(s, "CPU emulation (fake libcuda)", len); s[len - 1] = 0; return 0; }
int cuDeviceGetAttribute(int* v, int attr, int) { *v = attr == 75 ? 3 : 7; return 0; }
int cuCtxCreate_v2(void** c, unsigned, int) { *c = (void*)1; return 0; }
int cuCtxDestroy_v2(void*) { return 0; }
int cuCtxSynchronize() { return 0; }
int cuModuleLoadData(void** m, const void* ptx) {
    // The PTX must be what `skyctl cuda compile` wrote. CUDA_EMU_REFUSE_TARGET=sm_NN plays a
    // driver that no longer JIT-compiles PTX for that target.
    const char* target = std::strstr((const char*)ptx, "\n.target sm_");
    if (!target) return 218; // CUDA_ERROR_INVALID_PTX
    target += std::strlen("\n.target ");
    const char* refuse = std::getenv("CUDA_EMU_REFUSE_TARGET");
    size_t n = refuse ? std::strlen(refuse) : 0;
    if (n > 0 && std::strncmp(target, refuse, n) == 0 && (target[n] == '\n' || target[n] == ' '))
        return 218;
    *m = (void*)1;
    return 0;
}
int cuModuleUnload(void*) { return 0; }
int cuModuleGetFunction(void** f, void*, const char* name) {
    for (const Entry& e : KERNELS)
        if (std::strcmp(e.name, name) == 0) { *f = (void*)&e; return 0; }
    return 500; // CUDA_ERROR_NOT_FOUND
}
int cuMemAlloc_v2(uint64_t* p, size_t n) { *p = (uint64_t)std::malloc(n); return *p ? 0 : 2; }
int cuMemFree_v2(uint64_t p) { std::free((void*)p); return 0; }
int cuMemcpyHtoD_v2(uint64_t d, const void* s, size_t n) { std::memcpy((void*)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void* d, uint64_t s, size_t n) { std::memcpy(d, (void*)s, n); return 0; }
int cuGetErrorName(int, const char** s) { *s = "CUDA_ERROR_EMULATED"; return 0; }
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned, void*, void** params, void**) {
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024) return 1;
    Thunk k = ((const Entry*)f)->f;
    // One OS thread per CUDA thread; the blocks run one after another (so a __shared__
    // static is the running block's shared memory).
    for (unsigned b = 0; b < gx; ++b) {
        std::barrier<> bar(bx);
        std::vector<std::thread> ts;
        ts.reserve(bx);
        for (unsigned t = 0; t < bx; ++t)
            ts.emplace_back([=, &bar] {
                threadIdx = {t, 0, 0};
                blockIdx = {b, 0, 0};
                blockDim = {bx, 1, 1};
                emu_barrier = &bar;
                k(params);
                bar.arrive_and_drop(); // a returned thread no longer holds the others back
            });
        for (auto& t : ts) t.join();
    }
    return 0;
}
}
