// Note [Exact plan search]
// `memplan search --exact` finds the fastest plan of a small instance and proves it, with the
// simulator as the oracle.
//
// What "optimal" ranges over. The space S holds every plan that gives each feature map one of:
// keep; recompute (where validate_plan allows it); each enabled Gist encoding that applies to the
// map; swap with the prefetch issued before ANY op p with drop < p <= first backward use (drop is
// the later of the producer and the last forward use; the default prefetch point is one of these)
// — and gives each op with alternative algorithms (Op::algorithms) one of them or its default;
// every other tensor stays on the device (no host placement, Note [Host placement] in
// core/plan.hpp: the heuristic search that seeds the incumbent runs without it, so the offload
// policies do not seed), and every swapped map is freed at its last forward use (no release
// points, Note [Release point] in core/plan.hpp: moving a wait later can make the step faster,
// which fact (2) below excludes; the seeding search runs without them and frees PoocH's and
// Capuchin's swapped maps at their last forward use).
// |S| is the product of the options per variable (458,640 for traces/resnet_tiny.json: 6 maps,
// 2 ops with a second algorithm). The result is the minimum of S by iteration time, ties broken by
// the tree's order (below). Every policy's plan without moved release points and every plan the
// heuristic search can reach without them lie in S, so the exact result is never slower than
// theirs; the heuristic's plan (seeded with every
// policy) is the incumbent the tree must beat, and the answer when nothing in S is faster.
//
// Two facts about the simulator make the bounds work (docs/simulator.md): (1) memory never changes
// timing — an allocation is instantaneous or ends the run — so a plan that fits takes exactly as
// long as on an unlimited device; (2) the engine is a max-plus system of in-order streams, so
// adding instructions or waits, or lengthening one, never makes anything finish earlier. Making a
// map anything but keep, or an op slower, only adds work — except through regeneration: a
// recompute re-runs a producer and adopts its other outputs, so a sibling that was swapped or
// encoded comes back for free, and a regeneration restores the maps it reads on demand. Hence the
// branching order and the relaxation below. The bound's monotonicity is also checked on every edge
// of the tree (bound_violations, required to be 0 by the tests), and brute force over the whole of
// S agrees with the tree on small instances (tests/search/engine/exact_test.cpp).
//
// Branch and bound. Variables are decided in a fixed order: maps from the last producer to the
// first (siblings together), then algorithm choices. A node fixes a prefix of them; the free ones
// take option 0 (keep; the fastest algorithm), which gives the node's bounding plan, and every
// free map is produced no later than every fixed one. So whatever the free maps become, the
// regenerations they cause re-run only ops at or before their producers: the only fixed maps they
// can hand back for free are siblings of a free map, and the bound keeps those too (the relaxed
// plan). The relaxed plan's time on an unlimited device is a lower bound on every plan of the
// subtree (at the root: the ideal in-core time). When the bounding plan fits it is offered to the
// incumbent, and when it also meets the bound it is the subtree's optimum: one simulation solves
// the subtree. Option 0's child has its parent's bounding plan and inherits its simulation, so no
// plan is simulated twice. The bounding plan is timed first without its memory (Note [Runs
// without device memory] in sim/engine.hpp); only a node its bound does not cut checks whether
// that plan fits. Pruning:
//   - memory: every map is resident from its producer to its drop point and from its first to its
//     last backward use, whatever the plan; a kept map also in between, a swapped one from its
//     prefetch point on, an encoded one with its encoded size in between; each op needs at least
//     its smallest workspace. With every other tensor's unavoidable lifetime (each op's inputs and
//     outputs, pre-existing tensors until their last reader, other tensors from producer to last
//     reader), each at the arena's 512-byte granularity, the largest sum over ops is a lower bound
//     on the arena any plan of the subtree needs; a child above the device is cut unsimulated.
//   - time: a node whose (time bound, position) is not below the incumbent's is cut.
// Symmetry: two paths of the tree differ in some variable's option, so every plan of S is reached
// once and no memo table is needed.
//
// Parallelism and determinism. The root is expanded breadth first until there are about 16 open
// nodes per thread; oneTBB then runs a depth-first search from each (one pair of Evaluators per
// worker) sharing the incumbent under a mutex. A plan's position is its path of option indices, so
// the result — the minimum of (time, position) over S and the heuristic's plan — is the same for
// any thread count and any scheduling (the heuristic runs with --deterministic); only the counts of
// nodes explored and pruned vary with the threads. A time limit that stops the search leaves the
// result unproven (`optimal` false).
#include "search/engine/exact.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/task_arena.h>

