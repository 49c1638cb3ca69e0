#include "importers/kineto/step_events.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <unordered_map>
#include <vector>

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

constexpr std::string_view kViewOps[] = {
    "aten::view",      "aten::reshape",        "aten::_unsafe_view",
    "aten::flatten",   "aten::transpose",      "aten::permute",
    "aten::unsqueeze", "aten::squeeze",        "aten::select",
    "aten::slice",     "aten::narrow",         "aten::chunk",
    "aten::split",     "aten::expand",         "aten::t",
    "aten::pad",       "aten::constant_pad_nd"};

// "3", "-1" -> the integer; "[4, -1, 8]" -> the integers; nothing for anything else.
std::optional<std::vector<std::int64_t>> integers(std::string_view text) {
  std::vector<std::int64_t> out;
  if (!text.empty() && text.front() == '[') {
    if (text.back() != ']') return std::nullopt;
    text = text.substr(1, text.size() - 2);
  }
  while (!text.empty()) {
    while (!text.empty() && (text.front() == ' ' || text.front() == ',')) text.remove_prefix(1);
    if (text.empty()) break;
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc()) return std::nullopt;
    out.push_back(v);
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  return out;
}

// Argument k of `e` as one integer.
std::optional<std::int64_t> integer_arg(const CpuEvent& e, std::size_t k) {
  if (k >= e.concrete_inputs.size()) return std::nullopt;
  auto v = integers(e.concrete_inputs[k]);
  if (!v || v->size() != 1) return std::nullopt;
  return v->front();
}

// A dimension index as PyTorch wraps it (-1: the last of `rank`); nothing when out of range.
std::optional<std::size_t> wrap_dim(std::optional<std::int64_t> d, std::size_t rank) {
  if (!d) return std::nullopt;
  const auto r = static_cast<std::int64_t>(rank);
  const std::int64_t w = *d < 0 ? *d + r : *d;
  if (w < 0 || w >= r) return std::nullopt;
  return static_cast<std::size_t>(w);
}

// A view's sizes with -1 inferred from the input's element count.
std::optional<Shape> sized(std::vector<std::int64_t> sizes, const Shape& x) {
  std::int64_t known = 1;
  std::optional<std::size_t> infer;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && !infer) {
      infer = i;
    } else if (sizes[i] < 0) {
      return std::nullopt;
    } else {
      known *= sizes[i];
    }
  }
  const auto total = static_cast<std::int64_t>(numel(x));
  if (infer) {
    if (known == 0 || total % known != 0) return std::nullopt;
    sizes[*infer] = total / known;
  } else if (known != total) {
    return std::nullopt;
  }
  return sizes;
}

}  // namespace

bool is_view_op(std::string_view name) {
  for (std::string_view v : kViewOps) {
    if (name == v) return true;
  }
  return false;
}

namespace {

// view, reshape, expand: the sizes argument.
std::optional<Shape> sized_view(const CpuEvent& e, std::string_view op, const Shape& x) {
  auto sizes = e.concrete_inputs.size() > 1 ? integers(e.concrete_inputs[1]) : std::nullopt;
  if (!sizes) return std::nullopt;
  if (op != "expand") return sized(*sizes, x);
  if (sizes->size() < x.size()) return std::nullopt;
  Shape o(sizes->begin(), sizes->end());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t& s = o[o.size() - x.size() + i];
    if (s == -1) s = x[i];
  }
  return o;
}

// t, transpose, permute, unsqueeze, squeeze, flatten: the extents reordered or regrouped.
std::optional<Shape> reordered_view(const CpuEvent& e, std::string_view op, const Shape& x) {
  Shape out = x;
  if (op == "t") {
    std::reverse(out.begin(), out.end());
  } else if (op == "transpose") {
    auto a = wrap_dim(integer_arg(e, 1), x.size());
    auto b = wrap_dim(integer_arg(e, 2), x.size());
    if (!a || !b) return std::nullopt;
    std::swap(out[*a], out[*b]);
  } else if (op == "permute") {
    auto order = e.concrete_inputs.size() > 1 ? integers(e.concrete_inputs[1]) : std::nullopt;
    if (!order || order->size() != x.size()) return std::nullopt;
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto d = wrap_dim((*order)[i], x.size());
      if (!d) return std::nullopt;
      out[i] = x[*d];
    }
  } else if (op == "unsqueeze") {
    auto d = wrap_dim(integer_arg(e, 1), x.size() + 1);
    if (!d) return std::nullopt;
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(*d), 1);
  } else if (op == "squeeze") {
    if (e.concrete_inputs.size() < 2 || e.concrete_inputs[1].empty()) {
      out.erase(std::remove(out.begin(), out.end(), 1), out.end());
      return out;
    }
    auto d = wrap_dim(integer_arg(e, 1), x.size());
    if (!d) return std::nullopt;
    if (out[*d] == 1) out.erase(out.begin() + static_cast<std::ptrdiff_t>(*d));
  } else {  // flatten(start, end)
    auto a = wrap_dim(integer_arg(e, 1), x.size());
    auto b = wrap_dim(integer_arg(e, 2), x.size());
    if (!a || !b || *a > *b) return std::nullopt;
    out.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(*a));
    std::int64_t n = 1;
    for (std::size_t i = *a; i <= *b; ++i) n *= x[i];
    out.push_back(n);
    out.insert(out.end(), x.begin() + static_cast<std::ptrdiff_t>(*b) + 1, x.end());
  }
  return out;
}

