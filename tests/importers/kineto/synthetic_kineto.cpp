#include "tests/importers/kineto/synthetic_kineto.hpp"

#include <filesystem>
#include <fstream>
#include <vector>

#include "importers/kineto/kineto_trace.hpp"
#include "tests/support/run_command.hpp"

namespace memplan::test {
namespace {

using nlohmann::json;

constexpr std::int64_t kKernelUs = 7;  // every kernel runs 7 us

struct OpSpec {
  std::string name;
  json dims;
  json types;
  int seq;  // -1: none
  bool backward = false;
  int kernels = 1;
  std::vector<std::string> children;  // child op names (no kernels)
};

OpSpec spec(std::string name, json dims, json types, int seq, bool backward = false,
            int kernels = 1, std::vector<std::string> children = {}) {
  OpSpec s;
  s.name = std::move(name);
  s.dims = std::move(dims);
  s.types = std::move(types);
  s.seq = seq;
  s.backward = backward;
  s.kernels = kernels;
  s.children = std::move(children);
  return s;
}

std::vector<OpSpec> step_ops() {
  const json f = "float";
  return {
      spec("aten::conv2d", json{{2, 3, 8, 8}, {4, 3, 3, 3}, json::array(), json::array()},
           json{f, f, "", ""}, 10),
      spec("aten::add", json{json::array(), json::array(), json::array()},
           json{"long int", "Scalar", "Scalar"}, 11),
      spec("aten::batch_norm", json{{2, 4, 8, 8}, {4}, {4}, {4}, {4}}, json{f, f, f, f, f}, 11),
      spec("aten::relu_", json{{2, 4, 8, 8}}, json{f}, 12),
      spec("aten::conv2d", json{{2, 4, 8, 8}, {4, 4, 3, 3}, json::array()}, json{f, f, ""}, 13),
      spec("aten::batch_norm", json{{2, 4, 8, 8}, {4}, {4}, {4}, {4}}, json{f, f, f, f, f}, 14),
      spec("aten::add_", json{{2, 4, 8, 8}, {2, 4, 8, 8}, json::array()}, json{f, f, "Scalar"}, 15),
      spec("aten::relu_", json{{2, 4, 8, 8}}, json{f}, 16),
      spec("aten::adaptive_avg_pool2d", json{{2, 4, 8, 8}, json::array()}, json{f, ""}, 17),
      spec("aten::flatten", json{{2, 4, 1, 1}, json::array(), json::array()}, json{f, "", ""}, 18,
           false, 0),
      spec("aten::linear", json{{2, 4}, {10, 4}, {10}}, json{f, f, f}, 19),
      spec("aten::cross_entropy_loss", json{{2, 10}, {2}}, json{f, "long int"}, 20),
      spec("Optimizer.zero_grad#SGD.zero_grad", json::array(), json::array(), -1, false, 1,
           {"aten::zero_"}),
      spec("NllLossBackward0", json{json::array()}, json::array(), 20, true),
      spec("AddmmBackward0", json{{2, 10}}, json::array(), 19, true),
      spec("torch::autograd::AccumulateGrad", json{{10, 4}}, json::array(), -1, true),
      spec("ViewBackward0", json{{2, 4}}, json::array(), 18, true, 0),
      spec("MeanBackward1", json{{2, 4, 1, 1}}, json::array(), 17, true),
      spec("ReluBackward0", json{{2, 4, 8, 8}}, json::array(), 16, true),
      spec("AddBackward0", json{{2, 4, 8, 8}}, json::array(), 15, true, 0),
      spec("CudnnBatchNormBackward0", json{{2, 4, 8, 8}}, json::array(), 14, true),
      spec("ConvolutionBackward0", json{{2, 4, 8, 8}}, json::array(), 13, true, 2),
      spec("ReluBackward0", json{{2, 4, 8, 8}}, json::array(), 12, true),
      spec("CudnnBatchNormBackward0", json{{2, 4, 8, 8}}, json::array(), 11, true),
      spec("ConvolutionBackward0", json{{2, 4, 8, 8}}, json::array(), 10, true, 2),
      spec("Optimizer.step#SGD.step", json::array(), json::array(), -1, false, 3,
           {"aten::mul_", "aten::add_"}),
  };
}

}  // namespace

std::int64_t synthetic_step_kernel_ns() {
  std::int64_t n = 0;
  for (const auto& op : step_ops()) n += op.kernels * kKernelUs * 1000;
  return n;
}

json synthetic_kineto(const SyntheticOptions& o) {
  const bool cur = o.current_format;
  const std::string cpu_cat = cur ? "cpu_op" : "Operator";
  auto tid = [&](int t) { return cur ? json(t) : json(std::to_string(t)); };
  json events = json::array();
  std::int64_t t = 1000;      // host clock, us
  std::int64_t gpu_t = 1000;  // device clock, us
  std::int64_t ext = 1;
  std::int64_t corr = 100;
  std::int64_t allocated = 500000;  // weights etc. before the trace
  // `addr`: the allocator's address (a free names the address of the allocation it frees).
  auto memory = [&](std::int64_t ts, int thread, std::int64_t bytes, std::int64_t addr) {
    if (!o.memory) return;
    allocated += bytes;
    json args = {{"Device Type", o.gpu ? 1 : 0}, {"Device Id", o.gpu ? 0 : -1}, {"Bytes", bytes}};
    if (cur) {
      args["Addr"] = addr;
      args["Total Allocated"] = allocated;
      args["Total Reserved"] = 2097152;
    }
    events.push_back({{"ph", "i"},
                      {"s", "t"},
                      {"name", "[memory]"},
                      {"pid", 1},
                      {"tid", tid(thread)},
                      {"ts", ts},
                      {"args", args}});
  };
  for (int step = 1; step <= o.steps; ++step) {
    const std::int64_t step_start = t;
    t += 5;
    if (static_cast<std::size_t>(step) <= o.step_idle_us.size()) t += o.step_idle_us[step - 1];
    for (const auto& op : step_ops()) {
      const int thread = op.backward ? 2 : 1;
      const std::int64_t start = t;
      const std::int64_t dur = 40;
      json args = {{"External id", ext}};
      if (!op.dims.empty()) args["Input Dims"] = op.dims;
      if (!op.types.empty()) args["Input type"] = op.types;
      if (op.seq >= 0) args["Sequence number"] = op.seq;
      if (op.backward) args["Fwd thread id"] = 1;
      const std::string name =
          op.backward && cur ? "autograd::engine::evaluate_function: " + op.name : op.name;
      events.push_back({{"ph", "X"},
                        {"cat", cpu_cat},
                        {"name", name},
                        {"pid", 1},
                        {"tid", tid(thread)},
                        {"ts", start},
                        {"dur", dur},
                        {"args", args}});
      std::int64_t child_t = start + 1;
      for (const auto& child : op.children) {
        events.push_back({{"ph", "X"},
                          {"cat", cpu_cat},
                          {"name", child},
                          {"pid", 1},
                          {"tid", tid(thread)},
                          {"ts", child_t},
                          {"dur", 2},
                          {"args", {{"External id", ext + 1000}}}});
        child_t += 3;
      }
      // A 256-byte scratch buffer allocated and freed inside every op, plus an output that lives
      // on (a backward op frees a 64-byte buffer allocated before the trace).
      memory(start + 20, thread, 256, 140000000 + start);
      memory(start + 21, thread, -256, 140000000 + start);
      memory(start + 22, thread, op.backward ? -64 : 64, 150000000 + start);
      if (o.gpu) {
        for (int k = 0; k < op.kernels; ++k) {
          const std::int64_t launch = start + 25 + k * 4;
          const std::int64_t c = corr++;
          json rt_args = {{"correlation", c}, {cur ? "External id" : "external id", ext}};
          events.push_back({{"ph", "X"},
                            {"cat", cur ? "cuda_runtime" : "Runtime"},
                            {"name", "cudaLaunchKernel"},
                            {"pid", 1},
                            {"tid", tid(thread)},
                            {"ts", launch},
                            {"dur", 3},
                            {"args", rt_args}});
          gpu_t = std::max(gpu_t, launch + 5);
          json k_args = {{"stream", 7}, {"device", 0}};
          if (!o.flows_only) {
            k_args["correlation"] = c;
            k_args[cur ? "External id" : "external id"] = ext;
          }
          events.push_back({{"ph", "X"},
                            {"cat", cur ? "kernel" : "Kernel"},
                            {"name", "void kernel_" + std::to_string(k) + "()"},
                            {"pid", 0},
                            {"tid", cur ? json(7) : json("stream 7")},
                            {"ts", gpu_t},
                            {"dur", kKernelUs},
                            {"args", k_args}});
          if (cur) {
            events.push_back({{"ph", "s"},
                              {"id", c},
                              {"pid", 1},
                              {"tid", tid(thread)},
                              {"ts", launch},
                              {"cat", "ac2g"},
                              {"name", "ac2g"}});
            events.push_back({{"ph", "f"},
                              {"id", c},
                              {"pid", 0},
                              {"tid", cur ? json(7) : json("stream 7")},
                              {"ts", gpu_t},
                              {"cat", "ac2g"},
                              {"name", "ac2g"},
                              {"bp", "e"}});
          }
          gpu_t += kKernelUs + 1;
        }
      }
      ++ext;
      t += dur + 10;
    }
    // The step ends after its last kernel, as when the optimizer synchronises.
    t = std::max(t, gpu_t + 5);
    events.push_back({{"ph", "X"},
                      {"cat", cur ? "user_annotation" : "Operator"},
                      {"name", "ProfilerStep#" + std::to_string(step)},
                      {"pid", 1},
                      {"tid", tid(1)},
                      {"ts", step_start},
                      {"dur", t - step_start},
                      {"args", {{"External id", 0}}}});
    t += 20;
  }
  json doc = {{"schemaVersion", 1}, {"traceEvents", events}};
  if (o.gpu)
    doc["deviceProperties"] =
        json::array({{{"id", 0}, {"name", "Test GPU"}, {"totalGlobalMem", 17179869184}}});
  return doc;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::path(temp_dir()) / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

importers::ImportResult import_json(const nlohmann::json& doc,
                                    const importers::ImportOptions& options) {
  const auto trace = importers::parse_kineto_trace(doc.dump(), "synthetic.json");
  return importers::import_kineto(trace, options, "synthetic.json");
}

}  // namespace memplan::test
