#include "requests/machine_request.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "core/input_error.hpp"
#include "core/interconnect.hpp"
#include "core/liveness.hpp"
#include "core/units.hpp"

namespace memplan::requests {
namespace {

// A number from Python in the base unit: finite and positive (a latency may be zero); whole where
// the unit is.
double checked_number(double value, std::string_view flag, bool whole, bool zero = false) {
  if (!std::isfinite(value) || value < 0 || (value == 0 && !zero)) {
    throw sim::InputError(std::string(flag), fmt::format("{} is not a {} finite number", value,
                                                         zero ? "non-negative" : "positive"));
  }
  if (whole && value != std::floor(value)) {
    throw sim::InputError(std::string(flag), fmt::format("{} is not a whole number", value));
  }
  return value;
}

// The interconnect's names and node size (a Python int may be any size: checked before it
// narrows); sim::make_machine checks the names and builds the interconnect.
void interconnect_overrides(const MachineRequest& request, sim::MachineOverrides& o) {
  if (request.gpus_per_node) {
    const std::int64_t n = *request.gpus_per_node;
    if (n < 1 || n > sim::kMaxGpusPerNode) {
      throw sim::InputError("--gpus-per-node", fmt::format("{} is not a whole number from 1 to {}",
                                                           n, sim::kMaxGpusPerNode));
    }
    o.gpus_per_node = static_cast<std::int32_t>(n);
  }
  o.interconnect = request.interconnect;
  o.network = request.network;
}

}  // namespace

sim::Bytes bytes_of(const Quantity& q, std::string_view flag) {
  if (const auto* text = std::get_if<std::string>(&q)) return sim::parse_bytes(*text, flag);
  const double value = checked_number(std::get<double>(q), flag, true);
  if (value > static_cast<double>(sim::kMaxBytes)) {
    throw sim::InputError(std::string(flag),
                          fmt::format("{} bytes is over the limit of 1 EiB", value));
  }
  return static_cast<sim::Bytes>(value);
}

sim::BytesPerSecond bandwidth_of(const Quantity& q, std::string_view flag) {
  if (const auto* text = std::get_if<std::string>(&q)) return sim::parse_bandwidth(*text, flag);
  return checked_number(std::get<double>(q), flag, false);
}

sim::Nanoseconds duration_of(const Quantity& q, std::string_view flag) {
  if (const auto* text = std::get_if<std::string>(&q)) return sim::parse_duration(*text, flag);
  const double value = checked_number(std::get<double>(q), flag, true, true);
  if (value > 1e18)
    throw sim::InputError(std::string(flag), fmt::format("{} ns is too long", value));
  return static_cast<sim::Nanoseconds>(value);
}

bool is_share(const Quantity& q) {
  const auto* text = std::get_if<std::string>(&q);
  return text != nullptr && !text->empty() && text->back() == '%';
}

double share_percent(std::string_view text, std::string_view flag) {
  double percent = 0;
  const std::string_view number = text.substr(0, text.empty() ? 0 : text.size() - 1);
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), percent);
  if (text.empty() || text.back() != '%' || error != std::errc() ||
      end != number.data() + number.size() || !std::isfinite(percent) || percent <= 0) {
    throw sim::InputError(
        std::string(flag),
        fmt::format("'{}' is not a positive share of the in-core peak, like 50%", text));
  }
  return percent;
}

sim::Bytes budget_of(const Quantity& q, const sim::Workload& workload, std::string_view flag) {
  if (!is_share(q)) return bytes_of(q, flag);
  const std::string& text = std::get<std::string>(q);
  const double percent = share_percent(text, flag);
  const sim::Bytes peak = sim::incore_peak(workload).bytes;
  const double bytes = std::floor(static_cast<double>(peak) * percent / 100.0);
  if (bytes < 1 || bytes > static_cast<double>(sim::kMaxBytes)) {
    throw sim::InputError(std::string(flag),
                          fmt::format("{} of the in-core peak ({} bytes) is {}", text, peak,
                                      bytes < 1 ? "no byte" : "over the limit of 1 EiB"));
  }
  return static_cast<sim::Bytes>(bytes);
}

sim::MachineOverrides overrides(const MachineRequest& request) {
  sim::MachineOverrides o;
  if (request.memory && is_share(*request.memory)) {
    throw sim::InputError("--memory", fmt::format("'{}': a share of the in-core peak is for one "
                                                  "trace's machine, not here",
                                                  std::get<std::string>(*request.memory)));
  }
  if (request.memory) o.memory_bytes = bytes_of(*request.memory, "--memory");
  o.link_name = request.link;
  if (request.h2d) o.link.h2d_bytes_per_s = bandwidth_of(*request.h2d, "--h2d");
  if (request.d2h) o.link.d2h_bytes_per_s = bandwidth_of(*request.d2h, "--d2h");
  if (request.latency) o.link.latency_ns = duration_of(*request.latency, "--latency");
  if (request.host_memory) o.host_memory_bytes = bytes_of(*request.host_memory, "--host-memory");
  if (request.host_bandwidth) {
    o.host_bandwidth_bytes_per_s = bandwidth_of(*request.host_bandwidth, "--host-bandwidth");
  }
  if (request.allocator) {
    o.allocator = sim::parse_allocator_model(*request.allocator);
    if (!o.allocator) {
      throw sim::InputError("--allocator",
                            "'" + *request.allocator + "' is not an allocator: arena or caching");
    }
  }
  if (request.alloc_conf)
    o.allocator_config = sim::parse_alloc_conf(*request.alloc_conf, "--alloc-conf");
  interconnect_overrides(request, o);
  return o;
}

sim::Machine make_machine(const sim::Workload& workload, const MachineRequest& request) {
  // The budget first (a share needs the workload), as overrides() checks the memory first.
  std::optional<sim::Bytes> memory;
  if (request.memory) memory = budget_of(*request.memory, workload, "--memory");
  MachineRequest rest = request;
  rest.memory.reset();
  sim::MachineOverrides o = overrides(rest);
  o.memory_bytes = memory;
  return sim::make_machine(workload.device, o);
}

std::vector<sim::Machine> make_machines(const sim::Job& job, const MachineRequest& request) {
  std::vector<sim::Machine> machines;
  machines.reserve(job.ranks.size());
  for (const sim::Workload& w : job.ranks) machines.push_back(make_machine(w, request));
  return machines;
}

}  // namespace memplan::requests
