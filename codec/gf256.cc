#include "codec/gf256.h"

#include <array>
#include <cstddef>
#include <utility>

namespace ecps::codec::gf {
namespace {

struct Tables {
  std::array<uint8_t, 512> exp{};
  std::array<int, 256> log{};
  constexpr Tables() {
    int x = 1;
    for (int i = 0; i < 255; ++i) {
      exp[i] = static_cast<uint8_t>(x);
      exp[i + 255] = static_cast<uint8_t>(x);
      log[x] = i;
      x <<= 1;
      if (x & 0x100) x ^= 0x11D;
    }
  }
};

constexpr Tables kTables;

}  // namespace

uint8_t Mul(uint8_t a, uint8_t b) {
  if (a == 0 || b == 0) return 0;
  return kTables.exp[kTables.log[a] + kTables.log[b]];
}

uint8_t Inverse(uint8_t a) {
  if (a == 0) return 0;
  return kTables.exp[255 - kTables.log[a]];
}

std::vector<uint8_t> ParityMatrix(int k, int r) {
  std::vector<uint8_t> c(static_cast<std::size_t>(k) * r, 1);
  if (r == 1) return c;
  for (int q = 0; q < r; ++q) {
    for (int j = 0; j < k; ++j) {
      c[static_cast<std::size_t>(q) * k + j] = Inverse(static_cast<uint8_t>((k + q) ^ j));
    }
  }
  return c;
}

bool Invert(std::vector<uint8_t>& m, int n) {
  std::vector<uint8_t> inv(static_cast<std::size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) inv[static_cast<std::size_t>(i) * n + i] = 1;
  auto at = [n](std::vector<uint8_t>& v, int row, int col) -> uint8_t& {
    return v[static_cast<std::size_t>(row) * n + col];
  };
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    while (pivot < n && at(m, pivot, col) == 0) ++pivot;
    if (pivot == n) return false;
    if (pivot != col) {
      for (int j = 0; j < n; ++j) {
        std::swap(at(m, pivot, j), at(m, col, j));
        std::swap(at(inv, pivot, j), at(inv, col, j));
      }
    }
    const uint8_t scale = Inverse(at(m, col, col));
    for (int j = 0; j < n; ++j) {
      at(m, col, j) = Mul(at(m, col, j), scale);
      at(inv, col, j) = Mul(at(inv, col, j), scale);
    }
    for (int row = 0; row < n; ++row) {
      const uint8_t f = at(m, row, col);
      if (row == col || f == 0) continue;
      for (int j = 0; j < n; ++j) {
        at(m, row, j) ^= Mul(f, at(m, col, j));
        at(inv, row, j) ^= Mul(f, at(inv, col, j));
      }
    }
  }
  m = std::move(inv);
  return true;
}

uint64_t AffineMatrix(uint8_t c) {
  uint64_t matrix = 0;
  for (int j = 0; j < 8; ++j) {
    const uint8_t column = Mul(c, static_cast<uint8_t>(1u << j));  // image of input bit j
    for (int i = 0; i < 8; ++i) {
      if ((column >> i) & 1) matrix |= uint64_t{1} << (8 * (7 - i) + j);
    }
  }
  return matrix;
}

uint8_t AffineApply(uint64_t matrix, uint8_t x) {
  uint8_t out = 0;
  for (int i = 0; i < 8; ++i) {
    const uint8_t row = static_cast<uint8_t>(matrix >> (8 * (7 - i)));
    out |= static_cast<uint8_t>((__builtin_popcount(row & x) & 1) << i);
  }
  return out;
}

}  // namespace ecps::codec::gf
