#pragma once
// The host backend's matrix products (convolution through its column matrix, linear layers):
// Eigen's blocked GEMM over row-major float buffers, in one translation unit of their own.
//
// Why a unit of their own: Eigen is third-party code, and its GEMM is most of the time a network
// takes on the host backend; in the sanitized build (ASan + UBSan) instrumented GEMM made the
// suite's longest tests (whole networks run bitwise) five times slower. matrix_product.cpp is
// compiled without the sanitizers (host_backend/CMakeLists.txt), while the kernels that lay out
// the operands (column matrices, the offsets of an image or a group in a batch) and everything
// else stay instrumented.
#include <cstdint>

namespace memplan::host_backend {

/// The row-major `rows` x `cols` matrix at `data`, read as its transpose when `transposed`.
struct MatrixOperand {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool transposed = false;
};

/// `c` = a * b, or `c` += a * b when `accumulate`: the row-major matrix of a's rows by b's
/// columns (as read). Throws std::invalid_argument when a's columns are not b's rows.
void matrix_product(const MatrixOperand& a, const MatrixOperand& b, float* c,
                    bool accumulate = false);

}  // namespace memplan::host_backend
