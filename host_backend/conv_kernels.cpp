#include "host_backend/conv_kernels.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <Eigen/Core>

#include "host_backend/matrix_product.hpp"

namespace memplan::host_backend {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// Walks the column matrix of one image and one group — rows (c, t, r, s), columns (od, oh, ow) —
// calling visit(column entry, image index or -1 where the window is in the padding). vol2col and
// its adjoint col2vol are the two ways of using this walk.
template <typename Visit>
void for_each_column_entry(const ConvShape& s, Visit visit) {
  const std::int64_t cg = s.in_channels / s.groups;
  const std::int64_t od = s.out_d(), oh = s.out_h(), ow = s.out_w();
  std::int64_t entry = 0;
  for (std::int64_t c = 0; c < cg; ++c) {
    for (std::int64_t kt = 0; kt < s.kernel_d; ++kt) {
      for (std::int64_t kr = 0; kr < s.kernel_h; ++kr) {
        for (std::int64_t ks = 0; ks < s.kernel_w; ++ks) {
          for (std::int64_t z = 0; z < od; ++z) {
            const std::int64_t iz = z * s.stride_d - s.pad_d + kt;
            for (std::int64_t y = 0; y < oh; ++y) {
              const std::int64_t iy = y * s.stride_h - s.pad_h + kr;
              for (std::int64_t x = 0; x < ow; ++x, ++entry) {
                const std::int64_t ix = x * s.stride_w - s.pad_w + ks;
                const bool inside =
                    iz >= 0 && iz < s.in_d && iy >= 0 && iy < s.in_h && ix >= 0 && ix < s.in_w;
                visit(entry, inside ? ((c * s.in_d + iz) * s.in_h + iy) * s.in_w + ix : -1);
              }
            }
          }
        }
      }
    }
  }
}

// The column matrix of one image and one group.
void vol2col(const ConvShape& s, const float* image, float* col) {
  for_each_column_entry(
      s, [&](std::int64_t entry, std::int64_t at) { col[entry] = at >= 0 ? image[at] : 0.0f; });
}

// Adds a column matrix back into one image and one group (the adjoint of vol2col).
void col2vol(const ConvShape& s, const float* col, float* image) {
  for_each_column_entry(s, [&](std::int64_t entry, std::int64_t at) {
    if (at >= 0) image[at] += col[entry];
  });
}

struct Extents {
  std::int64_t cg, kg, patch, spatial_out, image_in, image_out, filter_group;
};

Extents extents(const ConvShape& s) {
  s.check();
  Extents e{};
  e.cg = s.in_channels / s.groups;
  e.kg = s.out_channels / s.groups;
  e.patch = e.cg * s.kernel_d * s.kernel_h * s.kernel_w;
  e.spatial_out = s.out_d() * s.out_h() * s.out_w();
  e.image_in = s.in_channels * s.in_d * s.in_h * s.in_w;
  e.image_out = s.out_channels * e.spatial_out;
  e.filter_group = e.kg * e.patch;
  return e;
}

}  // namespace

void ConvShape::check() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("convolution: " + what); };
  if (batch <= 0 || in_channels <= 0 || out_channels <= 0 || groups <= 0)
    fail("non-positive extent");
  if (in_channels % groups != 0 || out_channels % groups != 0)
    fail("channels not divisible by groups");
  if (stride_d <= 0 || stride_h <= 0 || stride_w <= 0) fail("non-positive stride");
  if (pad_d < 0 || pad_h < 0 || pad_w < 0) fail("negative padding");
  if (kernel_d <= 0 || kernel_h <= 0 || kernel_w <= 0) fail("non-positive kernel extent");
  if (out_d() <= 0 || out_h() <= 0 || out_w() <= 0) fail("kernel larger than the padded input");
}

void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y,
                  float* workspace) {
  const Extents e = extents(s);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      vol2col(s, x + n * e.image_in + g * e.cg * s.in_d * s.in_h * s.in_w, workspace);
      matrix_product({w + g * e.filter_group, e.kg, e.patch}, {workspace, e.patch, e.spatial_out},
                     y + n * e.image_out + g * e.kg * e.spatial_out);
    }
    if (bias != nullptr) {
      Map out(y + n * e.image_out, s.out_channels, e.spatial_out);
      for (std::int64_t k = 0; k < s.out_channels; ++k) out.row(k).array() += bias[k];
    }
  }
}

void conv_backward_data(const ConvShape& s, const float* dy, const float* w, float* dx,
                        float* workspace) {
  const Extents e = extents(s);
  std::fill(dx, dx + s.input_elements(), 0.0f);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      matrix_product({w + g * e.filter_group, e.kg, e.patch, true},
                     {dy + n * e.image_out + g * e.kg * e.spatial_out, e.kg, e.spatial_out},
                     workspace);
      col2vol(s, workspace, dx + n * e.image_in + g * e.cg * s.in_d * s.in_h * s.in_w);
    }
  }
}

void conv_backward_filter(const ConvShape& s, const float* x, const float* dy, float* dw, float* db,
                          float* workspace) {
  const Extents e = extents(s);
  std::fill(dw, dw + s.filter_elements(), 0.0f);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      vol2col(s, x + n * e.image_in + g * e.cg * s.in_d * s.in_h * s.in_w, workspace);
      matrix_product({dy + n * e.image_out + g * e.kg * e.spatial_out, e.kg, e.spatial_out},
                     {workspace, e.patch, e.spatial_out, true}, dw + g * e.filter_group, true);
    }
  }
  if (db != nullptr) {
    std::fill(db, db + s.out_channels, 0.0f);
    for (std::int64_t n = 0; n < s.batch; ++n) {
      ConstMap grad(dy + n * e.image_out, s.out_channels, e.spatial_out);
      for (std::int64_t k = 0; k < s.out_channels; ++k) db[k] += grad.row(k).sum();
    }
  }
}

}  // namespace memplan::host_backend
