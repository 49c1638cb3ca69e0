#include "importers/kineto/comm_args.hpp"

#include <array>
#include <charconv>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "importers/kineto/step_events.hpp"

namespace memplan::importers::detail {

namespace {

constexpr std::int64_t kMaxRank = std::int64_t{1} << 24;  // 16 M GPUs

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '"')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '"')) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> number(std::string_view s) {
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

// "Process Group Ranks": "[0, 1, 2, 3]" (a string, as Kineto writes it, or an array). A long
// list is truncated, "[0, 1, 2, ..., 63]": rebuilt from "Global rank start" and "Global rank
// stride", or from the visible ranks when they step evenly to the last; else left unknown.
class RankList {
 public:
  explicit RankList(const EventReader& r) : r_(r) {}

  std::vector<std::int32_t> read(std::optional<std::int64_t> group_size) {
    const nlohmann::json* a = r_.args();
    const nlohmann::json* v = a != nullptr ? EventReader::find(*a, kKey) : nullptr;
    if (v == nullptr) return {};
    if (v->is_array()) {
      for (const auto& e : *v) {
        if (!e.is_number_integer()) fail(e.dump());
        add(e.get<std::int64_t>());
      }
    } else if (v->is_string()) {
      parse(v->get<std::string>());
    } else {
      r_.fail(field(), "expected a list of ranks");
    }
    if (truncated_) return rebuild(group_size);
    return ranks_;
  }

 private:
  static constexpr std::string_view kKey = "Process Group Ranks";
  static std::string field() { return fmt::format("args.{}", kKey); }
  [[noreturn]] void fail(const std::string& token) const {
    r_.fail(field(), fmt::format("expected a list of ranks, found '{}'", token));
  }
  void add(std::int64_t n) {
    if (n < 0 || n >= kMaxRank) r_.fail(field(), fmt::format("implausible rank {}", n));
    ranks_.push_back(static_cast<std::int32_t>(n));
  }
  void parse(std::string_view text) {
    text = trim(text);
    if (text.size() < 2 || text.front() != '[' || text.back() != ']') fail(std::string(text));
    text = text.substr(1, text.size() - 2);
    while (!text.empty()) {
      const auto comma = text.find(',');
      const std::string_view token = trim(text.substr(0, comma));
      text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
      if (token.empty() && text.empty()) break;
      if (token == "..." || token == "…") {
        truncated_ = true;
        continue;
      }
      const auto n = number(token);
      if (!n) fail(std::string(token));
      add(*n);
    }
  }
  std::vector<std::int32_t> rebuild(std::optional<std::int64_t> size) const {
    if (!size || *size <= 0 || *size > kMaxRank) return {};
    const auto start = r_.int_arg({"Global rank start"});
    const auto stride = r_.int_arg({"Global rank stride"});
    std::int64_t first = start.value_or(ranks_.empty() ? 0 : ranks_.front());
    std::int64_t step = stride.value_or(ranks_.size() >= 2 ? ranks_[1] - ranks_[0] : 1);
    if (!stride && ranks_.size() >= 2 && ranks_.back() != first + (*size - 1) * step) return {};
    if (step <= 0 || first < 0 || first + (*size - 1) * step >= kMaxRank) return {};
    std::vector<std::int32_t> out;
    for (std::int64_t i = 0; i < *size; ++i)
      out.push_back(static_cast<std::int32_t>(first + i * step));
    return out;
  }

  const EventReader& r_;
  std::vector<std::int32_t> ranks_;
  bool truncated_ = false;
};

std::optional<std::int64_t> count_arg(const EventReader& r, std::string_view key,
                                      std::int64_t max) {
  const auto v = r.int_arg({key});
  if (v && (*v < 0 || *v > max))
    r.fail(fmt::format("args.{}", key), fmt::format("implausible value {}", *v));
  return v;
}

// The collective an nccl:/gloo: op names: "nccl:all_reduce", "nccl:send 0->1", "nccl:recv 0<-1".
void read_library_title(const EventReader& r, std::string_view name, CommArgs& c) {
  std::string_view rest = name.substr(name.find(':') + 1);
  const auto space = rest.find(' ');
  c.collective = std::string(rest.substr(0, space));
  if (space == std::string_view::npos) return;
  std::string_view ends = rest.substr(space + 1);
  for (std::string_view arrow : {"->", "<-"}) {
    if (const auto at = ends.find(arrow); at != std::string_view::npos) {
      const auto peer = number(trim(ends.substr(at + arrow.size())));
      if (!peer || *peer < 0 || *peer >= kMaxRank)
        r.fail("name", fmt::format("expected '{} A{}B' with ranks A and B", c.collective, arrow));
      c.peer = *peer;
    }
  }
}

void check_collective(const EventReader& r, const CommArgs& c, std::string_view field) {
  if (c.collective.empty() || is_comm_bookkeeping(c.collective)) return;
  if (!sim::parse_collective_kind(c.collective))
    r.fail(field, fmt::format("unknown collective '{}'", c.collective));
}

}  // namespace

bool is_library_comm_op(std::string_view name) {
  return starts_with(name, "nccl:") || starts_with(name, "gloo:");
}

bool is_comm_bookkeeping(std::string_view collective) {
  static constexpr std::array<std::string_view, 6> kBookkeeping{
      "wait", "init", "coalesced", "startCoalescing", "endCoalescing", "waitall"};
  for (std::string_view b : kBookkeeping) {
    if (collective == b) return true;
  }
  return false;
}

std::shared_ptr<const CommArgs> read_comm_args(const EventReader& r, std::string_view name) {
  const auto collective = r.string_arg("Collective name");
  if (name != kParamComms && !collective && !is_library_comm_op(name)) return nullptr;
  CommArgs c;
  if (is_library_comm_op(name)) {
    read_library_title(r, name, c);
    check_collective(r, c, "name");
    return std::make_shared<const CommArgs>(std::move(c));
  }
  c.collective = collective.value_or("");
  check_collective(r, c, "args.Collective name");
  c.in_nelems = count_arg(r, "In msg nelems", kMaxNelems);
  c.out_nelems = count_arg(r, "Out msg nelems", kMaxNelems);
  c.group_size = count_arg(r, "Group size", kMaxRank);
  c.rank = count_arg(r, "Rank", kMaxRank);
  c.dtype = r.string_arg("dtype").value_or("");
  c.group = r.string_arg("Process Group Name").value_or("");
  c.group_description = r.string_arg("Process Group Description").value_or("");
  c.group_ranks = RankList(r).read(c.group_size);
  // A send names where it goes, a recv where it comes from; -1 (or none) when not point to point.
  const bool recv = starts_with(c.collective, "recv");
  const std::string_view key = recv ? "Src Rank" : "Dst Rank";
  const auto peer = r.int_arg({key});
  if (peer && *peer >= kMaxRank) r.fail(fmt::format("args.{}", key), "implausible rank");
  if (peer && *peer >= 0) c.peer = *peer;
  return std::make_shared<const CommArgs>(std::move(c));
}

}  // namespace memplan::importers::detail
