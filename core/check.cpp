#include "core/check.hpp"

#include <cstdlib>

#include <fmt/core.h>

namespace memplan::sim {

void check_failed(std::string_view condition, std::string_view invariant, std::string_view file,
                  int line) {
  fmt::print(stderr, "memplan: internal invariant broken at {}:{}: {} (check `{}` failed)\n", file,
             line, invariant, condition);
  std::abort();
}

}  // namespace memplan::sim
