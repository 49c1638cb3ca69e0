#include "tests/io/bad_plans.hpp"

#include <fmt/format.h>

#include "core/plan.hpp"

namespace memplan::test {

std::string plan_text(const sim::Workload& w, const std::string& maps_json) {
  return fmt::format(R"({{"format":"memplan-plan","version":1,"policy":"test",)"
                     R"("workload":{{"fingerprint":"{:016x}","ops":{},"tensors":{}}},"maps":{}}})",
                     sim::workload_fingerprint(w), w.ops.size(), w.tensors.size(), maps_json);
}

// A plan with no map decided and `extra` fields (host placement) after "maps".
std::string placement_text(const sim::Workload& w, const std::string& extra) {
  std::string text = plan_text(w, "[]");
  text.insert(text.size() - 1, "," + extra);
  return text;
}

std::vector<BadPlan> bad_plans(const sim::Workload& w) {
  std::vector<BadPlan> cases = {
      {"not json", "{\"format\": ", "not valid JSON"},
      {"wrong format",
       R"({"format":"memplan-trace","version":1,"workload":{"fingerprint":"0"},"maps":[]})",
       "expected \"memplan-plan\""},
      {"future version",
       R"({"format":"memplan-plan","version":7,"workload":{"fingerprint":"0"},"maps":[]})",
       "unsupported plan format version 7"},
      {"another workload",
       R"({"format":"memplan-plan","version":1,"workload":{"fingerprint":"0123456789abcdef"},"maps":[]})",
       "made for another workload"},
      {"bad fingerprint",
       R"({"format":"memplan-plan","version":1,"workload":{"fingerprint":"xyz"},"maps":[]})",
       "expected 16 hexadecimal digits"},
      {"unknown tensor", plan_text(w, R"([{"tensor":"nope","action":"swap"}])"),
       "unknown tensor 'nope'"},
      {"unknown tensor id", plan_text(w, R"([{"tensor":99,"action":"swap"}])"),
       "unknown tensor id 99"},
      {"not a feature map", plan_text(w, R"([{"tensor":"x","action":"swap"}])"),
       "is not a feature map"},
      {"named twice",
       plan_text(w, R"([{"tensor":"pool_out","action":"swap"},{"tensor":17,"action":"keep"}])"),
       "named twice"},
      {"unknown action", plan_text(w, R"([{"tensor":"pool_out","action":"squash"}])"),
       "unknown action 'squash'"},
      {"binarize not before a max-pool",
       plan_text(w, R"([{"tensor":"relu1_out","action":"encode:binarize"}])"),
       "encode:binarize needs a ReLU output that a max-pool reads"},
      {"sparse not a relu", plan_text(w, R"([{"tensor":"pool_out","action":"encode:sparse"}])"),
       "encode:sparse needs a ReLU output that a convolution reads"},
      {"precision reduction of int64 indices",
       plan_text(w, R"([{"tensor":"pool_indices","action":"encode:fp8"}])"),
       "encode:fp8 needs a float32 map, this one is int64"},
      {"prefetch for a kept map",
       plan_text(w, R"([{"tensor":"pool_out","action":"keep","prefetch_before":"fc_bwd"}])"),
       "prefetch_before is for swapped and recomputed maps only"},
      {"issue point of a map recomputed per use",
       plan_text(w, R"([{"tensor":"pool_out","action":"recompute","per_use":true,
                         "prefetch_before":"fc_bwd"}])"),
       "a map recomputed per use has no issue point (prefetch_before)"},
      {"recompute issued too early",
       plan_text(w, R"([{"tensor":"relu1_out","action":"recompute","prefetch_before":"conv1"}])"),
       "prefetch_before must be an op after the last forward use"},
      {"prefetch too early",
       plan_text(w, R"([{"tensor":"relu1_out","action":"swap","prefetch_before":"conv1"}])"),
       "prefetch_before must be an op after the last forward use"},
      {"release for a recompute",
       plan_text(w, R"([{"tensor":"pool_out","action":"recompute","release_before":"fc_bwd"}])"),
       "release_before is for swapped maps only"},
      {"release after the prefetch",
       plan_text(w, R"([{"tensor":"relu1_out","action":"swap","prefetch_before":"conv2_bwd",
                         "release_before":"relu1_bwd"}])"),
       "release_before must be an op after the last forward use (op 5 'add1') and no later than "
       "the prefetch point (op 16 'conv2_bwd')"},
      {"release at the last forward use",
       plan_text(w, R"([{"tensor":"relu1_out","action":"swap","release_before":"add1"}])"),
       "release_before must be an op after the last forward use"},
      {"prefetch unknown op",
       plan_text(w, R"([{"tensor":"relu1_out","action":"swap","prefetch_before":"zzz"}])"),
       "unknown op 'zzz'"},
      {"unknown field", plan_text(w, R"([{"tensor":"relu1_out","action":"swap","when":3}])"),
       "unknown field 'when'"},
      {"missing action", plan_text(w, R"([{"tensor":"relu1_out"}])"), "missing field 'action'"},
      {"a feature map placed on the host",
       placement_text(w, R"("tensors":[{"tensor":"relu1_out","placement":"host"}])"),
       "tensor 'relu1_out' cannot be placed on the host: a tensor of kind activation"},
      {"a gradient no update reads placed on the host",
       placement_text(w, R"("tensors":[{"tensor":"d_logits","placement":"host"}])"),
       "only a gradient written by a backward op and read by an update op goes to the host"},
      {"unknown placement",
       placement_text(w, R"("tensors":[{"tensor":"w_fc","placement":"disk"}])"),
       "unknown placement 'disk' (host, device)"},
      {"host update with momenta on the device", placement_text(w, R"("update":"host")"),
       "update op 'sgd' runs on the host but reads 'g_conv1' (gradient) on the device"},
      {"unknown update placement", placement_text(w, R"("update":"cpu")"),
       "unknown update placement 'cpu' (host, device)"},
      // x is read by conv1 [op 0] and conv1_bwd [op 19]: two groups; the backward one may be
      // prefetched before relu1 [op 1] to conv1_bwd.
      {"a prefetch of a tensor on the device",
       placement_text(w, R"("tensors":[{"tensor":"x","placement":"device","prefetches":)"
                         R"([{"first_use":"conv1_bwd","prefetch_before":"conv1_bwd"}]}])"),
       "tensor 'x' is on the device: only a host-placed tensor's uses are prefetched"},
      {"a prefetch naming no group",
       placement_text(w, R"("tensors":[{"tensor":"x","placement":"host","prefetches":)"
                         R"([{"first_use":"relu1_bwd","prefetch_before":"relu1_bwd"}]}])"),
       "op 18 'relu1_bwd' is not the first use of a prefetched group of uses of 'x' (those are: "
       "op 0 'conv1', op 19 'conv1_bwd')"},
      {"a prefetch before the previous copy is dropped",
       placement_text(w, R"("tensors":[{"tensor":"x","placement":"host","prefetches":)"
                         R"([{"first_use":"conv1_bwd","prefetch_before":"conv1"}]}])"),
       "the prefetch of 'x' for its uses from op 19 'conv1_bwd' must be before an op from op 1 "
       "'relu1' (after the previous device copy is dropped) to that first use"},
      {"a prefetch after the group's first use",
       placement_text(w, R"("tensors":[{"tensor":"w_fc","placement":"host","prefetches":)"
                         R"([{"first_use":"fc_bwd","prefetch_before":"pool_bwd"}]}])"),
       "the prefetch of 'w_fc' for its uses from op 11 'fc_bwd' must be before an op from op 9 "
       "'loss'"},
      {"a group named twice",
       placement_text(w, R"("tensors":[{"tensor":"x","placement":"host","prefetches":)"
                         R"([{"first_use":"conv1_bwd","prefetch_before":"conv1_bwd"},)"
                         R"({"first_use":19,"prefetch_before":"relu1_bwd"}]}])"),
       "the group of uses from op 'conv1_bwd' is named twice"},
      {"a prefetch with an unknown field",
       placement_text(w, R"("tensors":[{"tensor":"x","placement":"host","prefetches":)"
                         R"([{"first_use":"conv1_bwd","before":"conv1_bwd"}]}])"),
       "unknown field 'before'"},
  };
  return cases;
}

}  // namespace memplan::test
