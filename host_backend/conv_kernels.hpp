#pragma once
// Convolution on the host: im2col (vol2col for 3D) followed by one Eigen GEMM per image, forward
// and both backward passes. 2D convolution is the 3D one with depth 1, so there is one code path.
// Layouts are PyTorch's: input N×C×D×H×W, filter K×(C/groups)×T×R×S, output N×K×D'×H'×W', all
// float32 and contiguous. Results depend only on the inputs (single-threaded Eigen, fixed order),
// so two runs of the same step give bitwise identical gradients.
#include <cstddef>
#include <cstdint>

namespace memplan::host_backend {

struct ConvShape {
  std::int64_t batch = 1;
  std::int64_t in_channels = 1;
  std::int64_t out_channels = 1;
  std::int64_t groups = 1;
  std::int64_t in_d = 1, in_h = 1, in_w = 1;  // input extents (in_d = 1 for 2D)
  std::int64_t kernel_d = 1, kernel_h = 1, kernel_w = 1;
  std::int64_t stride_d = 1, stride_h = 1, stride_w = 1;
  std::int64_t pad_d = 0, pad_h = 0, pad_w = 0;

  [[nodiscard]] std::int64_t out_d() const { return (in_d + 2 * pad_d - kernel_d) / stride_d + 1; }
  [[nodiscard]] std::int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  [[nodiscard]] std::int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
  [[nodiscard]] std::int64_t input_elements() const {
    return batch * in_channels * in_d * in_h * in_w;
  }
  [[nodiscard]] std::int64_t output_elements() const {
    return batch * out_channels * out_d() * out_h() * out_w();
  }
  [[nodiscard]] std::int64_t filter_elements() const {
    return out_channels * (in_channels / groups) * kernel_d * kernel_h * kernel_w;
  }
  /// Floats of scratch the kernels need: one image's column matrix.
  [[nodiscard]] std::int64_t workspace_elements() const {
    return (in_channels / groups) * kernel_d * kernel_h * kernel_w * out_d() * out_h() * out_w();
  }
  /// Checks that the extents are consistent (positive, divisible by groups, output non-empty);
  /// throws std::invalid_argument naming the problem.
  void check() const;
};

/// y = conv(x, w) (+ bias when `bias` is not null). `workspace` holds workspace_elements() floats.
void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y,
                  float* workspace);
/// dx = conv_transpose(dy, w). Overwrites dx.
void conv_backward_data(const ConvShape& s, const float* dy, const float* w, float* dx,
                        float* workspace);
/// dw = correlation of x and dy; db (when not null) = sum of dy per channel. Overwrites both.
void conv_backward_filter(const ConvShape& s, const float* x, const float* dy, float* dw, float* db,
                          float* workspace);

}  // namespace memplan::host_backend