#include "core/check.hpp"
#include "memory/device_arena.hpp"
#include "search/engine/cut_odds.hpp"
#include "search/parallel.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search {
namespace {

constexpr std::size_t kOpenNodesPerThread = 16;

// One option of a variable: for a map its action (and encoding or prefetch point); for an op
// with alternative algorithms the algorithm (-1: the default).
struct Option {
  sim::Action action = sim::Action::kKeep;
  sim::Encoding encoding = sim::Encoding::kNone;
  sim::OpId prefetch_before = sim::kNoOp;
  std::int32_t algorithm = -1;
};

// A decision of the tree: a feature map, or an op with alternative algorithms. Option 0 is the
// one the bounding plan takes while the variable is free (keep; the fastest algorithm).
struct Variable {
  int map = -1;               // index into feature_maps(), or -1
  sim::OpId op = sim::kNoOp;  // the op whose algorithm it chooses, when map < 0
  std::vector<Option> options;
};

// The variables in branching order, and the memory lower bound's ingredients: per op, the part
// no plan can avoid; per option, what it adds.
class Space {
 public:
  Space(const NetworkView& view, const EncodingOptions& encodings) : view_(view) {
    const sim::Workload& w = view.workload();
    const std::size_t n_ops = w.ops.size();
    const auto& maps = view.feature_maps();
    last_reader_.assign(w.tensors.size(), sim::kNoOp);
    for (const sim::Op& op : w.ops) {
      for (sim::TensorId t : op.inputs) {
        auto& last = last_reader_[index(t)];
        last = std::max(last, op.id);
      }
    }
    // Unavoidable residency: each op's own tensors and smallest workspace, then everything live
    // across it.
    base_.assign(n_ops, 0);
    std::vector<std::vector<sim::TensorId>> own(n_ops);
    for (const sim::Op& op : w.ops) {
      auto& mine = own[index(op.id)];
      mine = op.inputs;
      mine.insert(mine.end(), op.outputs.begin(), op.outputs.end());
      std::sort(mine.begin(), mine.end());
      mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
      sim::Bytes bytes = workspace(min_workspace(op));
      for (sim::TensorId t : mine) {
        const sim::Tensor& tensor = w.tensor(t);
        const bool aliased = tensor.producer == op.id && tensor.in_place_of != sim::kNoTensor;
        if (!aliased) bytes += sim::DeviceArena::aligned_size(tensor.bytes);
      }
      base_[index(op.id)] = bytes;
    }
    auto add_interval = [&](sim::TensorId t, sim::OpId from, sim::OpId to) {
      for (sim::OpId i = std::max(from, sim::OpId{0}); i <= to; ++i) {
        const auto& mine = own[index(i)];
        if (!std::binary_search(mine.begin(), mine.end(), t))
          base_[index(i)] += sim::DeviceArena::aligned_size(w.tensor(t).bytes);
      }
    };
    std::vector<int> map_of(w.tensors.size(), -1);
    for (std::size_t m = 0; m < maps.size(); ++m)
      map_of[index(maps[m].tensor)] = static_cast<int>(m);
    for (const sim::Tensor& t : w.tensors) {
      const sim::OpId last = last_reader_[index(t.id)];
      const int m = map_of[index(t.id)];
      if (t.producer == sim::kNoOp) {
        if (last != sim::kNoOp) add_interval(t.id, sim::OpId{0}, last);
      } else if (m >= 0) {
        const sim::FeatureMap& fm = maps[static_cast<std::size_t>(m)];
        add_interval(t.id, t.producer, drop(m));
        add_interval(t.id, fm.backward_uses.front(), last);
      } else {
        add_interval(t.id, t.producer, std::max(t.producer, last));
      }
    }

    // Maps from the last producer to the first (siblings together, by tensor id), then ops.
    std::vector<int> order(maps.size());
    for (std::size_t m = 0; m < maps.size(); ++m) order[m] = static_cast<int>(m);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return view.producer(a) > view.producer(b); });
    for (int m : order) variables_.push_back(map_variable(m, encodings));
    for (const sim::Op& op : w.ops) {
      if (op.algorithms.empty()) continue;
      Variable v;
      v.op = op.id;
      std::vector<std::int32_t> all{-1};
      for (std::size_t a = 0; a < op.algorithms.size(); ++a)
        all.push_back(static_cast<std::int32_t>(a));
      std::stable_sort(all.begin(), all.end(), [&](std::int32_t a, std::int32_t b) {
        return duration(op, a) < duration(op, b);
      });
      for (std::int32_t a : all)
        v.options.push_back({sim::Action::kKeep, sim::Encoding::kNone, sim::kNoOp, a});
      variables_.push_back(std::move(v));
    }
    position_of_map_.assign(maps.size(), 0);
    for (std::size_t i = 0; i < variables_.size(); ++i) {
      if (variables_[i].map >= 0) position_of_map_[static_cast<std::size_t>(variables_[i].map)] = i;
    }
    count_subtree_plans();
  }

  /// Plans in the subtree of a node that fixes `depth` variables.
  [[nodiscard]] double subtree_plans(std::size_t depth) const { return subtree_plans_[depth]; }

  [[nodiscard]] const std::vector<Variable>& variables() const { return variables_; }
  [[nodiscard]] const std::vector<sim::Bytes>& base() const { return base_; }
  /// Position in variables() of a map's variable.
  [[nodiscard]] std::size_t position_of_map(int map) const {
    return position_of_map_[static_cast<std::size_t>(map)];
  }
  [[nodiscard]] sim::OpId drop(int map) const {
    const sim::FeatureMap& fm = view_.feature_maps()[static_cast<std::size_t>(map)];
    const sim::OpId producer = view_.producer(map);
    return fm.forward_uses.empty() ? producer : std::max(producer, fm.forward_uses.back());
  }

  // Adds what an option keeps resident beyond the unavoidable: for a map, between its drop and
  // its first backward use; for an algorithm, workspace beyond the smallest.
  void add_option(const Variable& v, const Option& o, std::vector<sim::Bytes>& load) const {
    if (v.map < 0) {
      const sim::Op& op = view_.workload().op(v.op);
      load[index(v.op)] += workspace(op_workspace(op, o.algorithm)) - workspace(min_workspace(op));
      return;
    }
    const sim::FeatureMap& fm = view_.feature_maps()[static_cast<std::size_t>(v.map)];
    const sim::Tensor& tensor = view_.workload().tensor(fm.tensor);
    sim::OpId from = drop(v.map) + 1;
    sim::Bytes bytes = 0;
    switch (o.action) {
      case sim::Action::kKeep:
        bytes = sim::DeviceArena::aligned_size(tensor.bytes);
        break;
      case sim::Action::kSwap:
        from = o.prefetch_before;
        bytes = sim::DeviceArena::aligned_size(tensor.bytes);
        break;
      case sim::Action::kEncode:
        bytes = sim::DeviceArena::aligned_size(sim::encoded_bytes(o.encoding, tensor));
        break;
      case sim::Action::kRecompute:
        return;
    }
    for (sim::OpId i = from; i < fm.backward_uses.front(); ++i) load[index(i)] += bytes;
  }

 private:
  static sim::Bytes workspace(sim::Bytes bytes) {
    return bytes > 0 ? sim::DeviceArena::aligned_size(bytes) : 0;
  }
  static sim::Bytes op_workspace(const sim::Op& op, std::int32_t algorithm) {
    return algorithm < 0 ? op.workspace_bytes
                         : op.algorithms[static_cast<std::size_t>(algorithm)].workspace_bytes;
  }
  static sim::Nanoseconds duration(const sim::Op& op, std::int32_t algorithm) {
    return algorithm < 0 ? op.duration_ns
                         : op.algorithms[static_cast<std::size_t>(algorithm)].duration_ns;
  }
  static sim::Bytes min_workspace(const sim::Op& op) {
    sim::Bytes least = op.workspace_bytes;
    for (const sim::Algorithm& a : op.algorithms) least = std::min(least, a.workspace_bytes);
    return least;
  }

  void count_subtree_plans() {
    subtree_plans_.assign(variables_.size() + 1, 1.0);
    for (std::size_t i = variables_.size(); i-- > 0;) {
      subtree_plans_[i] = subtree_plans_[i + 1] * static_cast<double>(variables_[i].options.size());
    }
  }

  Variable map_variable(int map, const EncodingOptions& encodings) const {
    const sim::Workload& w = view_.workload();
    const sim::FeatureMap& fm = view_.feature_maps()[static_cast<std::size_t>(map)];
    Variable v;
    v.map = map;
    auto allowed = [&](const Option& o) {
      sim::Decision d;
      d.tensor = fm.tensor;
      d.action = o.action;
      d.encoding = o.encoding;
      d.prefetch_before = o.prefetch_before;
      return sim::decision_problem(d, fm, w).empty();
    };
    v.options.push_back({sim::Action::kKeep, sim::Encoding::kNone, sim::kNoOp, -1});
    std::vector<sim::Encoding> codecs;
    if (encodings.binarize) codecs.push_back(sim::Encoding::kBinarize);
    if (encodings.sparse) codecs.push_back(sim::Encoding::kSparse);
    if (encodings.precision_reduction) codecs.push_back(*encodings.precision_reduction);
    for (sim::Encoding e : codecs) {
      const Option o{sim::Action::kEncode, e, sim::kNoOp, -1};
      if (allowed(o)) v.options.push_back(o);
    }
    for (sim::OpId p = fm.backward_uses.front(); p > drop(map); --p) {
      const Option o{sim::Action::kSwap, sim::Encoding::kNone, p, -1};
      if (allowed(o)) v.options.push_back(o);
    }
    const Option recompute{sim::Action::kRecompute, sim::Encoding::kNone, sim::kNoOp, -1};
    if (allowed(recompute)) v.options.push_back(recompute);
    return v;
  }

  const NetworkView& view_;
  std::vector<Variable> variables_;
  std::vector<std::size_t> position_of_map_;
  std::vector<double> subtree_plans_;  // per depth, the product of the options from there on
  std::vector<sim::Bytes> base_;
  std::vector<sim::OpId> last_reader_;
};

