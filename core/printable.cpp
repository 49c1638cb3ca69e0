#include "core/printable.hpp"

#include <fmt/core.h>

namespace memplan::sim {
namespace {

constexpr std::size_t kKeepHead = 60;
constexpr std::size_t kKeepTail = 20;

// Control characters as escapes: C0 and DEL as \n, \r, \t or \xHH, and the C1 controls
// (U+0080..U+009F, two bytes in UTF-8: 0xC2 0x80..0x9F; U+009B is a CSI to some terminals) as
// \uHHHH. Everything else, other UTF-8 included, as it is.
std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// The position at or before `at` where a character starts (not inside a UTF-8 sequence).
std::size_t character_start(std::string_view text, std::size_t at) {
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xc0) == 0x80) --at;
  return at;
}

// A run without a space, shortened when it is over kMaxPrintableRun.
void append_run(std::string& out, std::string_view run) {
  if (run.size() <= kMaxPrintableRun) {
    out += run;
    return;
  }
  const std::size_t head = character_start(run, kKeepHead);
  const std::size_t tail = character_start(run, run.size() - kKeepTail);
  out += run.substr(0, head);
  out += fmt::format("...[{} characters]...", tail - head);
  out += run.substr(tail);
}

}  // namespace

std::string printable(std::string_view text) {
  const std::string escaped = escape_controls(text);
  const std::string_view all(escaped);
  std::string out;
  out.reserve(all.size());
  std::size_t start = 0;
  while (start < all.size()) {
    const std::size_t space = all.find(' ', start);
    const std::size_t end = space == std::string_view::npos ? all.size() : space;
    append_run(out, all.substr(start, end - start));
    if (end == all.size()) break;
    out += ' ';
    start = end + 1;
  }
  return out;
}

}  // namespace memplan::sim
