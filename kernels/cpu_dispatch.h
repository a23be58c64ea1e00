// ECPS_CLONES marks a hot element-wise kernel to be compiled once per instruction set
// (AVX-512, AVX2, baseline x86-64) and picked at run time by the CPU it runs on (GCC's and
// Clang's target_clones: an ifunc resolved when the library loads), never -march=native.
// The files that use it are compiled with -O3 (the full vectoriser), -fno-math-errno (so
// that sqrt vectorises) and -ffp-contract=off: no clone fuses a multiply and an add, so
// every clone rounds as the baseline one does and gives the same bits (IEEE add, multiply,
// divide and sqrt are exact per lane), which keeps replicas on different CPUs identical.
#ifndef ECPS_KERNELS_CPU_DISPATCH_H_
#define ECPS_KERNELS_CPU_DISPATCH_H_

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ECPS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ECPS_CLONES
#endif

#endif  // ECPS_KERNELS_CPU_DISPATCH_H_