using Path = std::vector<std::uint16_t>;

// The largest of a node's per-op memory lower bounds: 0 for a step without ops (no bound).
sim::Bytes peak_load(const std::vector<sim::Bytes>& load) {
  return load.empty() ? 0 : *std::max_element(load.begin(), load.end());
}

// Position order: element by element, a missing element counting as 0 (option 0), so a node's
// bounding plan has its node's position and precedes the rest of its subtree.
int compare_paths(const Path& a, const Path& b) {
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t x = i < a.size() ? a[i] : 0;
    const std::uint16_t y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

struct Key {
  sim::Nanoseconds time = std::numeric_limits<sim::Nanoseconds>::max();
  bool seed = false;  // the heuristic's plan ranks before the tree's plans at equal time
  Path path;
};

bool operator<(const Key& a, const Key& b) {
  if (a.time != b.time) return a.time < b.time;
  if (a.seed != b.seed) return a.seed;
  return compare_paths(a.path, b.path) < 0;
}

// A node fixes variables[0 .. path.size()); the others take option 0.
struct Node {
  Path path;
  std::vector<sim::Bytes> load;      // memory lower bound per op
  bool simulated = false;            // `real` and `complete_ns` are known (inherited by child 0)
  Evaluation real;                   // the bounding plan on the device
  sim::Nanoseconds complete_ns = 0;  // the bounding plan's time on an unlimited device
  sim::Nanoseconds parent_bound = 0;
};

struct Worker {
  Worker(const sim::Workload& w, const sim::Machine& machine,
         const std::vector<sim::Nanoseconds>& ready)
      : real(w, machine, ready), relaxed(w, machine, ready) {
    real.measure_step(true);  // the winner is weighed against the heuristic's by better()
  }
  Evaluator real;
  Evaluator relaxed;  // relaxed plans' times (Evaluator::time: an unlimited device)
  std::size_t explored = 0, pruned_memory = 0, pruned_time = 0, pruned_lower_bound = 0,
              solved_by_bound = 0, violations = 0, lower_bound_solves = 0;
  CutOdds bound_odds;  // where the decided maps' bound is solved
};

class Solver {
 public:
  Solver(const sim::Workload& workload, const sim::Machine& machine, const NetworkView& view,
         const Space& space, const ExactOptions& options)
      : view_(view),
        space_(space),
        capacity_(machine.memory_bytes),
        options_(options),
        start_(std::chrono::steady_clock::now()),
        blank_(keep_all(view, "exact")) {
    workers_ = std::make_unique<tbb::enumerable_thread_specific<std::unique_ptr<Worker>>>(
        [&workload, machine, ready = options.collective_ready_ns] {
          return std::make_unique<Worker>(workload, machine, ready);
        });
    producer_maps_.assign(view.workload().ops.size(), {});
    for (std::size_t m = 0; m < view.feature_maps().size(); ++m)
      producer_maps_[index(view.producer(static_cast<int>(m)))].push_back(static_cast<int>(m));
    // The lower bound of the node's decided maps (not for a rank among fixed peers: it does not
    // model their collectives' waits).
    if (options.collective_ready_ns.empty()) {
      BoundOptions bo;
      bo.encodings = options.encodings;
      bo.host_placement = false;
      decided_bound_ = std::make_unique<DecidedMapsBound>(workload, machine, bo);
    }
  }

  void seed(const sim::Plan& plan, const Evaluation& e) {
    if (!e.feasible) return;
    best_key_ = {e.iteration_ns, true, {}};
    best_plan_ = plan;
    best_eval_ = e;
    best_is_seed_ = true;
    best_time_.store(e.iteration_ns);
  }

  void run(int threads, tbb::task_arena& arena) {
    Node root;
    root.load = space_.base();
    if (peak_load(root.load) > capacity_) {
      ++root_pruned_;
      return;
    }
    std::vector<Node> open{root};
    const std::size_t target =
        threads > 1 ? kOpenNodesPerThread * static_cast<std::size_t>(threads) : 1;
    Worker& driver = *workers_->local();
    while (!open.empty() && open.size() < target) {
      std::vector<Node> next;
      for (Node& n : open) {
        for (Node& c : expand(n, driver)) next.push_back(std::move(c));
      }
      open = std::move(next);
    }
    arena.execute([&] {
      parallel_each(
          0, open.size(), [&](std::size_t i) { depth_first(open[i], *workers_->local()); },
          Split::kOnePerTask);
    });
  }

  void fill(ExactResult& result) const {
    result.optimal = !stopped_.load();
    for (const std::unique_ptr<Worker>& w : *workers_) {
      result.explored += w->explored;
      result.pruned_memory += w->pruned_memory;
      result.pruned_time += w->pruned_time;
      result.lower_bound_solves += w->lower_bound_solves;
      result.pruned_lower_bound += w->pruned_lower_bound;
      result.solved_by_bound += w->solved_by_bound;
      result.bound_violations += w->violations;
      result.evaluated += w->real.count() + w->relaxed.count();
    }
    result.pruned_memory += root_pruned_;
    if (found_in_space()) {
      result.plan = best_plan_;
      result.evaluation = best_eval_;
    }
  }

  [[nodiscard]] bool found_in_space() const { return best_eval_.feasible && !best_is_seed_; }

 private:
  // The bounding plan of a node: fixed variables as fixed, free ones at option 0. `relax`: also
  // keep each fixed map that shares its producer with a free map (Note: a free sibling's
  // recompute re-runs their producer and hands the fixed map back for free).
  [[nodiscard]] sim::Plan plan_of(const Node& n, bool relax) const {
    sim::Plan plan = blank_;
    const auto& vars = space_.variables();
    for (std::size_t i = 0; i < n.path.size(); ++i) {
      const Variable& v = vars[i];
      const Option& o = v.options[n.path[i]];
      if (v.map >= 0) {
        if (relax && has_free_sibling(v.map, n.path.size())) continue;
        sim::Decision& d = plan.decisions[static_cast<std::size_t>(v.map)];
        d.action = o.action;
        d.encoding = o.encoding;
        d.prefetch_before = o.prefetch_before;
      }
    }
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const Variable& v = vars[i];
      if (v.map >= 0) continue;
      const Option& o = v.options[i < n.path.size() ? n.path[i] : 0];
      if (o.algorithm >= 0) plan.algorithms.push_back({v.op, o.algorithm});
    }
    std::sort(
        plan.algorithms.begin(), plan.algorithms.end(),
        [](const sim::AlgorithmChoice& a, const sim::AlgorithmChoice& b) { return a.op < b.op; });
    return plan;
  }

  // The lower bound over the node's subtree: the plans with its decided maps (search/bound/).
  [[nodiscard]] sim::Nanoseconds decided_maps_bound(const Node& n) const {
    std::vector<std::optional<sim::Decision>> decided(view_.workload().tensors.size());
    const auto& vars = space_.variables();
    for (std::size_t i = 0; i < n.path.size(); ++i) {
      const Variable& v = vars[i];
      if (v.map < 0) continue;
      const Option& o = v.options[n.path[i]];
      sim::Decision d;
      d.tensor = view_.feature_maps()[static_cast<std::size_t>(v.map)].tensor;
      d.action = o.action;
      d.encoding = o.encoding;
      d.prefetch_before = o.prefetch_before;
      decided[index(d.tensor)] = d;
    }
    return decided_bound_->bound(decided).bound_ns;
  }

  [[nodiscard]] bool has_free_sibling(int map, std::size_t fixed) const {
    for (int s : producer_maps_[index(view_.producer(map))]) {
      if (s != map && space_.position_of_map(s) >= fixed) return true;
    }
    return false;
  }

  [[nodiscard]] bool needs_relaxing(const Node& n) const {
    const auto& vars = space_.variables();
    for (std::size_t i = 0; i < n.path.size(); ++i) {
      if (vars[i].map >= 0 && n.path[i] != 0 && has_free_sibling(vars[i].map, n.path.size()))
        return true;
    }
    return false;
  }

  // Whether no plan of the subtree (time >= bound, position >= path) can beat the incumbent.
  bool dominated(sim::Nanoseconds bound, const Path& path) {
    const sim::Nanoseconds best = best_time_.load(std::memory_order_relaxed);
    if (bound < best) return false;
    if (bound > best) return true;
    const std::lock_guard<std::mutex> lock(mutex_);
    return !(Key{bound, false, path} < best_key_);
  }

  void offer(const Node& n, const sim::Plan& plan, const Evaluation& e) {
    Key key{e.iteration_ns, false, n.path};
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!(key < best_key_)) return;
    best_key_ = std::move(key);
    best_plan_ = plan;
    best_plan_.policy = "exact";
    best_eval_ = e;
    best_is_seed_ = false;
    best_time_.store(e.iteration_ns);
  }

  bool out_of_time() {
    if (options_.time_limit_s <= 0) return false;
    if (stopped_.load(std::memory_order_relaxed)) return true;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s > options_.time_limit_s) stopped_.store(true);
    return stopped_.load(std::memory_order_relaxed);
  }

  // Bounds a node; returns its children (none when the subtree is solved or cut).
  std::vector<Node> expand(Node& n, Worker& worker) {
    if (out_of_time()) return {};
    ++worker.explored;
    const sim::Plan plan = plan_of(n, false);
    if (!n.simulated) {  // its time first: a node its bound cuts needs no memory check
      const Evaluation e = worker.real.time(plan);
      n.complete_ns = e.feasible ? e.iteration_ns : std::numeric_limits<sim::Nanoseconds>::max();
    }
    sim::Nanoseconds bound = n.complete_ns;
    if (needs_relaxing(n)) {
      const Evaluation e = worker.relaxed.time(plan_of(n, true));
      if (e.feasible) bound = std::min(bound, e.iteration_ns);
    }
    if (bound < n.parent_bound) ++worker.violations;
    bound = std::max(bound, n.parent_bound);
    if (dominated(bound, n.path)) {  // the bounding plan included: no better (time, position)
      ++worker.pruned_time;
      return {};
    }
    if (!n.simulated) {
      n.real = worker.real.cost(plan);  // the same lowering as its time's
      n.simulated = true;
    }
    // A plan the rules refuse (a lossily kept map read by a re-run op) is no answer, but the
    // bound still holds for the rest of its subtree.
    const bool allowed =
        !sim::lossy_map_recomputed_from(plan, view_.feature_maps(), view_.workload());
    if (n.real.feasible && allowed) {
      offer(n, plan, n.real);
      if (n.real.iteration_ns <= bound) {
        ++worker.solved_by_bound;
        return {};
      }
    }
    if (decided_bound_ &&
        worker.bound_odds.worth_solving(n.path.size(), space_.subtree_plans(n.path.size()))) {
      ++worker.lower_bound_solves;
      const bool cut = dominated(decided_maps_bound(n), n.path);
      worker.bound_odds.record(n.path.size(), cut);
      if (cut) {
        ++worker.pruned_lower_bound;
        return {};
      }
    }
    const std::size_t depth = n.path.size();
    if (depth == space_.variables().size()) return {};
    const Variable& v = space_.variables()[depth];
    std::vector<Node> children;
    children.reserve(v.options.size());
    for (std::size_t i = 0; i < v.options.size(); ++i) {
      Node c;
      c.load = n.load;
      space_.add_option(v, v.options[i], c.load);
      if (peak_load(c.load) > capacity_) {
        ++worker.pruned_memory;
        continue;
      }
      c.path = n.path;
      c.path.push_back(static_cast<std::uint16_t>(i));
      c.parent_bound = bound;
      if (i == 0) {  // the same bounding plan as its parent
        c.simulated = true;
        c.real = n.real;
        c.complete_ns = n.complete_ns;
      }
      children.push_back(std::move(c));
    }
    return children;
  }

  void depth_first(Node& n, Worker& worker) {
    for (Node& c : expand(n, worker)) depth_first(c, worker);
  }

  const NetworkView& view_;
  const Space& space_;
  sim::Bytes capacity_;
  const ExactOptions& options_;
  std::chrono::steady_clock::time_point start_;
  sim::Plan blank_;
  std::unique_ptr<tbb::enumerable_thread_specific<std::unique_ptr<Worker>>> workers_;
  std::vector<std::vector<int>> producer_maps_;
  std::unique_ptr<DecidedMapsBound> decided_bound_;
  std::size_t root_pruned_ = 0;

  std::mutex mutex_;
  Key best_key_;
  sim::Plan best_plan_;
  Evaluation best_eval_;
  bool best_is_seed_ = false;
  std::atomic<sim::Nanoseconds> best_time_{std::numeric_limits<sim::Nanoseconds>::max()};
  std::atomic<bool> stopped_{false};
};

}  // namespace

