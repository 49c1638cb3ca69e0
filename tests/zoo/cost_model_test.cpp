#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "core/machine.hpp"
#include "tests/zoo/zoo_test_support.hpp"
#include "zoo/cost_model.hpp"
#include "zoo/devices.hpp"
#include "zoo/zoo.hpp"

namespace zoo = memplan::zoo;
namespace sim = memplan::sim;
using memplan::test::total_ms;

namespace {

sim::Workload modeled(const std::string& model, const std::string& device, std::int64_t batch) {
  zoo::ZooRequest request{model, device, {}};
  request.options.batch = batch;
  return zoo::make_workload(request);
}

}  // namespace

TEST_CASE("ResNet-50 batch 32 on a V100 matches the measured step", "[zoo][cost]") {
  // Kineto profile of torchvision ResNet-50, batch 32, fp32 SGD on a V100 (../shared/data/kineto,
  // profiler step 6): 97.5 ms of CUDA kernels; per operator type (ms) below. The model was
  // calibrated on this profile; the issue asks for 25%, these checks hold it to 10% overall and
  // 25% per operator family.
  const sim::Workload w = modeled("resnet50", "v100-32gb", 32);
  CHECK(total_ms(w) == Approx(97.5).epsilon(0.10));
  std::map<std::string, double> ms;
  for (const sim::Op& op : w.ops) {
    const char* phase = op.phase == sim::Phase::kForward    ? "fwd"
                        : op.phase == sim::Phase::kBackward ? "bwd"
                                                            : "upd";
    ms[op.layer.str() + "." + phase] += static_cast<double>(op.duration_ns) / 1e6;
  }
  CHECK(ms["conv2d.fwd"] == Approx(21.1).epsilon(0.25));
  CHECK(ms["conv2d.bwd"] == Approx(44.7).epsilon(0.25));
  CHECK(ms["batch_norm.fwd"] + ms["batch_norm.bwd"] == Approx(15.8).epsilon(0.25));
  CHECK(ms["relu.fwd"] + ms["relu.bwd"] == Approx(7.5).epsilon(0.25));
  CHECK(ms["add.fwd"] + ms["grad_accumulate.bwd"] == Approx(5.3).epsilon(0.25));
}

TEST_CASE("ResNet-50 batch 112 on a V100 16GB is within 25% of NVIDIA's published step",
          "[zoo][cost]") {
  // A second, independent reference (not used for calibration): NVIDIA DeepLearningExamples,
  // PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training performance: NVIDIA DGX-1
  // 16GB (8x V100 16GB)", 1 GPU, FP32: 367 img/s at the FP32 DGX1V batch size of 112 (configs.yml),
  // pytorch-21.03 NGC container, DALI input pipeline. 112 / 367 = 305 ms per step. The model
  // predicts GPU time (docs/zoo.md "Calibration"); with a well-fed pipeline the two agree.
  const sim::Workload w = modeled("resnet50", "v100-16gb", 112);
  CHECK(total_ms(w) == Approx(112.0 / 367.0 * 1e3).epsilon(0.25));
}

TEST_CASE("ResNet-50 on an A100 80GB is within 15% of NVIDIA's published AMP and TF32 steps",
          "[zoo][cost][precision]") {
  // The same README, "Training performance: NVIDIA DGX A100 (8x A100 80GB)", 1 GPU, batch 256:
  // AMP 2470 img/s (fp16 autocast, channels_last: configs.yml's memory_format nhwc), 103.6 ms a
  // step; TF32 938 img/s (NCHW), 272.9 ms. Neither set an efficiency (Note [Tensor-core
  // convolutions]: the H100 profile did); the goal is 15%.
  zoo::ZooRequest request{"resnet50", "a100-80gb", {}};
  request.options.batch = 256;
  request.options.precision = zoo::Precision::kFp16;
  request.options.channels_last = true;
  CHECK(total_ms(zoo::make_workload(request)) == Approx(256.0 / 2470.0 * 1e3).epsilon(0.15));
  request.options.precision = zoo::Precision::kTf32;
  request.options.channels_last = false;
  CHECK(total_ms(zoo::make_workload(request)) == Approx(256.0 / 938.0 * 1e3).epsilon(0.15));
}

