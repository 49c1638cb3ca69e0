#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "search/policies/gist.hpp"
#include "tests/search/policy_workloads.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

TEST_CASE("Gist encodings apply only where their consumer pattern holds", "[search][gist]") {
  // relu1_out feeds a max-pool, relu2_out a convolution, relu3_out a linear layer; pool1_out and
  // fc_out are not ReLU outputs. Maps of 5 to 100 KB: every encoding frees some 512-byte units.
  const Workload w =
      layer_chain({conv("conv1", 100'000), relu("relu1", 100'000), pool("pool1", 50'000),
                   conv("conv2", 100'000), relu("relu2", 100'000), conv("conv3", 100'000),
                   relu("relu3", 100'000), linear("fc", 5'000), loss("loss")});
  const NetworkView view(w);
  const Plan incore = in_core_plan(w);
  auto labels = [&](const Plan& p) {
    std::string out;
    for (const Decision& d : p.decisions)
      out += w.tensor(d.tensor).name + "=" + action_label(d.action, d.encoding) + " ";
    return out;
  };
  CHECK(labels(
            apply_encodings(incore, view, parse_encoding_options("binarize,sparse", "--encode"))) ==
        "relu1_out=encode:binarize pool1_out=keep relu2_out=encode:sparse relu3_out=keep "
        "fc_out=keep ");
  CHECK(labels(apply_encodings(incore, view, parse_encoding_options("all", "--encode"))) ==
        "relu1_out=encode:binarize pool1_out=encode:fp16 relu2_out=encode:sparse "
        "relu3_out=encode:fp16 "
        "fc_out=encode:fp16 ");
  CHECK(labels(apply_encodings(incore, view, parse_encoding_options("fp8", "--encode"))) ==
        "relu1_out=encode:fp8 pool1_out=encode:fp8 relu2_out=encode:fp8 relu3_out=encode:fp8 "
        "fc_out=encode:fp8 ");
  // Swapped or recomputed maps are left alone.
  const Plan swapped = swap_all_plan(w);
  CHECK(apply_encodings(swapped, view, parse_encoding_options("all", "--encode")).decisions ==
        swapped.decisions);
  CHECK(apply_encodings(incore, view, parse_encoding_options("all", "--encode")).policy ==
        "in-core+gist");
}

TEST_CASE("Gist leaves a map alone where encoding frees no arena unit", "[search][gist]") {
  // The arena rounds every buffer up to 512 bytes. relu1_out (1000 B, two units) binarized is 32 B
  // (one unit): encoded. pool1_out (500 B) narrowed to fp16 is 250 B: one unit either way, as are
  // fc_out (100 B) and a 4-byte count such as nll_loss's total weight: kept as they are.
  // relu2_out (1000 B, 250 values) sparse at density 0.5 needs 125 values x 5 bytes plus a block
  // header, 627 B: two units still, so the next encoding that saves is taken, fp16 (500 B, one
  // unit), as for relu3_out.
  const Workload w =
      layer_chain({conv("conv1"), relu("relu1"), pool("pool1"), conv("conv2"), relu("relu2"),
                   conv("conv3"), relu("relu3"), linear("fc"), loss("loss")});
  const NetworkView view(w);
  std::string out;
  for (const Decision& d :
       apply_encodings(in_core_plan(w), view, parse_encoding_options("all", "--encode")).decisions)
    out += w.tensor(d.tensor).name + "=" + action_label(d.action, d.encoding) + " ";
  CHECK(out ==
        "relu1_out=encode:binarize pool1_out=keep relu2_out=encode:fp16 relu3_out=encode:fp16 "
        "fc_out=keep ");
}

TEST_CASE("bad --encode lists are refused with the flag named", "[search][gist]") {
  CHECK_THROWS_WITH(parse_encoding_options("binarize,zip", "--encode"),
                    Catch::Contains("--encode") && Catch::Contains("zip"));
  CHECK_THROWS_AS(parse_encoding_options("fp16,fp8", "--encode"), InputError);
}

TEST_CASE("Gist's precision reduction leaves maps that are not float32 alone", "[search][gist]") {
  // resnet_tiny's max-pool writes int64 indices, a feature map that backward reads.
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const NetworkView view(w);
  for (const char* list : {"fp16", "fp10", "fp8", "all"}) {
    CAPTURE(list);
    const Plan plan =
        apply_encodings(in_core_plan(w), view, parse_encoding_options(list, "--encode"));
    std::size_t narrowed = 0;
    for (const Decision& d : plan.decisions) {
      const Tensor& t = w.tensor(d.tensor);
      CAPTURE(t.name);
      if (t.dtype != "float32") {
        CHECK(d.action == Action::kKeep);
      } else {
        narrowed += d.action == Action::kEncode ? 1 : 0;
      }
    }
    CHECK(narrowed > 0);
    CHECK_NOTHROW(validate_plan(plan, w, "gist"));
  }
}

TEST_CASE("Gist does not narrow or binarize a map that a recompute's re-run op reads",
          "[search][gist]") {
  // resnet_tiny with relu3_out recomputed: regenerating it re-runs relu3, add1 and conv3, which
  // read relu1_out and relu2_out in forward.
  const Workload w = read_trace(source_path("traces/resnet_tiny.json"));
  const NetworkView view(w);
  Plan plan = in_core_plan(w);
  for (Decision& d : plan.decisions) {
    if (w.tensor(d.tensor).name == "relu3_out") d.action = Action::kRecompute;
  }
  auto action_of = [&](const Plan& p, const std::string& name) {
    for (const Decision& d : p.decisions) {
      if (w.tensor(d.tensor).name == name) return action_label(d.action, d.encoding);
    }
    return std::string("?");
  };
  const Plan narrowed = apply_encodings(plan, view, parse_encoding_options("fp8", "--encode"));
  CHECK(action_of(narrowed, "relu1_out") == "keep");
  CHECK(action_of(narrowed, "relu2_out") == "keep");
  // pool_out is read in forward by fc only, but it is 512 bytes: one arena unit, narrowed or not.
  CHECK(action_of(narrowed, "pool_out") == "keep");
  CHECK_NOTHROW(validate_plan(narrowed, w, "gist"));
  // Sparse is lossless: the re-run conv3 reads relu2_out exactly.
  const Plan all = apply_encodings(plan, view, parse_encoding_options("all", "--encode"));
  CHECK(action_of(all, "relu2_out") == "encode:sparse");
  CHECK(action_of(all, "relu1_out") == "encode:sparse");
  CHECK_NOTHROW(validate_plan(all, w, "gist"));
}
