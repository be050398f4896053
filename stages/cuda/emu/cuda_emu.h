// CUDA-on-CPU shim for the emulated driver (fake_libcuda.cpp): the kernel sources compile as
// C++ with one OS thread per CUDA thread of a block, blocks one after another.
#pragma once
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>

struct EmuDim { unsigned x, y, z; };
extern thread_local EmuDim threadIdx;
extern thread_local EmuDim blockIdx;
extern thread_local EmuDim blockDim;
extern thread_local std::barrier<>* emu_barrier;

#define __global__
#define __device__
// Shared memory: one copy, shared by the threads of the (single) running block.
#define __shared__ static
inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
using std::exp; using std::sqrt; using std::fmax;
inline void sincos(double x, double* s, double* c) { *s = std::sin(x); *c = std::cos(x); }
