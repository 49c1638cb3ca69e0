// Plans on a job of several ranks: the oracle pricing a rank among its peers held fixed (Note [A
// rank among fixed peers] in search/oracle/evaluator.hpp), the job's comparison and the job's
// search (search/studies/job_comparison.hpp, job_search.hpp), on late_gather_job
// (tests/support/job_workloads.hpp) with every number worked out by hand first. The link moves
// 1 KiB in 1000 ns; no copy latency; the all-gather takes its recorded 200 ns.
//
// In core, with unlimited memory: rank 1 (f1 300, f2 100) reaches ag at 400, rank 0 (f1 1000, f2
// 2000) at 3000, so ag runs [3000, 3200] on both; f3 [3200, 4700], f4 [4700, 5300], g4 [5300,
// 6300], g3 [6300, 7300], g2 [7300, 8300]; g1 ends rank 0 at 9300 and rank 1 at 11300. Rank 1
// sets the step, 11300, and waited 2600 at ag. Alone (its peers assumed alike) rank 1 would start
// ag at 400 and end at 8700.
//
// In 5 KiB, f3 does not fit with a live (x, a, b, d and a 2 KiB workspace: 6 KiB), so a must go
// before f3, swapped or recomputed; nothing else helps (d is f3's output, b its input). For rank
// 1:
//   - recompute a: a is freed after f2 and f1 runs again before g1: +300 wherever the rank runs;
//   - swap a: the copy-out [300, 1300] holds the compute stream after f2 (a goes once it is read)
//     until 1300, so rank 1 reaches ag at 1300, not 400: +900 alone (9600); among its peers ag
//     starts at 3000 anyway: +0 (11300). The prefetch, issued before g2 at 7300, lands at 8300
//     as g1 starts.
// Rank 0, whose copy-out [1000, 2000] runs beside its long f2, loses nothing by a swap, and 1000
// (its f1) by a recomputation.
#include <algorithm>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/job_comparison.hpp"
#include "search/studies/job_search.hpp"
#include "tests/support/job_workloads.hpp"
#include "tests/support/policy_counts.hpp"
#include "tests/support/sim_helpers.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

std::vector<Machine> late_gather_machines() {
  return std::vector<Machine>(2, test_machine(kLateGatherMemory, kLateGatherLink));
}

// The action the plan takes for tensor `name`'s map.
Action action_of(const Plan& plan, const Workload& w, const std::string& name) {
  for (const Decision& d : plan.decisions) {
    if (w.tensor(d.tensor).name == name) return d.action;
  }
  FAIL("no decision for " << name);
  return Action::kKeep;
}

SearchOptions quick_search() {
  SearchOptions o;
  o.threads = 2;
  o.deterministic = true;
  o.time_limit_s = 60;       // converges long before
  o.host_placement = false;  // x stays on the device: the maps are the question here
  // The rank's search itself is the question: the policy whose plans are at the job's lower
  // bound would otherwise answer before any search (job_bound_test), as it does with a gap.
  o.gap = -1.0;
  return o;
}

}  // namespace

TEST_CASE("the ideal job and each rank's peers' arrivals", "[search][job]") {
  const Job job = late_gather_job();
  const std::vector<Machine> machines = late_gather_machines();
  const JobRun ideal = ideal_job_run(job, machines);
  REQUIRE(ideal.timeline.feasible);
  CHECK(ideal.timeline.slowest == 1);
  CHECK(ideal.timeline.step_ns == 11300);
  // Back to back each rank starts its next step when it ends this one, and the ranks drift until
  // the cycle from one all-gather to the next is the longer of the two ranks' own work around it:
  // rank 0's ag 200 + f3 1500 + f4 600 + g4, g3, g2, g1 4000, then its next f1 1000 + f2 2000 =
  // 9300; rank 1's 200 + 1500 + 600 + 3000 + g1 3000 + f1 300 + f2 100 = 8700. Period 9300:
  // rank 1 then waits 600 a step, not 2600.
  CHECK(ideal.period_ns == 9300);
  CHECK(ideal.timeline.ranks[0].iteration_ns == 9300);
  // Each rank's collective waits for the other's arrival: rank 1 for rank 0's 3000, rank 0 for
  // rank 1's 400.
  std::vector<const Program*> programs;
  for (const Program& p : ideal.programs) programs.push_back(&p);
  CHECK(peer_ready_ns(programs, ideal.timeline, 1) == std::vector<Nanoseconds>{3000});
  CHECK(peer_ready_ns(programs, ideal.timeline, 0) == std::vector<Nanoseconds>{400});
}

