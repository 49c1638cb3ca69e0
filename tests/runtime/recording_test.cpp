// runtime::record against a backend whose library searches algorithms (what the CUDA backend's
// cuDNN search reports, given here by hand over the host backend, so that this runs without a
// GPU): the found ops' workspaces become the fastest algorithm's, their only alternative is the
// memory-optimal one at the measured time plus the library's difference, the device is sized for
// the new workspaces; a backend that finds nothing (the host) keeps the trace's alternatives at
// the op's measured time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "host_backend/host_backend.hpp"
#include "io/trace_io.hpp"
#include "runtime/recording.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace mp = memplan;

namespace {

mp::sim::Workload resnet_tiny() {
  return mp::sim::read_trace(std::string(MEMPLAN_SOURCE_DIR) + "/traces/resnet_tiny.json");
}

mp::sim::OpId op_named(const mp::sim::Workload& w, const std::string& name) {
  for (const mp::sim::Op& op : w.ops) {
    if (op.name == name) return op.id;
  }
  FAIL("no op " << name);
  return mp::sim::kNoOp;
}

/// The host backend, with a fixed algorithm search.
class SearchingBackend final : public mp::runtime::Backend {
 public:
  explicit SearchingBackend(std::map<mp::sim::OpId, mp::runtime::FoundAlgorithms> found)
      : found_(std::move(found)) {}
  [[nodiscard]] std::string name() const override { return "searching"; }
  [[nodiscard]] std::unique_ptr<mp::runtime::Device> make_device(
      mp::sim::Bytes capacity_bytes, std::uint64_t seed,
      mp::sim::AllocatorModel allocator) const override {
    return host_.make_device(capacity_bytes, seed, allocator);
  }
  [[nodiscard]] mp::sim::Link measure_link() const override { return host_.measure_link(); }
  [[nodiscard]] std::map<mp::sim::OpId, mp::runtime::FoundAlgorithms> find_algorithms(
      const mp::sim::Workload&) const override {
    return found_;
  }

 private:
  mp::host_backend::HostBackend host_;
  std::map<mp::sim::OpId, mp::runtime::FoundAlgorithms> found_;
};

}  // namespace

TEST_CASE("a recording carries the algorithms the backend's library found", "[runtime][record]") {
  const mp::sim::Workload w = resnet_tiny();
  const mp::sim::OpId conv2 = op_named(w, "conv2");          // workspace 4096, memory_optimal 0
  const mp::sim::OpId conv2_bwd = op_named(w, "conv2_bwd");  // likewise
  const mp::sim::OpId conv3 = op_named(w, "conv3");          // no workspace, no alternative
  REQUIRE(w.op(conv2).algorithms.size() == 1);
  REQUIRE(w.op(conv3).algorithms.empty());

  std::map<mp::sim::OpId, mp::runtime::FoundAlgorithms> found;
  found[conv2] = {{1 << 20, 5'000}, {512, 9'000}};  // the fastest needs 1 MiB
  found[conv3] = {{2048, 3'000}, {2048, 3'000}};    // one algorithm is both
  mp::runtime::RecordOptions options;
  options.warmup = 0;
  const mp::runtime::Recording r = mp::runtime::record(SearchingBackend(found), w, options);
  const mp::sim::Workload& got = r.workload;

  const mp::sim::Op& c2 = got.op(conv2);
  CHECK(c2.workspace_bytes == 1 << 20);
  REQUIRE(c2.algorithms.size() == 1);
  CHECK(c2.algorithms[0].name == "memory_optimal");
  CHECK(c2.algorithms[0].workspace_bytes == 512);
  CHECK(c2.algorithms[0].duration_ns == c2.duration_ns + 4'000);

  const mp::sim::Op& c3 = got.op(conv3);
  CHECK(c3.workspace_bytes == 2048);
  CHECK(c3.algorithms.empty());  // nothing smaller to offer

  // Not searched: the trace's workspace and alternative, at the op's measured time.
  const mp::sim::Op& b2 = got.op(conv2_bwd);
  CHECK(b2.workspace_bytes == w.op(conv2_bwd).workspace_bytes);
  REQUIRE(b2.algorithms.size() == 1);
  CHECK(b2.algorithms[0].workspace_bytes == 0);
  CHECK(b2.algorithms[0].duration_ns == b2.duration_ns);

  // The recorded device holds the step with the fastest algorithms' workspaces.
  const mp::sim::Program program = mp::sim::lower(got, mp::sim::in_core_plan(got));
  CHECK(r.peak_reserved_bytes == mp::sim::capacity_to_run(program, mp::sim::Machine{}));
  CHECK(got.device.memory_bytes >= (1 << 20));
  CHECK(got.provenance.note.find("2 ops run the fastest algorithm") != std::string::npos);
  // It is a valid trace: written and read back unchanged.
  CHECK(mp::sim::parse_trace(mp::sim::write_trace(got), "recorded").ops == got.ops);
}

TEST_CASE("a memory-optimal algorithm no slower than the fastest costs at least 1 ns",
          "[runtime][record]") {
  const mp::sim::Workload w = resnet_tiny();
  const mp::sim::OpId conv2 = op_named(w, "conv2");
  std::map<mp::sim::OpId, mp::runtime::FoundAlgorithms> found;
  // A library's times can disagree with the run's: never below 1 ns.
  found[conv2] = {{4096, 1'000'000'000}, {0, 0}};
  mp::runtime::RecordOptions options;
  options.warmup = 0;
  const mp::runtime::Recording r = mp::runtime::record(SearchingBackend(found), w, options);
  REQUIRE(r.workload.op(conv2).algorithms.size() == 1);
  CHECK(r.workload.op(conv2).algorithms[0].duration_ns == 1);
}

TEST_CASE("a host recording keeps the trace's alternatives at each op's measured time",
          "[runtime][record]") {
  const mp::sim::Workload w = resnet_tiny();
  mp::runtime::RecordOptions options;
  options.warmup = 0;
  const mp::runtime::Recording r = mp::runtime::record(mp::host_backend::HostBackend(), w, options);
  for (const mp::sim::Op& op : r.workload.ops) {
    CAPTURE(op.name);
    CHECK(op.workspace_bytes == w.op(op.id).workspace_bytes);
    REQUIRE(op.algorithms.size() == w.op(op.id).algorithms.size());
    for (std::size_t a = 0; a < op.algorithms.size(); ++a) {
      CHECK(op.algorithms[a].name == w.op(op.id).algorithms[a].name);
      CHECK(op.algorithms[a].workspace_bytes == w.op(op.id).algorithms[a].workspace_bytes);
      CHECK(op.algorithms[a].duration_ns == op.duration_ns);
    }
  }
}

TEST_CASE("a recording carries the host's measured speed at host ops", "[runtime][record]") {
  // runtime/host_speed.hpp: the update loop both backends' host ops run, over arrays larger than
  // the caches. Any CPU streams more than 100 MB/s, and none 10 TB/s: the value is a measurement,
  // not the simulator's 20 GB/s default copied in.
  mp::runtime::RecordOptions options;
  options.warmup = 0;
  const mp::runtime::Recording r =
      mp::runtime::record(mp::host_backend::HostBackend(), resnet_tiny(), options);
  REQUIRE(r.workload.device.host_bandwidth_bytes_per_s.has_value());
  const double measured = *r.workload.device.host_bandwidth_bytes_per_s;
  CHECK(measured > 1e8);
  CHECK(measured < 1e13);
  CHECK(mp::sim::make_machine(r.workload.device).host_bandwidth_bytes_per_s == measured);
}
