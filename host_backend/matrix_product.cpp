#include "host_backend/matrix_product.hpp"

#include <stdexcept>

#include <Eigen/Core>

namespace memplan::host_backend {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

ConstMap matrix(const MatrixOperand& m) {
  return {m.data, m.rows, m.cols};
}

// The product as one Eigen expression per case, each the expression the kernels wrote inline
// before, so that Eigen picks the same kernel and the results are the same to the bit.
template <typename A, typename B>
void assign(Map c, const A& a, const B& b, bool accumulate) {
  if (accumulate) {
    c.noalias() += a * b;
  } else {
    c.noalias() = a * b;
  }
}

}  // namespace

void matrix_product(const MatrixOperand& a, const MatrixOperand& b, float* c, bool accumulate) {
  const std::int64_t m = a.transposed ? a.cols : a.rows;
  const std::int64_t k = a.transposed ? a.rows : a.cols;
  const std::int64_t kb = b.transposed ? b.cols : b.rows;
  const std::int64_t n = b.transposed ? b.rows : b.cols;
  if (k != kb) throw std::invalid_argument("matrix product: a's columns are not b's rows");
  const Map out(c, m, n);
  if (a.transposed && b.transposed) {
    assign(out, matrix(a).transpose(), matrix(b).transpose(), accumulate);
  } else if (a.transposed) {
    assign(out, matrix(a).transpose(), matrix(b), accumulate);
  } else if (b.transposed) {
    assign(out, matrix(a), matrix(b).transpose(), accumulate);
  } else {
    assign(out, matrix(a), matrix(b), accumulate);
  }
}

}  // namespace memplan::host_backend