// select, slice, narrow, chunk, split: a part of one extent (chunk and split: the first piece).
std::optional<Shape> part_view(const CpuEvent& e, std::string_view op, const Shape& x) {
  Shape out = x;
  if (op == "chunk" || op == "split") {
    auto n = integer_arg(e, 1);
    auto d = wrap_dim(e.concrete_inputs.size() > 2 ? integer_arg(e, 2) : std::int64_t{0}, x.size());
    if (!n || *n <= 0 || !d) return std::nullopt;
    // chunk: n pieces of ceil(size / n); split: pieces of n.
    out[*d] = op == "chunk" ? (x[*d] + *n - 1) / *n : std::min(*n, x[*d]);
    return out;
  }
  auto d = wrap_dim(integer_arg(e, 1), x.size());
  if (!d) return std::nullopt;
  if (op == "select") {
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(*d));
    return out;
  }
  auto start = integer_arg(e, 2);
  auto third = integer_arg(e, 3);  // slice: end; narrow: length
  if (!start || !third) return std::nullopt;
  const std::int64_t size = x[*d];
  auto clamp = [&](std::int64_t v) {
    return std::clamp(v < 0 ? v + size : v, std::int64_t{0}, size);
  };
  const std::int64_t b = clamp(*start);
  const std::int64_t end = op == "narrow" ? b + *third : clamp(*third);
  const std::int64_t step = op == "slice" ? integer_arg(e, 4).value_or(1) : 1;
  if (step <= 0) return std::nullopt;
  out[*d] = end > b ? (std::min(end, size) - b + step - 1) / step : 0;
  return out;
}

// pad(x, [left, right, top, bottom, ...]): pairs from the last extent backwards.
std::optional<Shape> padded(const CpuEvent& e, const Shape& x) {
  auto pads = e.concrete_inputs.size() > 1 ? integers(e.concrete_inputs[1]) : std::nullopt;
  if (!pads || pads->size() % 2 != 0 || pads->size() / 2 > x.size()) return std::nullopt;
  Shape out = x;
  for (std::size_t i = 0; i < pads->size() / 2; ++i) {
    std::int64_t& extent = out[x.size() - 1 - i];
    extent += (*pads)[2 * i] + (*pads)[2 * i + 1];
    if (extent < 0) return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<Shape> view_shape(const CpuEvent& e) {
  const Shape& x = dims(e, 0);
  if (x.empty() || e.concrete_inputs.empty() || !is_view_op(e.name)) return std::nullopt;
  const std::string_view op = std::string_view(e.name).substr(kAtenPrefix.size());
  if (op == "view" || op == "reshape" || op == "_unsafe_view" || op == "expand")
    return sized_view(e, op, x);
  if (op == "select" || op == "slice" || op == "narrow" || op == "chunk" || op == "split")
    return part_view(e, op, x);
  if (op == "pad" || op == "constant_pad_nd") return padded(e, x);
  return reordered_view(e, op, x);
}

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
  if (ends_with(core, "Backward") || ends_with(name, "AccumulateGrad") ||
      ends_with(name, "CopySlices"))
    return std::string(name);
  return {};
}

bool is_layer_event(std::string_view name) {
  return starts_with(name, kAtenPrefix) || starts_with(name, "Optimizer.") ||
         starts_with(name, kEvaluatePrefix) || !backward_node(name).empty();
}

bool is_fsdp_machinery(std::string_view name) {
  constexpr std::string_view kFsdp1 = "FullyShardedDataParallel.";
  return starts_with(name, "FSDP::") || starts_with(name, "fsdp::") ||
         (starts_with(name, kFsdp1) && name != "FullyShardedDataParallel.forward");
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