TEST_CASE("the oracle prices a rank among its peers held fixed", "[search][job][oracle]") {
  const Job job = late_gather_job();
  const Workload& w = job.ranks[1];
  const Machine m = test_machine(kLateGatherMemory, kLateGatherLink);
  const Plan swap_a = plan_with(w, {{"f1_out", Action::kSwap}});
  const Plan recompute_a = plan_with(w, {{"f1_out", Action::kRecompute}});

  // Alone: the swap delays ag by 900 (arrival 1300), the recomputation costs f1's 300.
  Evaluator alone(w, m);
  CHECK(alone.cost(swap_a).iteration_ns == 9600);
  CHECK(alone.cost(recompute_a).iteration_ns == 9000);

  // Among peers that arrive at 3000, the swap's delay fits into ag's wait: 11300, the in-core
  // job's step; the recomputation still costs 300. timeline() runs the same way.
  Evaluator among_peers(w, m, {3000});
  CHECK(among_peers.collective_ready_ns() == std::vector<Nanoseconds>{3000});
  CHECK(among_peers.cost(swap_a).iteration_ns == 11300);
  CHECK(among_peers.cost(recompute_a).iteration_ns == 11600);
  const Timeline& t = among_peers.timeline(swap_a);
  REQUIRE(t.collectives.size() == 1);
  CHECK(t.collectives[0].arrival_ns == 1300);
  CHECK(t.collectives[0].start_ns == 3000);

  // Peers that arrive at 1000: in core ag starts at 1000 (+600 over alone, 9300); the swap's
  // arrival at 1300 now delays ag by 300 beyond that, and everything after it: 9600.
  Evaluator early_peers(w, m, {1000});
  CHECK(early_peers.cost(plan_with(w, {{"f1_out", Action::kRecompute}})).iteration_ns == 9600);
  CHECK(early_peers.cost(swap_a).iteration_ns == 9600);
  // Fitting is not timed: the same answer either way.
  CHECK(among_peers.fits(swap_a).feasible == alone.fits(swap_a).feasible);
}