TEST_CASE("faster devices give shorter steps, time scales with the batch", "[zoo][cost]") {
  const double k40 = total_ms(modeled("resnet50", "k40c", 16));
  const double v100 = total_ms(modeled("resnet50", "v100-16gb", 16));
  const double h100 = total_ms(modeled("resnet50", "h100-80gb", 16));
  CHECK(k40 > 2.5 * v100);
  CHECK(v100 > 2.5 * h100);
  const double big = total_ms(modeled("vgg16", "titanx-maxwell", 64));
  const double small = total_ms(modeled("vgg16", "titanx-maxwell", 32));
  CHECK(big == Approx(2 * small).epsilon(0.05));
}

TEST_CASE("convolutions carry a memory-optimal algorithm without workspace", "[zoo][cost]") {
  const sim::Workload w = modeled("vgg16", "titanx-maxwell", 8);
  const sim::Op& conv = memplan::test::op_named(w, "features.2");
  REQUIRE(conv.workspace_bytes > 0);
  REQUIRE(conv.algorithms.size() == 1);
  CHECK(conv.algorithms[0].name == "memory_optimal");
  CHECK(conv.algorithms[0].workspace_bytes == 0);
  CHECK(conv.algorithms[0].duration_ns > conv.duration_ns);
  const sim::Op& bwd = memplan::test::op_named(w, "features.2_bwd");
  CHECK(bwd.workspace_bytes > 0);
  CHECK(bwd.algorithms.size() == 1);
  CHECK(bwd.duration_ns > conv.duration_ns);
  // A 1x1 stride-1 conv is a plain GEMM: no workspace, no alternative.
  const sim::Workload r = modeled("resnet50", "v100-16gb", 2);
  CHECK(memplan::test::op_named(r, "layer1.0.conv1").workspace_bytes == 0);
  CHECK(memplan::test::op_named(r, "layer1.0.conv1").algorithms.empty());
}

