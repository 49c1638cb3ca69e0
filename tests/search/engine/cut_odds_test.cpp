// CutOdds (search/engine/cut_odds.hpp): where exact mode solves the lower bound of a node's
// decided maps. Every expected answer follows from (cuts + 1) / (solves + 2) per depth, times the
// node's subtree plans, against kMinPlans / 2 = 128, and from every 64th node passed over.
#include <cstddef>

#include <catch2/catch.hpp>

#include "search/engine/cut_odds.hpp"

using memplan::search::CutOdds;

TEST_CASE("CutOdds: never below kMinPlans, at first from kMinPlans on", "[search][exact]") {
  CutOdds odds;
  CHECK_FALSE(odds.worth_solving(3, 255));  // too small a subtree, whatever the odds
  CHECK(odds.worth_solving(3, 256));        // 256 x (0 + 1) / (0 + 2) = 128
}

TEST_CASE("CutOdds: a depth where every solve cuts is solved at every node", "[search][exact]") {
  CutOdds odds;
  for (int k = 0; k < 1000; ++k) {
    REQUIRE(odds.worth_solving(5, 256));  // 256 x (k + 1) / (k + 2) >= 128
    odds.record(5, true);
  }
}

TEST_CASE("CutOdds: a depth where no solve cuts is probed every 64th node", "[search][exact]") {
  CutOdds odds;
  REQUIRE(odds.worth_solving(7, 256));
  odds.record(7, false);  // odds 1 / 3: 256 / 3 = 85.3 < 128
  int solved = 0;
  for (int k = 1; k <= 640; ++k) {
    const bool solve = odds.worth_solving(7, 256);
    CHECK(solve == (k % 64 == 0));
    if (solve) {
      odds.record(7, false);
      ++solved;
    }
  }
  CHECK(solved == 10);
  // Larger subtrees are still worth it: 11 solves, no cut, odds 1 / 13; 13 x 128 = 1664.
  CHECK(odds.worth_solving(7, 1664));
  CHECK_FALSE(odds.worth_solving(7, 1663));
  // Each depth counts its own solves.
  CHECK(odds.worth_solving(8, 256));
}

TEST_CASE("CutOdds: one cut in a hundred solves asks for a subtree 51 times kMinPlans / 2",
          "[search][exact]") {
  CutOdds odds;
  for (int k = 0; k < 100; ++k) odds.record(2, k == 0);
  // odds (1 + 1) / (100 + 2) = 1 / 51: worth it from 51 x 128 = 6528 plans.
  CHECK(odds.worth_solving(2, 6528));
  CHECK_FALSE(odds.worth_solving(2, 6527));
}