TEST_CASE("a job's search finds the swap its late rank hides in a collective's wait",
          "[search][job]") {
  const Job job = late_gather_job();
  const std::vector<Machine> machines = late_gather_machines();
  const SearchOptions options = quick_search();

  // Rank 1 searched alone: the recomputation (+300, 9000) beats the swap (+900, 9600).
  const SearchResult alone = search_plan(job.ranks[1], machines[1], options);
  REQUIRE(alone.evaluation.feasible);
  CHECK(alone.evaluation.iteration_ns == 9000);
  CHECK(action_of(alone.plan, job.ranks[1], "f1_out") == Action::kRecompute);

  // Searched among its peers (rank 1 sets the step in core): the swap costs nothing there.
  const JobSearchResult found = search_job(job, machines, options);
  CHECK(found.searched == 1);
  CHECK(found.ideal_ns == 9300);  // the in-core job back to back (job_comparison below)
  REQUIRE(found.search.evaluation.feasible);
  CHECK(found.search.evaluation.iteration_ns == 11300);
  CHECK(action_of(found.search.plan, job.ranks[1], "f1_out") == Action::kSwap);
  CHECK(found.search.simulation.timeline.collectives.at(0).start_ns == 3000);
  // Rank 0 takes the same plan: its copy-out runs beside its long f2.
  REQUIRE(found.ranks.size() == 2);
  CHECK(found.ranks[1].source == RankPlan::Source::kSearched);
  CHECK(found.ranks[0].source == RankPlan::Source::kShared);
  CHECK(found.ranks[0].plan == found.search.plan);
  // The whole job together: the in-core step, 11300 (rank 0 9300).
  REQUIRE(found.searched_run.timeline.feasible);
  CHECK(found.searched_run.timeline.step_ns == 11300);
  CHECK(found.searched_run.timeline.ranks[0].iteration_ns == 9300);
  // Back to back rank 1 waits only 600 a step (above), so the swap is no longer hidden there:
  // rank 1's cycle is 8700 + 900 = 9600. The search prices the recorded step, where the wait is
  // 2600; a search of the back-to-back period would weigh the recompute (+300) instead.
  CHECK(found.searched_run.period_ns == 9600);

  // The plan found alone, shared by both ranks, costs the job 300 (rank 1 11600, rank 0 10300).
  const JobRun with_alone = simulate_job(job, {alone.plan, alone.plan}, machines);
  REQUIRE(with_alone.timeline.feasible);
  CHECK(with_alone.timeline.step_ns == 11600);
  CHECK(with_alone.timeline.ranks[0].iteration_ns == 10300);

  // Each rank deciding for itself, compare's best row gives the ideal back to back, 9300
  // (job_comparison below): the answer is its plans (Note [A job's search is never behind a
  // policy]), each rank's own.
  const JobComparison comparison = compare_job_policies(job, machines);
  const JobComparisonRow& best = comparison.rows.at(comparison.ranking().front());
  REQUIRE(best.step_ns() == 9300);
  CHECK(found.policy == best.policy);
  CHECK(found.run.period_ns == 9300);
  REQUIRE(found.plans().size() == 2);
  CHECK(found.plans()[0] == best.decisions[0].plan);
  CHECK(found.plans()[1] == best.decisions[1].plan);

  const nlohmann::json j = job_search_json(found, job, machines);
  CHECK(j["policy"] == "search");
  CHECK(j["plans_from"] == best.policy);
  CHECK(j["searched_rank"] == 1);
  CHECK(j["step_s"] == Approx(9300e-9));  // what a training loop sees: the period
  CHECK(j["searched_plans_step_s"] == Approx(9600e-9));
  CHECK(j["ranks"][0]["plan"] == "policy");
  CHECK(j["ranks"][1]["plan"] == "policy");
  // The rank priced among its peers held at their in-core arrivals: each step meets the gather
  // at 3000, so back to back it is the step alone.
  CHECK(j["searched_rank_step_s"] == Approx(11300e-9));
  const std::string text = job_search_text(found, job, machines);
  CHECK_THAT(text, Catch::Contains("searched   on rank 1"));
  CHECK_THAT(text, Catch::Contains("rank 0 shares rank 1's plan"));
  CHECK_THAT(text, Catch::Contains("answer     " + best.policy +
                                   "'s plans, each rank its own decision: the job's step 0.009 "
                                   "ms back to back, where the plans above give 0.010 ms"));
}

TEST_CASE("a rank whose step differs in structure gets a search of its own", "[search][job]") {
  // Rank 0's g2 reads b too: b is a feature map there, so rank 1's plan names other maps.
  const Job job{{late_gather_rank(0, 1000, 2000, 1000, true), late_gather_rank(1, 300, 100, 3000)}};
  validate(job, "job");
  const std::vector<Machine> machines = late_gather_machines();
  const JobSearchResult found = search_job(job, machines, quick_search());
  CHECK(found.searched == 1);
  REQUIRE(found.ranks.size() == 2);
  CHECK(found.ranks[0].source == RankPlan::Source::kOwnSearch);
  CHECK_THAT(found.ranks[0].why, Catch::Contains("its workload differs"));
  CHECK(found.ranks[0].plan.decisions.size() == 4);  // a, b, d, e
  CHECK(found.ranks[1].plan.decisions.size() == 3);
  CHECK(found.searched_run.programs.size() == 2);
  CHECK_THAT(job_search_text(found, job, machines),
             Catch::Contains("rank 0 searched on its own: its workload differs"));
}

