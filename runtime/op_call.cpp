#include "runtime/op_call.hpp"

#include <algorithm>
#include <string>

#include "core/check.hpp"
#include "core/input_error.hpp"
#include "runtime/backend_error.hpp"

namespace memplan::runtime {

std::int64_t elements(const sim::Tensor& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  return n;
}

std::string op_place(const sim::Op& op) {
  return "op '" + op.name + "' (" + op.layer.str() + ", " + std::string(sim::to_string(op.phase)) +
         ")";
}

void fail(const sim::Op& op, std::string_view what) {
  throw BackendError(op_place(op) + ": " + std::string(what));
}

std::size_t update_group_size(const sim::Workload& workload, const sim::Op& op) {
  const bool adam = op.layer == sim::Layer::kAdam;
  MEMPLAN_CHECK(adam || op.layer == sim::Layer::kSgd, "an update op with a kernel");
  const std::size_t groups = adam ? 4 : 3;
  const std::string_view reads =
      adam ? "params, grads, exp_avgs and exp_avg_sqs" : "params, grads and momentum buffers";
  const std::string_view each =
      adam ? "param, grad, exp_avg and exp_avg_sq" : "param, grad and momentum";
  if (op.inputs.size() % groups != 0) {
    fail(op, std::string(op.layer.name()) + " reads " + std::string(reads) + " (" +
                 std::to_string(groups) + " groups)");
  }
  const std::size_t k = op.inputs.size() / groups;
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t n = elements(workload.tensor(op.inputs[i]));
    for (std::size_t group = 1; group < groups; ++group) {
      if (elements(workload.tensor(op.inputs[group * k + i])) != n)
        fail(op, std::string(each) + " " + std::to_string(i) + " differ in size");
    }
  }
  return k;
}

void no_kernel(const sim::Op& op, std::string_view backend) {
  throw sim::InputError(op_place(op),
                        "no " + std::string(backend) + " kernel for this " +
                            (op.phase == sim::Phase::kUpdate ? "update" : "layer type") +
                            (op.layer.generic() ? " (a generic op)" : ""));
}

void refuse_unsupported(const sim::Op& op, std::string_view backend) {
  if (op.layer == sim::Layer::kAttentionScores && attr(op, "causal", 0, 1) != 1) {
    throw sim::InputError(op_place(op), "no " + std::string(backend) +
                                            " kernel for attention without the causal mask "
                                            "(causal 0)");
  }
}

std::int64_t attr(const sim::Op& op, const char* name, std::size_t i, std::int64_t fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  const auto& v = it->second;
  return static_cast<std::int64_t>(v[std::min(i, v.size() - 1)]);
}

float attr_f(const sim::Op& op, const char* name, float fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  return static_cast<float>(it->second.front());
}

double attr_d(const sim::Op& op, const char* name, std::size_t i, double fallback) {
  const auto it = op.attributes.find(name);
  if (it == op.attributes.end() || it->second.empty()) return fallback;
  const auto& v = it->second;
  return v[std::min(i, v.size() - 1)];
}

GradOutputs OpCall::grad_outputs() const {
  const std::size_t n = op.outputs.size();
  if (op.inputs.size() != 3 || n == 0 || n > 3) {
    fail(op.layer.str() + " backward reads dy, x and w, writes [dx,] dw [, db]");
  }
  GradOutputs has;
  if (op.differentiates != sim::kNoOp) {
    has.db = workload.op(op.differentiates).inputs.size() == 3;
  } else {
    has.db = n >= 2 && workload.tensor(op.outputs.back()).shape.size() == 1;
  }
  const std::size_t without_dx = has.db ? 2 : 1;
  if (n != without_dx && n != without_dx + 1) fail("output count does not match [dx,] dw [, db]");
  has.dx = n == without_dx + 1;
  return has;
}

std::pair<std::int64_t, std::int64_t> OpCall::rows_of(const sim::Tensor& t) const {
  if (t.shape.empty() || t.shape.back() <= 0) fail("needs a non-empty last axis");
  return {elements(t) / t.shape.back(), t.shape.back()};
}

std::uint64_t dropout_seed(sim::OpId forward) {
  return 0x6d656d706c616eULL ^ (static_cast<std::uint64_t>(forward) * 0x9e3779b97f4a7c15ULL);
}

}  // namespace memplan::runtime
