#include "importers/kineto/step_events.hpp"

#include <charconv>
#include <unordered_map>

#include "core/input_error.hpp"

namespace memplan::importers::detail {

namespace {

constexpr std::string_view kStepPrefix = "ProfilerStep#";

// The PyTorch dtype names of "Input type" to memplan's.
std::string dtype_name(std::string_view t) {
  if (t == "float" || t == "Float") return "float32";
  if (t == "double" || t == "Double") return "float64";
  if (t == "c10::Half" || t == "Half") return "float16";
  if (t == "c10::BFloat16" || t == "BFloat16") return "bfloat16";
  if (t == "long int" || t == "long" || t == "Long" || t == "int64_t") return "int64";
  if (t == "int" || t == "Int32") return "int32";
  if (t == "short int" || t == "short") return "int16";
  if (t == "signed char") return "int8";
  if (t == "unsigned char" || t == "Byte") return "uint8";
  if (t == "bool" || t == "Bool") return "bool";
  return "float32";
}

}  // namespace

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::optional<std::int64_t> step_number(std::string_view name) {
  if (!starts_with(name, kStepPrefix)) return std::nullopt;
  std::string_view digits = name.substr(kStepPrefix.size());
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

std::string backward_node(std::string_view name) {
  if (starts_with(name, kEvaluatePrefix)) name.remove_prefix(kEvaluatePrefix.size());
  std::string_view core = name;
  while (!core.empty() && core.back() >= '0' && core.back() <= '9') core.remove_suffix(1);
  if (ends_with(core, "Backward") || ends_with(name, "AccumulateGrad")) return std::string(name);
  return {};
}

bool is_layer_event(std::string_view name) {
  return starts_with(name, kAtenPrefix) || starts_with(name, "Optimizer.") ||
         starts_with(name, kEvaluatePrefix) || !backward_node(name).empty();
}

Nesting nest(const std::vector<CpuEvent>& events) {
  Nesting n;
  n.parent.assign(events.size(), kNoEvent);
  n.children.resize(events.size());
  std::unordered_map<std::string, std::vector<std::size_t>> stacks;
  for (std::size_t i = 0; i < events.size(); ++i) {
    auto& stack = stacks[events[i].thread];
    while (!stack.empty() && events[stack.back()].end_ns() < events[i].end_ns()) stack.pop_back();
    if (!stack.empty()) {
      n.parent[i] = stack.back();
      n.children[stack.back()].push_back(i);
    }
    stack.push_back(i);
  }
  return n;
}

const Shape& dims(const CpuEvent& e, std::size_t k) {
  static const Shape kEmpty;
  return k < e.input_dims.size() ? e.input_dims[k] : kEmpty;
}

std::string dtype_of(const CpuEvent& e, std::size_t k) {
  return k < e.input_types.size() ? dtype_name(e.input_types[k]) : std::string("float32");
}

std::vector<sim::AtenArgument> aten_arguments(const CpuEvent& e) {
  std::vector<sim::AtenArgument> arguments(e.input_dims.size());
  for (std::size_t k = 0; k < e.input_dims.size(); ++k) {
    if (e.input_dims[k].empty()) continue;
    arguments[k].tensor = true;
    arguments[k].rank = e.input_dims[k].size();
  }
  return arguments;
}

std::string_view aten_short_name(std::string_view name) {
  if (starts_with(name, kAtenPrefix)) name.remove_prefix(kAtenPrefix.size());
  while (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return name;
}

sim::Bytes checked_bytes(const Shape& shape, sim::Bytes item, const std::string& where) {
  constexpr sim::Bytes kMax = sim::Bytes{1} << 50;
  sim::Bytes n = item;
  for (std::int64_t e : shape) {
    if (e != 0 && n > kMax / e)
      throw sim::InputError(where, "absurd tensor shape (over 2^50 bytes)");
    n *= e;
  }
  return n;
}

std::size_t numel(const Shape& s) {
  std::size_t n = 1;
  for (std::int64_t e : s) n *= static_cast<std::size_t>(e);
  return n;
}

}  // namespace memplan::importers::detail
