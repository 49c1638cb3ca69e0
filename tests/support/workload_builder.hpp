#pragma once
// WorkloadBuilder: small hand-built workloads for scenario and property tests. Tensors and ops get
// ids in creation order; build() validates, so a test cannot run on a malformed workload.
#include <string>
#include <vector>

#include "core/workload.hpp"

namespace memplan::test {

class WorkloadBuilder {
 public:
  explicit WorkloadBuilder(sim::Bytes memory_bytes = sim::Bytes{1} << 40);

  sim::TensorId input(const std::string& name, sim::Bytes bytes);
  sim::TensorId parameter(const std::string& name, sim::Bytes bytes);
  /// An optimizer state from before the step (a momentum, Adam's moments).
  sim::TensorId optimizer_state(const std::string& name, sim::Bytes bytes);
  /// An op of `phase` reading `inputs` and writing one new tensor per entry of `outputs`
  /// (name, bytes); returns the op id. Outputs are activations in forward, gradients otherwise.
  sim::OpId op(const std::string& name, const std::string& layer, sim::Phase phase,
               const std::vector<sim::TensorId>& inputs,
               const std::vector<std::pair<std::string, sim::Bytes>>& outputs,
               sim::Nanoseconds duration_ns, sim::Bytes workspace_bytes = 0);
  /// Forward op with one output; returns the output tensor.
  sim::TensorId forward(const std::string& name, const std::vector<sim::TensorId>& inputs,
                        sim::Bytes bytes, sim::Nanoseconds duration_ns,
                        const std::string& layer = "linear");
  /// Forward op writing its output over `base` (an in-place ReLU); returns the output tensor.
  sim::TensorId forward_in_place(const std::string& name, sim::TensorId base,
                                 sim::Nanoseconds duration_ns, const std::string& layer = "relu");
  /// Backward op with one gradient output; returns the output tensor.
  sim::TensorId backward(const std::string& name, const std::vector<sim::TensorId>& inputs,
                         sim::Bytes bytes, sim::Nanoseconds duration_ns,
                         const std::string& layer = "linear");
  sim::OpId last_op() const { return static_cast<sim::OpId>(w_.ops.size()) - 1; }
  sim::Workload& workload() { return w_; }

  /// Validates and returns the workload.
  sim::Workload build() const;

 private:
  sim::TensorId tensor(const std::string& name, sim::Bytes bytes, sim::TensorKind kind,
                       sim::OpId producer);
  sim::Workload w_;
};

/// A step of two micro-batches (gradient accumulation), as memplan.torch.capture records one:
///   forward 1:  f1 {x, w} -> f1_out (`map_bytes`, 1000 ns), h1 {f1_out, w} -> h1_out (512, 2000)
///   backward 1: gh1 {h1_out} -> gh1_out (512, 1000), gf1 {gh1_out, f1_out} -> gf1_out (w's
///               gradient, 512 bytes, 1500)
///   forward 2 and backward 2: the same ops with 2 for 1 (f2 reads x and w again); gf2 adds into
///               w's gradient in place (gf2_out in_place_of gf1_out, AccumulateGrad's add_)
///   update:     sgd {w, gf2_out} (500 ns)
/// x is a 512-byte input, w a 512-byte parameter (512 bytes: the allocator's block size).
sim::Workload two_micro_batches(sim::Bytes map_bytes);

}  // namespace memplan::test
