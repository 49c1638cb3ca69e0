#pragma once
// MEMPLAN_CHECK: an always-on check of an invariant the code relies on (not of user input: that
// is InputError). On failure it prints the condition, the invariant in words and the place, then
// aborts. It stays on in release builds: a broken invariant must never become a wrong answer.
#include <string_view>

namespace memplan::sim {
[[noreturn]] void check_failed(std::string_view condition, std::string_view invariant,
                               std::string_view file, int line);
}  // namespace memplan::sim

#define MEMPLAN_CHECK(condition, invariant)                                      \
  do {                                                                           \
    if (!(condition)) [[unlikely]]                                               \
      ::memplan::sim::check_failed(#condition, (invariant), __FILE__, __LINE__); \
  } while (false)