TEST_CASE("a job's comparison runs each policy on every rank, the ranks together",
          "[search][job][comparison]") {
  const Job job = late_gather_job();
  const std::vector<Machine> machines = late_gather_machines();
  const JobComparison comparison = compare_job_policies(job, machines);
  // Ranked by the step back to back: in core rank 0 sets it, 9300 (rank 1's own 8500 of work and
  // the gather's 200 fit inside it); rank 1 is still the last to end alone.
  CHECK(comparison.ideal_ns == 9300);
  CHECK(comparison.ideal_slowest == 1);
  REQUIRE(comparison.rows.size() == memplan::test::unsharded_policy_count());
  const std::vector<NetworkView> views{NetworkView(job.ranks[0]), NetworkView(job.ranks[1])};
  for (std::size_t p = 0; p < memplan::test::unsharded_policy_count(); ++p) {
    const JobComparisonRow& row = comparison.rows[p];
    CAPTURE(row.policy);
    // Each rank's plan is the policy's decision on that rank alone.
    REQUIRE(row.decisions.size() == 2);
    for (std::size_t r = 0; r < 2; ++r) {
      Evaluator evaluator(job.ranks[r], machines[r]);
      CHECK(row.decisions[r].plan == policies()[p].decide(evaluator, views[r]).plan);
    }
    if (row.feasible()) {
      CHECK(row.step_ns() >= 9300);
      CHECK(row.overhead == Approx(static_cast<double>(row.step_ns()) / 9300 - 1));
    } else {
      CHECK_THAT(job_why_not(row, job), Catch::StartsWith("rank "));
    }
  }
  // In core nothing fits, on either rank; a policy that swaps a hides it in rank 1's wait.
  const JobComparisonRow& in_core = comparison.rows[0];
  REQUIRE(in_core.policy == "in-core");
  CHECK_FALSE(in_core.feasible());
  CHECK_THAT(job_why_not(in_core, job), Catch::Contains("rank 0: out of device memory at op 'f3'"));
  CHECK_THAT(job_why_not(in_core, job), Catch::Contains("rank 1: out of device memory at op 'f3'"));
  const std::vector<std::size_t> order = comparison.ranking();
  const JobComparisonRow& best = comparison.rows[order.front()];
  REQUIRE(best.feasible());
  // Back to back the best row recomputes a on rank 1 (+300: its own 8800 and the gather's 200
  // still fit in rank 0's 9300), where a swap's copy-out would hold it until 1300 and make its own
  // step 9600, the period (the search's plan, below); rank 0's swap hides under f2.
  CHECK(best.step_ns() == 9300);
  CHECK(best.run.timeline.slowest == 1);
  CHECK(action_of(best.decisions[1].plan, job.ranks[1], "f1_out") == Action::kRecompute);
  // Rank 1 reaches ag at 400 and waits 2600 for rank 0; rank 0 does not wait.
  CHECK(best.wait_ns() == 2600);

  const nlohmann::json j = job_comparison_json(comparison, job, machines);
  CHECK(j["ideal_s"] == Approx(9300e-9));
  CHECK(j["ideal_slowest_rank"] == 1);
  CHECK(j["world_size"] == 2);
  REQUIRE(j["rows"].size() == memplan::test::unsharded_policy_count());
  const nlohmann::json& first = j["rows"][order.front()];
  CHECK(first["rank"] == 1);
  CHECK(first["feasible"] == true);
  CHECK(first["slowest_rank"] == 1);
  CHECK(first["wait_s"] == Approx(2600e-9));
  REQUIRE(first["ranks"].size() == 2);
  CHECK(first["ranks"][1]["rank"] == 1);
  CHECK(first["ranks"][1].contains("collectives"));
  CHECK(first["ranks"][1].contains("note"));
  CHECK(j["rows"][0]["step_s"].is_null());

  const std::string text = job_comparison_text(comparison, job, machines);
  CHECK_THAT(text, Catch::StartsWith("job 2 of 2 ranks (nccl)"));
  CHECK_THAT(text, Catch::Contains("why not: rank 0: out of device memory"));
  const std::string csv = job_comparison_csv(comparison, job);
  CHECK(std::count(csv.begin(), csv.end(), '\n') ==
        static_cast<long>(1 + 2 * memplan::test::unsharded_policy_count()));
  CHECK_THAT(csv, Catch::StartsWith("policy,rank,feasible,step_s,slowest_rank,"));
}

TEST_CASE("the oracle answers a workload with side streams as a fresh lowering does",
          "[search][job]") {
  // Each policy decides with an Evaluator (which may keep a base and its checkpoints), then the
  // same Evaluator prices the plan: a workload with side streams is never resumed or checkpointed
  // (its frees wait on side streams), so the answer is a fresh lowering and engine run's.
  const Job job = late_gather_job();
  const Workload& w = job.ranks[1];
  const Machine m = late_gather_machines()[1];
  const NetworkView view(w);
  for (const Policy& policy : policies()) {
    CAPTURE(policy.name);
    Evaluator used(w, m);
    const Plan plan = policy.decide(used, view).plan;
    const Evaluation again = used.cost(plan);
    Evaluator fresh(w, m);
    const Evaluation want = fresh.cost(plan);
    CHECK(again.feasible == want.feasible);
    CHECK(again.iteration_ns == want.iteration_ns);
  }
}