ExactResult branch_and_bound(const sim::Workload& workload, const sim::Machine& machine,
                             const ExactOptions& options, const SearchResult& heuristic) {
  const NetworkView view(workload);
  MEMPLAN_CHECK(view.feature_maps().size() <= kExactMaxMaps,
                "exact mode is asked only for instances it can address");
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  tbb::task_arena arena(arena_concurrency(threads));
  ExactResult result;
  result.plan = heuristic.plan;
  result.evaluation = heuristic.evaluation;
  result.heuristic_evaluation = heuristic.evaluation;
  result.best_policy = heuristic.best_policy;
  result.best_policy_evaluation = heuristic.best_policy_evaluation;
  result.from_heuristic = true;

  const Space space(view, options.encodings);
  result.space_plans = 1.0;
  for (const Variable& v : space.variables())
    result.space_plans *= static_cast<double>(v.options.size());

  Solver solver(workload, machine, view, space, options);
  solver.seed(heuristic.plan, heuristic.evaluation);
  solver.run(threads, arena);
  solver.fill(result);
  result.from_heuristic = !solver.found_in_space();
  // The branch and bound's bounds are on the step alone (identical to the step back to back
  // without a host side); with one, its plan replaces the heuristic's only when a training loop
  // sees it faster too (better: the step back to back first).
  if (!result.from_heuristic && !better(result.evaluation, heuristic.evaluation)) {
    result.plan = heuristic.plan;
    result.evaluation = heuristic.evaluation;
    result.from_heuristic = true;
  }
  result.evaluated += heuristic.evaluated;
  return result;
}

}  // namespace memplan::search
