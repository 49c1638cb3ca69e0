#include "core/allocator_model.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"

namespace memplan::sim {

std::string_view to_string(AllocatorModel model) {
  return model == AllocatorModel::kArena ? "arena" : "caching";
}

std::optional<AllocatorModel> parse_allocator_model(std::string_view name) {
  if (name == "arena") return AllocatorModel::kArena;
  if (name == "caching") return AllocatorModel::kCaching;
  return std::nullopt;
}

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

std::string_view without_spaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The options of a configuration string: "key:value" separated by commas, a value in brackets
// ("[256:1,>:4]") kept whole.
std::vector<std::pair<std::string_view, std::string_view>> options_of(std::string_view text,
                                                                      std::string_view flag) {
  std::vector<std::pair<std::string_view, std::string_view>> options;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    const std::string_view option = without_spaces(text.substr(start, i - start));
    start = i + 1;
    if (option.empty()) continue;
    const std::size_t colon = option.find(':');
    if (colon == std::string_view::npos) {
      throw InputError(std::string(flag), fmt::format("'{}': an option is key:value", option));
    }
    options.emplace_back(without_spaces(option.substr(0, colon)),
                         without_spaces(option.substr(colon + 1)));
  }
  return options;
}

std::int64_t whole(std::string_view text, std::string_view flag, std::string_view what) {
  std::int64_t v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (error != std::errc() || end != text.data() + text.size() || v < 0) {
    throw InputError(std::string(flag),
                     fmt::format("{} '{}' is not a whole number of 0 or more", what, text));
  }
  return v;
}

std::int64_t power_of_two(std::string_view text, std::string_view flag, std::string_view what) {
  const std::int64_t v = whole(text, flag, what);
  if (!std::has_single_bit(static_cast<std::uint64_t>(v))) {
    throw InputError(std::string(flag), fmt::format("{} {} is not a power of two", what, v));
  }
  return v;
}

std::size_t interval_index(std::int64_t mib) {
  return std::min<std::size_t>(
      static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(mib)) - 1),
      AllocatorConfig::kRoundupIntervals - 1);
}

// c10's roundup_power2_divisions: one number for every interval, or a list "[size:divisions,
// ..., >:divisions]" keyed by the interval's start in MiB: the first entry also holds below it,
// ">" every interval after the last entry.
void parse_divisions(std::string_view value, std::string_view flag, AllocatorConfig& c) {
  auto& d = c.roundup_power2_divisions;
  if (value.empty() || value.front() != '[') {
    d.fill(power_of_two(value, flag, "roundup_power2_divisions"));
    return;
  }
  if (value.back() != ']') {
    throw InputError(std::string(flag),
                     fmt::format("roundup_power2_divisions '{}' has no closing ]", value));
  }
  std::optional<std::size_t> last;
  for (const auto& [size, divisions] : options_of(value.substr(1, value.size() - 2), flag)) {
    const std::int64_t n = power_of_two(divisions, flag, "roundup_power2_divisions' divisions");
    if (size == ">") {
      std::fill(d.begin() + static_cast<std::ptrdiff_t>(last ? *last + 1 : 0), d.end(), n);
      continue;
    }
    const std::size_t index =
        interval_index(power_of_two(size, flag, "roundup_power2_divisions' interval (MiB)"));
    if (!last) std::fill(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(index), n);
    d[index] = n;
    last = index;
  }
}

void parse_option(std::string_view key, std::string_view value, std::string_view flag,
                  AllocatorConfig& c) {
  if (key == "max_split_size_mb") {
    const std::int64_t mib = whole(value, flag, "max_split_size_mb");
    if (mib <= 20) {
      throw InputError(
          std::string(flag),
          fmt::format("max_split_size_mb {} is too small: c10 takes more than 20", mib));
    }
    c.max_split_size =
        mib > AllocatorConfig::kNoMaxSplit / kMiB ? AllocatorConfig::kNoMaxSplit : mib * kMiB;
  } else if (key == "roundup_power2_divisions") {
    parse_divisions(value, flag, c);
  } else if (key == "garbage_collection_threshold") {
    double v = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (error != std::errc() || end != value.data() + value.size() || !(v > 0 && v < 1)) {
      throw InputError(std::string(flag),
                       fmt::format("garbage_collection_threshold '{}' is not between 0 and 1 "
                                   "(exclusive)",
                                   value));
    }
    c.garbage_collection_threshold = v;
  } else if (key == "expandable_segments") {
    if (value != "True" && value != "False") {
      throw InputError(std::string(flag),
                       fmt::format("expandable_segments '{}' is True or False", value));
    }
    c.expandable_segments = value == "True";
  } else if (key == "backend") {
    if (value != "native") {
      throw InputError(std::string(flag),
                       fmt::format("backend '{}': only PyTorch's native caching allocator is "
                                   "modelled",
                                   value));
    }
  } else if (key != "pinned_use_cuda_host_register" && key != "pinned_num_register_threads" &&
             key != "pinned_use_background_threads" && key != "release_lock_on_cudamalloc") {
    throw InputError(std::string(flag),
                     fmt::format("'{}' is not a caching-allocator option (max_split_size_mb, "
                                 "roundup_power2_divisions, garbage_collection_threshold, "
                                 "expandable_segments)",
                                 key));
  }
}

}  // namespace

AllocatorConfig parse_alloc_conf(std::string_view text, std::string_view flag) {
  AllocatorConfig c;
  for (const auto& [key, value] : options_of(text, flag)) parse_option(key, value, flag, c);
  return c;
}

std::string to_string(const AllocatorConfig& c) {
  std::vector<std::string> parts;
  if (c.expandable_segments) parts.emplace_back("expandable_segments:True");
  if (c.max_split_size != AllocatorConfig::kNoMaxSplit) {
    parts.push_back(fmt::format("max_split_size_mb:{}", c.max_split_size / kMiB));
  }
  if (c.roundup_power2_divisions != AllocatorConfig{}.roundup_power2_divisions) {
    std::vector<std::string> entries;
    for (std::size_t i = 0; i < c.roundup_power2_divisions.size(); ++i) {
      entries.push_back(fmt::format("{}:{}", std::int64_t{1} << i, c.roundup_power2_divisions[i]));
    }
    parts.push_back(fmt::format("roundup_power2_divisions:[{}]", fmt::join(entries, ",")));
  }
  if (c.garbage_collection_threshold > 0) {
    parts.push_back(
        fmt::format("garbage_collection_threshold:{:g}", c.garbage_collection_threshold));
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace memplan::sim
