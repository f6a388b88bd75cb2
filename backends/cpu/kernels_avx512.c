/* kernels_avx512.c -- the kernels of kernels_avx2.c compiled again with AVX-512 F, BW,
 * VL, DQ and VNNI (this file alone gets those flags; pi_cpu_kernels_init calls it only
 * when the CPU and OS support them).
 *
 * What changes is the integer dot product: vpdpbusd (u8 x s8, four products summed
 * into each int32 lane) replaces maddubs + madd + add, and vpdpwssd replaces madd + add
 * for the K-quant scales. With no int16 saturation, Q4 high nibbles are used in place
 * (16 times their value, shifted back once per group), and with 32 vector registers a
 * decoded Q8_0 group (16 registers) no longer spills and a full gemm tile keeps its
 * 8 accumulators in registers.
 *
 * The vectors stay 256 bits wide on purpose: Zen 4 executes a 512-bit instruction as
 * two 256-bit halves (measured: vpdpbusd ymm 2 per cycle, zmm 1 per cycle), and with
 * 256-bit vectors the block-transposed activation layout needs no horizontal sums.
 * Two exceptions, both for prompts: the gemm of the 32-block types and the K-quants puts
 * two tokens in one 512-bit register (gemm_pairs_avx512.h): Intel cores with two 512-bit
 * ports run vpdpbusd zmm at 1.7x the multiply-adds of ymm (measured on a Xeon), and on
 * Zen 4 its halves cost what two ymm ones do while the loads and scale FMAs halve. And
 * the packed gemm (gemm_packed_avx512.h) of the 32-block types lays out both operands
 * once per matmul for a 3-row x 8-token register tile: on Zen 4 it runs at 1.4-1.75x
 * the pairs gemm (docs/performance.md). */
#define PI_VNNI 1
#include "kernels_avx2.c"