TEST_CASE("device presets carry capacity, peak rates and their link", "[zoo][devices]") {
  const std::map<std::string, std::pair<double, std::string>> capacity_and_link{
      {"titanx-maxwell", {12, "pcie3"}}, {"k40c", {12, "pcie3"}},
      {"p100-16gb", {16, "pcie3"}},      {"v100-16gb", {16, "pcie3"}},
      {"v100-32gb", {32, "pcie3"}},      {"v100-16gb-nvlink", {16, "nvlink2"}},
      {"a100-40gb", {40, "pcie4"}},      {"a100-80gb", {80, "pcie4"}},
      {"h100-80gb", {80, "pcie5"}},      {"gh200", {96, "c2c"}},
      {"b200", {180, "pcie5"}},          {"mi300x", {192, "pcie5"}},
  };
  CHECK(zoo::devices().size() == capacity_and_link.size());
  for (const zoo::Device& d : zoo::devices()) {
    CAPTURE(d.name);
    const auto& [gib, link] = capacity_and_link.at(std::string(d.name));
    CHECK(d.link == link);
    // The link's numbers are the simulator's preset of that name (`--link` gives the same).
    const auto preset = sim::find_link_preset(link);
    REQUIRE(preset);
    CHECK(zoo::link_preset(d).name == link);
    const sim::DeviceInfo info = zoo::device_info(d);
    CHECK(static_cast<double>(info.memory_bytes) == gib * (1 << 30));
    CHECK(info.link.h2d_bytes_per_s == preset->link.h2d_bytes_per_s);
    CHECK(info.link.d2h_bytes_per_s == preset->link.d2h_bytes_per_s);
    CHECK(info.link.latency_ns == preset->link.latency_ns);
    CHECK(info.peak_flops_per_s.value() > 1e12);
    CHECK(info.memory_bandwidth_bytes_per_s.value() > 1e11);
    // A machine made from the modeled trace equals one made with `--link` of the same name.
    const sim::Machine from_trace = sim::make_machine(info);
    sim::MachineOverrides what_if;
    what_if.link_name = link;
    const sim::Machine from_flag = sim::make_machine(info, what_if);
    CHECK(from_trace.link.h2d_bytes_per_s == from_flag.link.h2d_bytes_per_s);
    CHECK(from_trace.link.d2h_bytes_per_s == from_flag.link.d2h_bytes_per_s);
    CHECK(from_trace.link.latency_ns == from_flag.link.latency_ns);
  }
  // The numbers themselves, once: ARCHITECTURE.md's bandwidths (tests/core/machine_test.cpp pins
  // the presets), so an A100 trace copies at 32 GB/s with 8 us per copy.
  const sim::DeviceInfo a100 = zoo::device_info(*zoo::find_device("a100-40gb"));
  CHECK(a100.link.h2d_bytes_per_s == 32e9);
  CHECK(a100.link.latency_ns == 8'000);
}

TEST_CASE("device presets carry their vendors' dense tensor-core rates", "[zoo][devices]") {
  // devices.cpp cites each: {FP32 vector, FP32 matrix, TF32, BF16, FP16}, TFLOP/s; 0 = no unit.
  const std::map<std::string, std::vector<double>> rates{
      {"titanx-maxwell", {6.6, 6.6, 0, 0, 0}},
      {"k40c", {4.29, 4.29, 0, 0, 0}},
      {"p100-16gb", {9.3, 9.3, 0, 0, 0}},
      {"v100-16gb", {15.7, 15.7, 0, 0, 125}},
      {"v100-32gb", {15.7, 15.7, 0, 0, 125}},
      {"v100-16gb-nvlink", {15.7, 15.7, 0, 0, 125}},
      {"a100-40gb", {19.5, 19.5, 156, 312, 312}},
      {"a100-80gb", {19.5, 19.5, 156, 312, 312}},
      {"h100-80gb", {67, 67, 494.7, 989.4, 989.4}},
      {"gh200", {67, 67, 494.7, 989.4, 989.4}},
      {"b200", {80, 80, 1100, 2250, 2250}},
      {"mi300x", {81.7, 163.4, 653.7, 1307.4, 1307.4}},
  };
  for (const zoo::Device& d : zoo::devices()) {
    CAPTURE(d.name);
    const std::vector<double>& r = rates.at(std::string(d.name));
    CHECK(d.peak_flops_per_s == Approx(r[0] * 1e12));
    const zoo::Precision precisions[] = {zoo::Precision::kFp32, zoo::Precision::kTf32,
                                         zoo::Precision::kBf16, zoo::Precision::kFp16};
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(zoo::matrix_flops_per_s(d, precisions[i]) == Approx(r[i + 1] * 1e12));
    }
  }
  CHECK(zoo::precision_names(*zoo::find_device("v100-16gb")) == "fp32, fp16");
  CHECK(zoo::precision_names(*zoo::find_device("mi300x")) == "fp32, tf32, bf16, fp16");
  const zoo::Device& b200 = *zoo::find_device("b200");
  CHECK(b200.memory_bytes_per_s == 8000e9);
  const zoo::Device& mi300x = *zoo::find_device("mi300x");
  CHECK(mi300x.memory_bytes_per_s == 5300e9);
}

TEST_CASE("generic ops are priced as the kernels they run", "[zoo][cost]") {
  // Note [Generic ops' kernels]: 1,000,000,000 bytes through each, no flops, on an H100 (3350
  // GB/s). An elementwise stream at add's 0.90 of the bandwidth: 1e9 / 3.015e12 s = 331,675 ns,
  // + 2,500 per kernel = 334,175 ns in either phase. RMSNorm at layer norm's 0.55 forward (1e9 /
  // 1.8425e12 s = 542,741 ns) and 0.50 backward (597,015 ns). Any other generic op (ViT's patch
  // tokens): the generic 0.50 both ways, 599,515 ns.
  const zoo::Device& h100 = *zoo::find_device("h100-80gb");
  const zoo::CostModel model(h100, zoo::Precision::kBf16);
  const auto priced = [&](std::string_view name, sim::Phase phase) {
    sim::Op op;
    op.layer = sim::LayerType::named(name);
    op.phase = phase;
    op.flops = 0.0;
    op.bytes_moved = 1'000'000'000;
    return model.duration(op);
  };
  for (const sim::Phase phase : {sim::Phase::kForward, sim::Phase::kBackward}) {
    for (const char* elementwise :
         {"cast", "pow", "tanh", "mul", "silu", "rotary_embedding", "repeat_kv"}) {
      CAPTURE(elementwise);
      CHECK(priced(elementwise, phase) == 334'175);
    }
    CHECK(priced("patch_tokens", phase) == 599'515);
  }
  CHECK(priced("rms_norm", sim::Phase::kForward) == 545'241);
  CHECK(priced("rms_norm", sim::Phase::kBackward) == 599'515);
}
