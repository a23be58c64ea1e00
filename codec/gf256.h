// GF(2^8) arithmetic for the erasure code (internal to codec/).
//
// The field is GF(2)[x] / (x^8 + x^4 + x^3 + x^2 + 1), polynomial 0x11D, generator 2: the
// same field as ISA-L, so coefficient matrices and parity bytes are interchangeable with it.
#ifndef ECPS_CODEC_GF256_H_
#define ECPS_CODEC_GF256_H_

#include <cstdint>
#include <vector>

namespace ecps::codec::gf {

// Product and inverse in GF(2^8). Inverse(0) is 0 (undefined in the field; never used).
uint8_t Mul(uint8_t a, uint8_t b);
uint8_t Inverse(uint8_t a);

// Rows k..k+r-1 of ISA-L's gf_gen_cauchy1_matrix: c[q][j] = 1 / ((k + q) XOR j), row-major
// r x k. For r == 1 the single row is all ones (plain XOR parity) instead.
std::vector<uint8_t> ParityMatrix(int k, int r);

// Inverts the n x n row-major matrix `m` in place. Returns false (m unspecified) if singular.
bool Invert(std::vector<uint8_t>& m, int n);

// The 8x8 bit matrix of "multiply by c", in the layout vgf2p8affineqb expects: byte (7 - i) of
// the result is the row that produces output bit i.
uint64_t AffineMatrix(uint8_t c);

// Applies an 8x8 bit matrix (AffineMatrix layout) to one byte, as vgf2p8affineqb does.
uint8_t AffineApply(uint64_t matrix, uint8_t x);

}  // namespace ecps::codec::gf

#endif  // ECPS_CODEC_GF256_H_
