#include "importers/kineto/kineto_importer.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"
#include "importers/kineto/host_side.hpp"
#include "importers/kineto/memory_timeline.hpp"
#include "importers/kineto/saturating_add.hpp"

// Note [Kineto dataflow]
// ~~~~~~~~~~~~~~~~~~~~~~
// The profiler records, for each operator, its name, its input shapes and dtypes, and for ops that
// autograd differentiates a sequence number; it does not record which tensor an op read. The
// importer rebuilds the layer-level dataflow as follows.
//
//  - Layer ops are the top-level operators of the step on the thread that calls prof.step() (the
//    forward ops, the optimizer step), and the top-level events of the other threads inside the
//    step window (the autograd engine's backward nodes). Annotations (nn.Module, user ranges) are
//    looked through; the data loader's `enumerate(DataLoader)` is skipped.
//  - Forward ops run in program order. An op's first data input is the previous layer op's output
//    when the shapes agree (a chain). When they do not, the op starts a branch, and its input is
//    the oldest live tensor of that shape produced since the last merge (a residual add): that is
//    the block input a downsample branch reads. The second input of an add (the skip) is the most
//    recent live tensor of that shape that no add has read yet. A tensor written over in place is
//    no longer a candidate. Inputs that match nothing are the network's inputs.
//  - Output shapes that the profiler does not record (convolution, pooling) are taken from the
//    next forward op that reads a tensor of the expected batch and channel extents.
//  - A backward node belongs to the forward op whose subtree recorded its sequence number (the
//    last such op: an op that creates no autograd node records the number the next node gets).
//    Each forward op's first backward node is its backward op; later ones (TBackward of a linear)
//    and AccumulateGrad are folded into it. Saved tensors follow PyTorch's autograd formulas.
//  - Top-level events that are not layer ops (BatchNorm's num_batches_tracked += 1, zero_grad,
//    ones_like, AccumulateGrad, the gradient sums at forks) are folded: their device time is added
//    to the previous layer op, so that the step's total device time is preserved.
// It can be wrong when two live tensors of one shape could both be the input of a branch (the
// rule picks the oldest since the last merge), for ops with several tensor outputs other than the
// known ones, for tensors that are reused far apart (weight sharing, RNN loops), and for
// concatenations (DenseNet), whose inputs are resolved one by one by the same rules.

namespace memplan::importers {
namespace {

using sim::Bytes;
using sim::kNoOp;
using sim::kNoTensor;
using sim::Nanoseconds;
using sim::OpId;
using sim::Phase;
using sim::TensorId;
using sim::TensorKind;
using Shape = std::vector<std::int64_t>;

constexpr std::string_view kStepPrefix = "ProfilerStep#";
constexpr std::string_view kEvaluatePrefix = "autograd::engine::evaluate_function: ";

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

// Backward node name without the engine prefix, or empty when the event is not a backward node.
std::string backward_node(std::string_view name) {
  if (starts_with(name, kEvaluatePrefix)) name.remove_prefix(kEvaluatePrefix.size());
  std::string_view core = name;
  while (!core.empty() && core.back() >= '0' && core.back() <= '9') core.remove_suffix(1);
  if (ends_with(core, "Backward") || ends_with(name, "AccumulateGrad")) return std::string(name);
  return {};
}

bool is_layer_event(std::string_view name) {
  return starts_with(name, "aten::") || starts_with(name, "Optimizer.") ||
         starts_with(name, kEvaluatePrefix) || !backward_node(name).empty();
}

// The per-parameter state PyTorch's optimizers keep (their `state[p]` tensors, shaped like the
// parameter), by the lower-cased class name of `Optimizer.step#Class.step`: the Adam family
// (Adam, AdamW, NAdam, RAdam, Adamax, apex/DeepSpeed FusedAdam, LAMB) keeps two moments, Adadelta
// two accumulators, Rprop the previous gradient and the step sizes, Adagrad a sum, RMSprop the
// squared average, SGD a momentum buffer only with momentum (its update then multiplies: mul_).
std::vector<std::string> optimizer_state_names(std::string_view cls, bool multiplies) {
  auto has = [&](std::string_view part) { return cls.find(part) != std::string_view::npos; };
  if (has("adam") || has("lamb")) return {"exp_avg", "exp_avg_sq"};
  if (has("adadelta")) return {"square_avg", "acc_delta"};
  if (has("rprop")) return {"prev", "step_size"};
  if (has("adagrad")) return {"sum"};
  if (has("rmsprop")) return {"square_avg"};
  if (has("sgd") && multiplies) return {"momentum"};
  return {};
}

// Nesting of CPU events on each thread: parent index or SIZE_MAX.
struct Nesting {
  std::vector<std::size_t> parent;
  std::vector<std::vector<std::size_t>> children;
};

Nesting nest(const std::vector<CpuEvent>& events) {
  Nesting n;
  n.parent.assign(events.size(), SIZE_MAX);
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

Bytes checked_bytes(const Shape& shape, Bytes item, const std::string& where) {
  constexpr Bytes kMax = Bytes{1} << 50;
  Bytes n = item;
  for (std::int64_t e : shape) {
    if (e != 0 && n > kMax / e)
      throw sim::InputError(where, "absurd tensor shape (over 2^50 bytes)");
    n *= e;
  }
  return n;
}

enum class Layer : std::uint8_t {
  kConv,
  kBatchNorm,
  kLayerNorm,
  kRelu,
  kMaxPool,
  kAvgPool,
  kLinear,
  kAdd,
  kView,
  kIdentity,
  kCrossEntropy,
  kGeneric,
  kGlue,
};

struct Unit {
  std::size_t event = 0;
  enum class Role : std::uint8_t { kForward, kBackward, kUpdate, kGlue } role = Role::kGlue;
  Layer layer = Layer::kGlue;
  Nanoseconds device_ns = 0;
  Bytes workspace = 0;
  std::optional<std::int64_t> sequence;     // for backward nodes
  std::set<std::int64_t> sequences;         // for forward ops: every number in the subtree
  std::optional<Nanoseconds> first_launch;  // the first launch of its device work
  OpId op = kNoOp;
};

Unit make_unit(std::size_t event) {
  Unit u;
  u.event = event;
  return u;
}

// A forward value: a tensor as a shape (a view gives the same tensor another shape).
struct Value {
  TensorId tensor = kNoTensor;
  Shape shape;
  std::string dtype;
  bool overwritten = false;  // written over in place: no longer readable
  bool merged = false;       // read by an add already
  bool read = false;         // read by some op already
  bool superseded = false;   // read by a normalisation or activation: its output carries on
  bool activation = false;   // produced by a forward op
};

struct ForwardInfo {
  std::vector<TensorId> data_inputs;  // activations and inputs, for gradients
  std::vector<TensorId> params;       // trainable
  std::vector<TensorId> saved;        // read by the backward op
  TensorId output = kNoTensor;        // the primary output
  Layer layer = Layer::kGlue;
  std::string name;
  bool has_backward = false;
};

std::string layer_string(Layer layer, const std::string& fallback) {
  switch (layer) {
    case Layer::kConv:
      return "conv2d";
    case Layer::kBatchNorm:
      return "batch_norm";
    case Layer::kLayerNorm:
      return "layer_norm";
    case Layer::kRelu:
      return "relu";
    case Layer::kMaxPool:
      return "max_pool2d";
    case Layer::kAvgPool:
      return "avg_pool2d";
    case Layer::kLinear:
      return "linear";
    case Layer::kAdd:
      return "add";
    case Layer::kCrossEntropy:
      return "softmax_cross_entropy";
    default:
      return fallback;
  }
}

// Shape of the recorded input k, or empty.
const Shape& dims(const CpuEvent& e, std::size_t k) {
  static const Shape kEmpty;
  return k < e.input_dims.size() ? e.input_dims[k] : kEmpty;
}
std::string dtype_of(const CpuEvent& e, std::size_t k) {
  return k < e.input_types.size() ? dtype_name(e.input_types[k]) : std::string("float32");
}

Layer classify_forward(const CpuEvent& e) {
  std::string_view name = e.name;
  if (!starts_with(name, "aten::")) return Layer::kGlue;
  name.remove_prefix(6);
  const Shape& x = dims(e, 0);
  if (name == "conv1d" || name == "conv2d" || name == "conv3d" || name == "convolution" ||
      name == "_convolution" || name == "cudnn_convolution") {
    return x.size() >= 3 && dims(e, 1).size() == x.size() ? Layer::kConv : Layer::kGlue;
  }
  if (name == "batch_norm" || name == "native_batch_norm" || name == "cudnn_batch_norm") {
    return x.size() >= 2 ? Layer::kBatchNorm : Layer::kGlue;
  }
  if (name == "layer_norm" || name == "native_layer_norm")
    return x.empty() ? Layer::kGlue : Layer::kLayerNorm;
  if (name == "relu" || name == "relu_") return x.empty() ? Layer::kGlue : Layer::kRelu;
  if (name == "max_pool2d" || name == "max_pool2d_with_indices") {
    return x.size() >= 3 ? Layer::kMaxPool : Layer::kGlue;
  }
  if (name == "adaptive_avg_pool2d" || name == "avg_pool2d" || name == "_adaptive_avg_pool2d") {
    return x.size() >= 3 ? Layer::kAvgPool : Layer::kGlue;
  }
  if (name == "linear" || name == "addmm") {
    const Shape& w = name == "linear" ? dims(e, 1) : dims(e, 2);
    return !x.empty() && w.size() == 2 ? Layer::kLinear : Layer::kGlue;
  }
  if (name == "add" || name == "add_") {
    return !x.empty() && dims(e, 1) == x ? Layer::kAdd : Layer::kGlue;
  }
  if (name == "flatten" || name == "view" || name == "reshape" || name == "_unsafe_view") {
    return x.empty() ? Layer::kGlue : Layer::kView;
  }
  // Copies to the device or to another layout: the same tensor as far as the step is concerned.
  if (name == "to" || name == "_to_copy" || name == "contiguous" || name == "detach" ||
      name == "copy_") {
    return x.empty() ? Layer::kGlue : Layer::kIdentity;
  }
  if (name == "cross_entropy_loss") return x.size() == 2 ? Layer::kCrossEntropy : Layer::kGlue;
  // Any other op that reads a tensor of rank 2 or more is kept as a generic layer.
  for (const Shape& s : e.input_dims) {
    if (s.size() >= 2) return Layer::kGeneric;
  }
  return Layer::kGlue;
}

bool same_shape_prefix(const Shape& s, std::int64_t n, std::int64_t c, std::size_t rank) {
  return s.size() == rank && rank >= 2 && s[0] == n && s[1] == c;
}

std::size_t numel(const Shape& s) {
  std::size_t n = 1;
  for (std::int64_t e : s) n *= static_cast<std::size_t>(e);
  return n;
}

class Importer {
 public:
  Importer(const KinetoTrace& trace, const ImportOptions& options, std::string file_label)
      : trace_(trace), options_(options), file_label_(std::move(file_label)) {}

  ImportResult run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw sim::InputError(trace_.source, what);
  }
  const CpuEvent& event(const Unit& u) const { return trace_.cpu_events[u.event]; }

  StepWindow choose_step();
  StepWindow annotation_step(const std::string& name) const;
  StepWindow window_step() const;
  void fill_host_side();
  bool step_complete(const StepWindow& step) const;
  void collect_units(const StepWindow& step);
  void collect_under(std::size_t parent);
  void attribute_device_time();
  void measure_workspace();
  void classify_units();
  void build_forward(Unit& unit, std::size_t position);
  struct ForwardOp;
  void build_alias(const Unit& unit, std::size_t position);
  std::size_t forward_layer(ForwardOp& f, Layer layer);
  std::size_t forward_conv(ForwardOp& f);
  std::size_t forward_batch_norm(ForwardOp& f);
  std::size_t forward_pool(ForwardOp& f, bool max);
  std::size_t forward_linear(ForwardOp& f);
  std::size_t forward_add(ForwardOp& f);
  std::size_t forward_cross_entropy(ForwardOp& f);
  std::size_t forward_generic(ForwardOp& f);
  void build_timed_forward(Unit& unit);
  std::vector<Shape> widest_tensor_list(std::size_t root) const;
  void check_parameters_against_optimizer();
  struct Leaf {  // a leaf tensor's gradient as an AccumulateGrad node records it
    Shape shape;
    std::string dtype;
  };
  std::optional<Leaf> leaf_of(std::size_t node) const;
  void settle_parameters();
  void make_trainable(TensorId p);
  void check_outputs_against_allocations();
  void build_backward(Unit& unit);
  void build_update(Unit& unit);
  void fold(const Unit& unit);

  Shape lookahead(std::size_t position, std::int64_t n, std::int64_t c, std::size_t rank,
                  const Shape& fallback) const;
  Shape lookahead_view(std::size_t position, const Shape& from) const;
  std::size_t resolve(const Shape& shape, const std::string& dtype, bool first,
                      std::size_t exclude = SIZE_MAX, bool for_merge = false);
  TensorId param(const std::string& name, const Shape& shape, const std::string& dtype,
                 bool trainable);
  std::size_t new_value(TensorId tensor, const Shape& shape, const std::string& dtype,
                        bool activation);
  TensorId add_tensor(std::string name, TensorKind kind, const Shape& shape,
                      const std::string& dtype, OpId producer, TensorId in_place_of = kNoTensor);
  OpId add_op(std::string name, const std::string& layer, Phase phase, const Unit& unit);
  void add_input(OpId op, TensorId t);
  void contribute_gradient(TensorId forward_tensor, TensorId grad, OpId op);
  sim::Op& op(OpId id) { return workload_.ops[index(id)]; }
  const sim::Tensor& tensor(TensorId id) const { return workload_.tensors[index(id)]; }

  const KinetoTrace& trace_;
  const ImportOptions& options_;
  std::string file_label_;
  sim::Workload workload_;
  ImportReport report_;
  Nesting nesting_;
  std::vector<Unit> units_;
  std::unordered_map<OpId, ForwardInfo> forward_;
  std::vector<Value> values_;
  std::optional<std::size_t> last_output_;  // value index
  std::size_t merge_boundary_ = 0;          // values from here on were made since the last merge
  std::map<std::int64_t, OpId> op_of_sequence_;
  std::unordered_map<TensorId, TensorId> grad_of_;  // forward tensor -> its current gradient
  std::vector<TensorId> trainable_;
  std::vector<TensorId> optimizer_state_;
  std::unordered_map<TensorId, TensorId> param_grad_;  // parameter -> gradient or .grad buffer
  std::set<TensorId> saved_;                           // tensors a backward op will read
  std::vector<std::string> state_names_;
  std::string optimizer_name_ = "optimizer";
  OpId last_op_ = kNoOp;
  Nanoseconds pending_ns_ = 0;  // folded time that came before the first op
  std::size_t input_count_ = 0;
  std::map<std::string, int> layer_counts_;
  bool time_only_ = false;  // no recorded shapes in the step: ops with their times, no tensors
  std::vector<Shape> optimizer_list_;  // the parameters as the optimizer's ops record them
  std::vector<Leaf> leaves_;           // the shapes AccumulateGrad nodes record, in backward order
};

bool Importer::step_complete(const StepWindow& step) const {
  if (!report_.gpu) return true;
  std::set<std::int64_t> seen;
  for (const GpuEvent& g : trace_.gpu_events) {
    if (g.correlation) seen.insert(*g.correlation);
  }
  bool launched = false;
  for (const RuntimeEvent& r : trace_.runtime_events) {
    if (r.start_ns < step.start_ns || r.start_ns >= step.end_ns || !r.correlation) continue;
    if (r.name.find("Launch") == std::string::npos) continue;
    launched = true;
    if (seen.count(*r.correlation) == 0) return false;
  }
  return launched;
}

StepWindow Importer::choose_step() {
  const int kinds = (options_.step ? 1 : 0) + (options_.step_annotation ? 1 : 0) +
                    (options_.window ? 1 : 0) + (options_.whole_trace ? 1 : 0);
  if (kinds > 1) fail("choose the step one way: --step, --step-annotation, --window or --whole");
  if (options_.step_annotation) return annotation_step(*options_.step_annotation);
  if (options_.window || options_.whole_trace) return window_step();
  const std::vector<StepWindow> steps = list_steps(trace_);
  if (steps.empty()) {
    fail(
        "no 'ProfilerStep#N' events: call prof.step() once per iteration under "
        "torch.profiler.profile(schedule=...), or name the step with --step-annotation NAME (a "
        "record_function range), --window START:END or --whole");
  }
  std::vector<std::int64_t> numbers;
  numbers.reserve(steps.size());
  for (const auto& s : steps) numbers.push_back(s.number);
  if (options_.step) {
    for (const auto& s : steps) {
      if (s.number == *options_.step) return s;
    }
    fail(fmt::format("no ProfilerStep#{} in the trace (it has ProfilerStep#{})", *options_.step,
                     fmt::join(numbers, ", #")));
  }
  report_.step_was_chosen = true;
  for (const auto& s : steps) {
    if (step_complete(s)) return s;
  }
  fail(fmt::format(
      "no complete step: in each of ProfilerStep#{} some kernel launch has no kernel in "
      "the trace; pass --step N to import one anyway",
      fmt::join(numbers, ", #")));
}

StepWindow Importer::annotation_step(const std::string& name) const {
  for (std::size_t i = 0; i < trace_.cpu_events.size(); ++i) {
    const CpuEvent& e = trace_.cpu_events[i];
    if (e.name == name)
      return {-1, fmt::format("annotation '{}'", name), e.thread, e.start_ns, e.end_ns(), i};
  }
  fail(fmt::format("no event named '{}' (--step-annotation)", name));
}

StepWindow Importer::window_step() const {
  if (trace_.cpu_events.empty()) fail("no CPU events: nothing to import");
  Nanoseconds first = trace_.cpu_events.front().start_ns;
  Nanoseconds last = first;
  for (const CpuEvent& e : trace_.cpu_events) last = std::max(last, e.end_ns());
  for (const GpuEvent& g : trace_.gpu_events) first = std::min(first, g.start_ns);
  if (options_.whole_trace) return {-1, "the whole trace", "", first, last + 1, std::nullopt};
  const auto [from, to] = *options_.window;
  // A window is at most a day long, like any event the parser accepts: no sum overflows.
  constexpr Nanoseconds kDay = Nanoseconds{86400} * 1'000'000'000;
  if (from < 0 || to <= from || to > kDay)
    fail(fmt::format("--window {}:{} ns: expected 0 <= START < END <= one day", from, to));
  return {-1,
          fmt::format("window {:.3f}:{:.3f} ms", static_cast<double>(from) / 1e6,
                      static_cast<double>(to) / 1e6),
          "",
          first + from,
          first + to,
          std::nullopt};
}

void Importer::collect_under(std::size_t parent) {
  for (std::size_t child : nesting_.children[parent]) {
    const std::string& name = trace_.cpu_events[child].name;
    if (starts_with(name, "enumerate(DataLoader)")) continue;
    if (is_layer_event(name)) {
      units_.push_back(make_unit(child));
    } else {
      collect_under(child);
    }
  }
}

void Importer::collect_units(const StepWindow& step) {
  for (std::size_t i = 0; i < trace_.cpu_events.size(); ++i) {
    const CpuEvent& e = trace_.cpu_events[i];
    if (e.start_ns < step.start_ns || e.start_ns >= step.end_ns) continue;
    if (step.event) {
      if (i == *step.event) {
        collect_under(i);
        continue;
      }
      if (e.thread == step.thread) continue;  // inside the step event, or beside it
    }
    if (nesting_.parent[i] != SIZE_MAX &&
        trace_.cpu_events[nesting_.parent[i]].start_ns >= step.start_ns)
      continue;  // collected through its parent
    if (is_layer_event(e.name)) {
      units_.push_back(make_unit(i));
    } else if (!starts_with(e.name, "enumerate(DataLoader)")) {
      collect_under(i);
    }
  }
  std::stable_sort(units_.begin(), units_.end(), [&](const Unit& a, const Unit& b) {
    return trace_.cpu_events[a.event].start_ns < trace_.cpu_events[b.event].start_ns;
  });
}

void Importer::attribute_device_time() {
  if (!report_.gpu) {
    for (Unit& u : units_) u.device_ns = event(u).duration_ns;
    return;
  }
  std::unordered_map<std::int64_t, std::size_t> by_external;
  for (std::size_t i = 0; i < trace_.cpu_events.size(); ++i) {
    if (auto x = trace_.cpu_events[i].external_id) by_external.emplace(*x, i);
  }
  std::unordered_map<std::int64_t, std::size_t> by_correlation;
  for (std::size_t i = 0; i < trace_.runtime_events.size(); ++i) {
    if (auto c = trace_.runtime_events[i].correlation) by_correlation.emplace(*c, i);
  }
  // Units of one thread do not overlap and are sorted by start.
  std::unordered_map<std::string, std::vector<std::size_t>> units_of_thread;
  for (std::size_t u = 0; u < units_.size(); ++u)
    units_of_thread[event(units_[u]).thread].push_back(u);
  // Kernels on several streams overlap, and the step's ops run on one stream: each activity counts
  // only for the time it adds to the device's busy union (events are sorted by start), so the ops'
  // durations add up to the recorded busy time and overlapped work (communication beside
  // compute) is not charged twice.
  Nanoseconds covered_to = std::numeric_limits<Nanoseconds>::min();
  for (const GpuEvent& gpu : trace_.gpu_events) {
    if (gpu.kind == GpuKind::kMemcpy) continue;
    const GpuEvent& g = gpu;
    const Nanoseconds end = g.start_ns + g.duration_ns;  // both bounded by the parser
    const Nanoseconds added = std::max<Nanoseconds>(0, end - std::max(g.start_ns, covered_to));
    covered_to = std::max(covered_to, end);
    const std::string* thread = nullptr;
    Nanoseconds at = 0;
    if (g.correlation) {
      if (auto r = by_correlation.find(*g.correlation); r != by_correlation.end()) {
        thread = &trace_.runtime_events[r->second].thread;
        at = trace_.runtime_events[r->second].start_ns;
      }
    }
    if (thread == nullptr && g.external_id) {
      if (auto c = by_external.find(*g.external_id); c != by_external.end()) {
        thread = &trace_.cpu_events[c->second].thread;
        at = trace_.cpu_events[c->second].start_ns;
      }
    }
    if (thread == nullptr) at = g.start_ns;  // no launch recorded: where it ran
    if (thread != nullptr) {
      if (auto list = units_of_thread.find(*thread); list != units_of_thread.end()) {
        const auto& ids = list->second;
        auto it = std::upper_bound(ids.begin(), ids.end(), at, [&](Nanoseconds t, std::size_t u) {
          return t < event(units_[u]).start_ns;
        });
        if (it != ids.begin() && at < event(units_[*std::prev(it)]).end_ns()) {
          Unit& unit = units_[*std::prev(it)];
          unit.device_ns = saturating_add(unit.device_ns, added);
          unit.first_launch = std::min(unit.first_launch.value_or(at), at);
          continue;
        }
      }
    }
    // Launched inside the step but outside every unit (a communication thread, a hook, an
    // annotation without an aten op): its time goes to the unit that started last before the
    // launch, so that the step's device time is kept whole.
    if (units_.empty() || at < report_.step.start_ns || at >= report_.step.end_ns) continue;
    auto it = std::upper_bound(units_.begin(), units_.end(), at,
                               [&](Nanoseconds t, const Unit& u) { return t < event(u).start_ns; });
    Unit& unit = it == units_.begin() ? units_.front() : *std::prev(it);
    unit.device_ns = saturating_add(unit.device_ns, added);
  }
}

// Each forward op's output, sized from the recorded shapes, against the allocations the op made on
// its thread while it ran (as the allocator rounds them): where the trace's [memory] events carry
// addresses, a check of the shapes, the dtypes and the dataflow's choice of output.
void Importer::check_outputs_against_allocations() {
  const std::int64_t device = report_.gpu ? 1 : 0;
  const auto allocations = pair_allocations(trace_.memory_events, device, trace_.source);
  if (!allocations) return;
  report_.allocations = allocations->size();
  std::unordered_map<std::string, std::vector<std::pair<Nanoseconds, Bytes>>> by_thread;
  for (const Allocation& a : *allocations) {
    if (a.alloc_ns) {
      by_thread[a.thread].emplace_back(*a.alloc_ns, a.bytes);  // in time order
    } else {
      ++report_.allocations_before_trace;
    }
  }
  for (const Unit& u : units_) {
    if (u.role != Unit::Role::kForward || u.op == kNoOp) continue;
    const auto info = forward_.find(u.op);
    if (info == forward_.end() || info->second.output == kNoTensor) continue;
    const Bytes bytes = tensor(info->second.output).bytes;
    if (bytes == 0) continue;
    ++report_.outputs_checked;
    const auto list = by_thread.find(event(u).thread);
    if (list == by_thread.end()) continue;
    const auto& made = list->second;
    auto it = std::lower_bound(made.begin(), made.end(), std::pair{event(u).start_ns, Bytes{0}});
    const Bytes expected = allocator_bytes(bytes, device);
    for (; it != made.end() && it->first < event(u).end_ns(); ++it) {
      if (it->second == expected) {
        ++report_.outputs_confirmed;
        break;
      }
    }
  }
}

void Importer::measure_workspace() {
  const std::int64_t device = report_.gpu ? 1 : 0;
  std::unordered_map<std::string, std::vector<std::size_t>> by_thread;
  for (std::size_t i = 0; i < trace_.memory_events.size(); ++i) {
    if (trace_.memory_events[i].device_type == device)
      by_thread[trace_.memory_events[i].thread].push_back(i);
  }
  for (Unit& u : units_) {
    const CpuEvent& e = event(u);
    auto list = by_thread.find(e.thread);
    if (list == by_thread.end()) continue;
    const auto& ids = list->second;
    auto it = std::lower_bound(
        ids.begin(), ids.end(), e.start_ns,
        [&](std::size_t m, Nanoseconds t) { return trace_.memory_events[m].time_ns < t; });
    Bytes level = 0;
    Bytes high = 0;
    for (; it != ids.end() && trace_.memory_events[*it].time_ns < e.end_ns(); ++it) {
      level = saturating_add(level, trace_.memory_events[*it].bytes);
      high = std::max(high, level);
    }
    // Memory allocated and freed again inside the op: scratch space (cuDNN workspace).
    u.workspace = std::max<Bytes>(0, high - std::max<Bytes>(0, level));
  }
}

// The parameter-shaped tensor list of a foreach or fused optimizer step (PyTorch >= 1.13's
// `_foreach_*` / `_fused_adam(w)_` ops take params, grads and states as lists of equal shapes;
// the step counters are a list of scalars): the list with the most elements in the subtree.
std::vector<Shape> Importer::widest_tensor_list(std::size_t root) const {
  std::vector<Shape> widest;
  std::size_t widest_elements = 0;
  std::vector<std::size_t> todo{root};
  while (!todo.empty()) {
    const std::size_t i = todo.back();
    todo.pop_back();
    todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    for (const auto& list : trace_.cpu_events[i].input_lists) {
      std::size_t elements = 0;
      for (const Shape& shape : list) elements += numel(shape);
      if (elements > widest_elements) {
        widest = list;
        widest_elements = elements;
      }
    }
  }
  return widest;
}

void Importer::classify_units() {
  auto subtree_has = [&](std::size_t root, std::string_view needle) {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = todo.back();
      todo.pop_back();
      if (trace_.cpu_events[i].name.find(needle) != std::string::npos) return true;
      todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    }
    return false;
  };
  auto collect_sequences = [&](std::size_t root, std::set<std::int64_t>& out) {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = todo.back();
      todo.pop_back();
      if (auto s = trace_.cpu_events[i].sequence_number) out.insert(*s);
      todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    }
  };
  auto first_sequence = [&](std::size_t root) -> std::optional<std::int64_t> {
    std::vector<std::size_t> todo{root};
    while (!todo.empty()) {
      const std::size_t i = todo.front();
      todo.erase(todo.begin());
      if (auto s = trace_.cpu_events[i].sequence_number) return s;
      todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
    }
    return std::nullopt;
  };
  bool backward_started = false;
  for (Unit& u : units_) {
    const CpuEvent& e = event(u);
    const std::string node = backward_node(e.name);
    if (starts_with(e.name, "Optimizer.step")) {
      u.role = Unit::Role::kUpdate;
      const auto hash = e.name.find('#');
      std::string cls = e.name.substr(hash == std::string::npos ? 0 : hash + 1);
      cls = cls.substr(0, cls.find('.'));
      optimizer_name_.clear();
      for (char ch : cls)
        optimizer_name_ += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      state_names_ = optimizer_state_names(optimizer_name_, subtree_has(u.event, "mul_"));
      optimizer_list_ = widest_tensor_list(u.event);
      if (optimizer_name_.empty()) optimizer_name_ = "optimizer";
    } else if (starts_with(e.name, "Optimizer.zero_grad")) {
      if (subtree_has(u.event, "zero_")) report_.persistent_grads = true;
    } else if (!node.empty()) {
      backward_started = true;
      if (ends_with(node, "AccumulateGrad")) {
        ++report_.leaf_nodes;
        if (auto leaf = leaf_of(u.event)) leaves_.push_back(std::move(*leaf));
      } else {
        u.role = Unit::Role::kBackward;
        u.sequence = e.sequence_number ? e.sequence_number : first_sequence(u.event);
      }
    } else if (!backward_started) {
      // Without shapes every aten op is kept as a generic op with its time (time_only_).
      u.layer = !time_only_                     ? classify_forward(e)
                : starts_with(e.name, "aten::") ? Layer::kGeneric
                                                : Layer::kGlue;
      if (u.layer != Layer::kGlue) {
        u.role = Unit::Role::kForward;
        collect_sequences(u.event, u.sequences);
      }
    }
  }
  report_.optimizer_states_per_parameter = static_cast<int>(state_names_.size());
}

std::size_t Importer::new_value(TensorId t, const Shape& shape, const std::string& dtype,
                                bool activation) {
  Value v;
  v.tensor = t;
  v.shape = shape;
  v.dtype = dtype;
  v.activation = activation;
  values_.push_back(std::move(v));
  return values_.size() - 1;
}

TensorId Importer::add_tensor(std::string name, TensorKind kind, const Shape& shape,
                              const std::string& dtype, OpId producer, TensorId in_place_of) {
  sim::Tensor t;
  t.id = sim::tensor_id(workload_.tensors.size());
  t.kind = kind;
  t.shape = shape;
  t.dtype = dtype;
  t.bytes = checked_bytes(shape, sim::dtype_bytes(dtype).value_or(4),
                          fmt::format("{}: tensor '{}'", trace_.source, name));
  t.name = std::move(name);
  t.producer = producer;
  t.in_place_of = in_place_of;
  if (producer != kNoOp) op(producer).outputs.push_back(t.id);
  workload_.tensors.push_back(std::move(t));
  return workload_.tensors.back().id;
}

OpId Importer::add_op(std::string name, const std::string& layer, Phase phase, const Unit& unit) {
  sim::Op o;
  o.id = sim::op_id(workload_.ops.size());
  o.name = std::move(name);
  o.layer = sim::LayerType::named(layer);
  o.phase = phase;
  o.duration_ns = saturating_add(unit.device_ns, pending_ns_);
  o.workspace_bytes = unit.workspace;
  pending_ns_ = 0;
  workload_.ops.push_back(std::move(o));
  last_op_ = workload_.ops.back().id;
  return last_op_;
}

void Importer::add_input(OpId o, TensorId t) {
  auto& in = op(o).inputs;
  if (std::find(in.begin(), in.end(), t) == in.end()) in.push_back(t);
}

void Importer::fold(const Unit& unit) {
  ++report_.folded_events;
  if (last_op_ == kNoOp) {
    pending_ns_ = saturating_add(pending_ns_, unit.device_ns);
  } else {
    op(last_op_).duration_ns = saturating_add(op(last_op_).duration_ns, unit.device_ns);
  }
}

TensorId Importer::param(const std::string& name, const Shape& shape, const std::string& dtype,
                         bool trainable) {
  const TensorId p = add_tensor(name, TensorKind::kParameter, shape, dtype, kNoOp);
  if (trainable) make_trainable(p);
  return p;
}

void Importer::make_trainable(TensorId p) {
  trainable_.push_back(p);
  const std::string name = tensor(p).name;  // add_tensor moves the tensors
  const Shape shape = tensor(p).shape;
  const std::string dtype = tensor(p).dtype;
  for (const std::string& state : state_names_) {
    optimizer_state_.push_back(add_tensor(fmt::format("{}.{}", name, state),
                                          TensorKind::kOptimizerState, shape, dtype, kNoOp));
  }
  if (report_.persistent_grads) {
    param_grad_[p] = add_tensor(name + ".grad", TensorKind::kOptimizerState, shape, dtype, kNoOp);
  }
}

std::size_t Importer::resolve(const Shape& shape, const std::string& dtype, bool first,
                              std::size_t exclude, bool for_merge) {
  auto usable = [&](std::size_t v) {
    return v != exclude && !values_[v].overwritten && values_[v].shape == shape;
  };
  if (first && last_output_ && usable(*last_output_)) return *last_output_;
  if (for_merge) {
    // A branch output that nothing has read yet is waiting for this merge.
    for (std::size_t v = values_.size(); v-- > 0;) {
      if (usable(v) && values_[v].activation && !values_[v].merged && !values_[v].read) return v;
    }
  }
  for (bool allow_superseded : {false, true}) {
    for (std::size_t v = merge_boundary_; v < values_.size(); ++v) {
      if (usable(v) && values_[v].activation && (allow_superseded || !values_[v].superseded))
        return v;
    }
  }
  for (std::size_t v = values_.size(); v-- > 0;) {
    if (usable(v)) return v;
  }
  const TensorId t =
      add_tensor(fmt::format("input{}", input_count_++), TensorKind::kInput, shape, dtype, kNoOp);
  return new_value(t, shape, dtype, false);
}

Shape Importer::lookahead(std::size_t position, std::int64_t n, std::int64_t c, std::size_t rank,
                          const Shape& fallback) const {
  for (std::size_t j = position + 1; j < units_.size(); ++j) {
    if (units_[j].role != Unit::Role::kForward) continue;
    const CpuEvent& e = event(units_[j]);
    const std::size_t inputs = units_[j].layer == Layer::kAdd ? 2 : 1;
    for (std::size_t k = 0; k < inputs; ++k) {
      if (same_shape_prefix(dims(e, k), n, c, rank)) return dims(e, k);
    }
  }
  return fallback;
}

Shape Importer::lookahead_view(std::size_t position, const Shape& from) const {
  for (std::size_t j = position + 1; j < units_.size(); ++j) {
    if (units_[j].role != Unit::Role::kForward) continue;
    const Shape& s = dims(event(units_[j]), 0);
    if (!s.empty() && s != from && numel(s) == numel(from)) return s;
  }
  Shape flat{from[0], 1};
  for (std::size_t d = 1; d < from.size(); ++d) flat[1] *= from[d];
  return flat;
}

// One forward op being built: its event, its op and what backward will need of it; reading,
// writing and parameter tensors go through here.
struct Importer::ForwardOp {
  Importer& im;
  const CpuEvent& e;
  std::size_t position;  // in units_
  std::string name;
  OpId op;
  const Shape& x_shape;  // the first argument's shape and dtype
  std::string dtype;
  ForwardInfo info;

  TensorId read(std::size_t v) {
    im.values_[v].read = true;
    const TensorId t = im.values_[v].tensor;
    im.add_input(op, t);
    // An op that reads one tensor twice (x * x) has one gradient for it, summed inside its
    // backward kernel: listing it twice would make the backward op read its own output.
    const auto& in = info.data_inputs;
    if (im.tensor(t).kind == TensorKind::kActivation &&
        std::find(in.begin(), in.end(), t) == in.end())
      info.data_inputs.push_back(t);
    return t;
  }
  TensorId produce(const std::string& suffix, const Shape& shape, const std::string& dt,
                   TensorId in_place = kNoTensor) {
    return im.add_tensor(name + suffix, TensorKind::kActivation, shape, dt, op, in_place);
  }
  TensorId weight(const std::string& suffix, std::size_t k, bool trainable) {
    const TensorId p = im.param(name + suffix, dims(e, k), dtype_of(e, k), trainable);
    im.add_input(op, p);
    if (trainable) info.params.push_back(p);
    return p;
  }
  // Written in place over `base` when the op is an in-place one and nothing else needs `base`.
  bool in_place_ok(std::size_t base) const {
    return ends_with(e.name, "_") && im.values_[base].activation &&
           im.saved_.count(im.values_[base].tensor) == 0;
  }
  // The output value, shaped `shape`.
  std::size_t output(const Shape& shape, const std::string& dt) {
    return im.new_value(info.output, shape, dt, true);
  }
};

void Importer::build_forward(Unit& unit, std::size_t position) {
  const CpuEvent& e = event(unit);
  if (time_only_) {
    build_timed_forward(unit);
    return;
  }
  if (unit.layer == Layer::kView || unit.layer == Layer::kIdentity) {
    build_alias(unit, position);
    return;
  }
  std::string layer = layer_string(unit.layer, "");
  if (layer.empty()) {
    std::string_view n = e.name;
    n.remove_prefix(6);  // "aten::"
    while (!n.empty() && n.back() == '_') n.remove_suffix(1);
    layer = std::string(n);
  }
  const std::string name = fmt::format("{}_{}", layer, ++layer_counts_[layer]);
  const OpId o = add_op(name, layer, Phase::kForward, unit);
  ForwardOp f{*this, e, position, name, o, dims(e, 0), dtype_of(e, 0), {}};
  f.info.layer = unit.layer;
  f.info.name = name;
  const std::size_t out_value = forward_layer(f, unit.layer);
  ForwardInfo& info = f.info;
  saved_.insert(info.saved.begin(), info.saved.end());
  if (!info.data_inputs.empty() &&
      (unit.layer == Layer::kBatchNorm || unit.layer == Layer::kLayerNorm ||
       unit.layer == Layer::kRelu)) {
    for (Value& value : values_) {
      if (value.tensor == info.data_inputs.front()) value.superseded = true;
    }
  }
  last_output_ = out_value;
  for (std::int64_t s : unit.sequences) op_of_sequence_[s] = o;
  unit.op = o;
  forward_[o] = std::move(info);
  ++report_.forward_ops;
}

// A view or a device copy: the same tensor under another shape, no op.
void Importer::build_alias(const Unit& unit, std::size_t position) {
  const CpuEvent& e = event(unit);
  const Shape& x_shape = dims(e, 0);
  const std::string dtype = dtype_of(e, 0);
  const std::size_t x = resolve(x_shape, dtype, true);
  const Shape to = unit.layer == Layer::kView ? lookahead_view(position, x_shape) : x_shape;
  last_output_ = new_value(values_[x].tensor, to, dtype, values_[x].activation);
  fold(unit);
}

std::size_t Importer::forward_layer(ForwardOp& f, Layer layer) {
  switch (layer) {
    case Layer::kConv:
      return forward_conv(f);
    case Layer::kBatchNorm:
      return forward_batch_norm(f);
    case Layer::kLayerNorm: {
      const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
      if (!dims(f.e, 2).empty()) f.weight(".weight", 2, true);
      if (!dims(f.e, 3).empty()) f.weight(".bias", 3, true);
      f.info.output = f.produce(".out", f.x_shape, f.dtype);
      f.info.saved = {x};
      return f.output(f.x_shape, f.dtype);
    }
    case Layer::kRelu: {
      const std::size_t xv = resolve(f.x_shape, f.dtype, true);
      f.read(xv);
      const bool in_place = f.in_place_ok(xv);
      f.info.output =
          f.produce(".out", f.x_shape, f.dtype, in_place ? values_[xv].tensor : kNoTensor);
      if (in_place) values_[xv].overwritten = true;
      f.info.saved = {f.info.output};
      return f.output(f.x_shape, f.dtype);
    }
    case Layer::kMaxPool:
    case Layer::kAvgPool:
      return forward_pool(f, layer == Layer::kMaxPool);
    case Layer::kLinear:
      return forward_linear(f);
    case Layer::kAdd:
      return forward_add(f);
    case Layer::kCrossEntropy:
      return forward_cross_entropy(f);
    default:
      return forward_generic(f);
  }
}

std::size_t Importer::forward_conv(ForwardOp& f) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const TensorId w = f.weight(".weight", 1, true);
  if (dims(f.e, 2).size() == 1) f.weight(".bias", 2, true);
  const Shape& ws = dims(f.e, 1);
  Shape fallback = f.x_shape;
  fallback[1] = ws[0];
  const Shape out = lookahead(f.position, f.x_shape[0], ws[0], f.x_shape.size(), fallback);
  f.info.output = f.produce(".out", out, f.dtype);
  f.info.saved = {x, w};
  return f.output(out, f.dtype);
}

std::size_t Importer::forward_batch_norm(ForwardOp& f) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const Shape channels{f.x_shape[1]};
  TensorId gamma = kNoTensor;
  if (dims(f.e, 1).size() == 1) gamma = f.weight(".weight", 1, true);
  if (dims(f.e, 2).size() == 1) f.weight(".bias", 2, true);
  if (dims(f.e, 3).size() == 1) f.weight(".running_mean", 3, false);
  if (dims(f.e, 4).size() == 1) f.weight(".running_var", 4, false);
  f.info.output = f.produce(".out", f.x_shape, f.dtype);
  const TensorId mean = f.produce(".save_mean", channels, "float32");
  const TensorId invstd = f.produce(".save_invstd", channels, "float32");
  f.info.saved = {x, mean, invstd};
  if (gamma != kNoTensor) f.info.saved.push_back(gamma);
  return f.output(f.x_shape, f.dtype);
}

std::size_t Importer::forward_pool(ForwardOp& f, bool max) {
  const TensorId x = f.read(resolve(f.x_shape, f.dtype, true));
  const Shape out = lookahead(f.position, f.x_shape[0], f.x_shape[1], f.x_shape.size(), f.x_shape);
  f.info.output = f.produce(".out", out, f.dtype);
  if (max) {
    const TensorId indices = f.produce(".indices", out, "int64");
    f.info.saved = {x, indices};
  }
  return f.output(out, f.dtype);
}

std::size_t Importer::forward_linear(ForwardOp& f) {
  const CpuEvent& e = f.e;
  const bool addmm = ends_with(e.name, "addmm");
  const std::size_t xk = addmm ? 1 : 0;
  const std::size_t wk = addmm ? 2 : 1;
  const std::size_t bk = addmm ? 0 : 2;
  const Shape& in_shape = dims(e, xk);
  if (in_shape.empty())
    fail(fmt::format("'{}' at {} us has no input shape", e.name, e.start_ns / 1000));
  const TensorId x = f.read(resolve(in_shape, dtype_of(e, xk), true));
  const TensorId w = f.weight(".weight", wk, true);
  if (dims(e, bk).size() == 1) f.weight(".bias", bk, true);
  Shape out = in_shape;
  out.back() = addmm ? dims(e, wk)[1] : dims(e, wk)[0];
  f.info.output = f.produce(".out", out, dtype_of(e, xk));
  f.info.saved = {x, w};
  return f.output(out, dtype_of(e, xk));
}

std::size_t Importer::forward_add(ForwardOp& f) {
  const std::size_t av = resolve(f.x_shape, f.dtype, true);
  const std::size_t bv = resolve(dims(f.e, 1), dtype_of(f.e, 1), false, av, true);
  f.read(av);
  f.read(bv);
  values_[av].merged = true;
  values_[bv].merged = true;
  const bool in_place = f.in_place_ok(av);
  f.info.output = f.produce(".out", f.x_shape, f.dtype, in_place ? values_[av].tensor : kNoTensor);
  if (in_place) values_[av].overwritten = true;
  const std::size_t out_value = f.output(f.x_shape, f.dtype);
  merge_boundary_ = out_value;
  return out_value;
}

std::size_t Importer::forward_cross_entropy(ForwardOp& f) {
  f.read(resolve(f.x_shape, f.dtype, true));  // the logits
  TensorId target = kNoTensor;
  if (!dims(f.e, 1).empty()) target = f.read(resolve(dims(f.e, 1), dtype_of(f.e, 1), false));
  f.info.output = f.produce(".loss", {}, f.dtype);
  const TensorId log_probs = f.produce(".log_probs", f.x_shape, f.dtype);
  f.info.saved = {log_probs};
  if (target != kNoTensor) f.info.saved.push_back(target);
  return f.output({}, f.dtype);
}

// A generic op reads every tensor argument and writes one tensor shaped like the first.
std::size_t Importer::forward_generic(ForwardOp& f) {
  const CpuEvent& e = f.e;
  bool first = true;
  Shape out;
  std::string out_dtype = f.dtype;
  for (std::size_t k = 0; k < e.input_dims.size(); ++k) {
    if (e.input_dims[k].empty()) continue;
    const std::size_t v = resolve(e.input_dims[k], dtype_of(e, k), first);
    f.info.saved.push_back(f.read(v));
    if (first) {
      out = e.input_dims[k];
      out_dtype = dtype_of(e, k);
    }
    first = false;
  }
  f.info.output = f.produce(".out", out, out_dtype);
  return f.output(out, out_dtype);
}

// An op of a step recorded without shapes: its name and time, no tensors.
void Importer::build_timed_forward(Unit& unit) {
  std::string_view n = event(unit).name;
  n.remove_prefix(6);  // "aten::"
  while (!n.empty() && n.back() == '_') n.remove_suffix(1);
  const std::string layer(n);
  const std::string name = fmt::format("{}_{}", layer, ++layer_counts_[layer]);
  const OpId o = add_op(name, layer, Phase::kForward, unit);
  ForwardInfo info;
  info.layer = Layer::kGeneric;
  info.name = name;
  for (std::int64_t s : unit.sequences) op_of_sequence_[s] = o;
  unit.op = o;
  forward_[o] = std::move(info);
  ++report_.forward_ops;
}

void Importer::contribute_gradient(TensorId forward_tensor, TensorId grad, OpId o) {
  auto it = grad_of_.find(forward_tensor);
  if (it != grad_of_.end()) {
    // A fork: the tensor was read by several ops, its gradient is the sum of their contributions.
    add_input(o, it->second);
    it->second = grad;
  } else {
    grad_of_[forward_tensor] = grad;
  }
}

void Importer::build_backward(Unit& unit) {
  std::optional<OpId> f;
  if (unit.sequence) {
    if (auto it = op_of_sequence_.find(*unit.sequence); it != op_of_sequence_.end()) f = it->second;
  }
  if (!f) {
    // A node of an op that is not a layer op (a view, a transpose) or of a forward op outside the
    // step: its time goes to the previous backward op.
    ++report_.unmatched_backward;
    fold(unit);
    return;
  }
  ForwardInfo& info = forward_.at(*f);
  if (info.has_backward) {
    fold(unit);
    return;
  }
  info.has_backward = true;
  const std::string layer = workload_.ops[index(*f)].layer.str();
  const OpId o = add_op(info.name + "_bwd", layer, Phase::kBackward, unit);
  op(o).differentiates = *f;
  TensorId gy = kNoTensor;
  if (auto it = grad_of_.find(info.output); it != grad_of_.end()) {
    gy = it->second;
    add_input(o, gy);
  }
  for (TensorId s : info.saved) add_input(o, s);
  if (info.layer == Layer::kAdd) {
    // The gradient passes through to both inputs unchanged; only a fork needs a new tensor.
    for (TensorId x : info.data_inputs) {
      if (grad_of_.count(x) != 0 || gy == kNoTensor) {
        const sim::Tensor& xt = tensor(x);
        contribute_gradient(
            x, add_tensor("grad." + xt.name, TensorKind::kGradient, xt.shape, xt.dtype, o), o);
      } else {
        grad_of_[x] = gy;
      }
    }
  } else {
    for (TensorId x : info.data_inputs) {
      const sim::Tensor& xt = tensor(x);
      const Shape shape = xt.shape;
      const std::string dtype = xt.dtype;
      contribute_gradient(x, add_tensor("grad." + xt.name, TensorKind::kGradient, shape, dtype, o),
                          o);
    }
  }
  for (TensorId p : info.params) {
    if (report_.persistent_grads) {
      // Accumulated into the persistent .grad buffer; the fresh gradient is scratch space.
      add_input(o, param_grad_.at(p));
      op(o).workspace_bytes = saturating_add(op(o).workspace_bytes, tensor(p).bytes);
    } else {
      const sim::Tensor& pt = tensor(p);
      const Shape shape = pt.shape;
      const std::string dtype = pt.dtype;
      param_grad_[p] = add_tensor("grad." + pt.name, TensorKind::kGradient, shape, dtype, o);
    }
  }
  unit.op = o;
  ++report_.backward_ops;
}

void Importer::build_update(Unit& unit) {
  const OpId o = add_op(optimizer_name_ + "_step", optimizer_name_, Phase::kUpdate, unit);
  for (TensorId p : trainable_) {
    add_input(o, p);
    if (auto g = param_grad_.find(p); g != param_grad_.end()) add_input(o, g->second);
  }
  for (TensorId s : optimizer_state_) add_input(o, s);
  unit.op = o;
  ++report_.update_ops;
}

// Note [Host side]
// ~~~~~~~~~~~~~~~~
// Trace format v2 gives each op the host time from the previous op's launch to its own (its
// dispatch) and says whether the host waited for the device after launching it. An op's launch is
// the first launch call of the device work attributed to it (Note [Kineto dataflow]), or its CPU
// start when it launched nothing; launches are taken in issue order and never go back in time.
// A blocking call (importers/kineto/host_side.hpp: synchronize, a synchronous or pageable copy, which is
// what `.item()` and `.cpu()` do) marks the op launched last before it as synchronizing, with the
// host time from that op's launch to the call's start as its sync_after_ns (a foreach optimizer
// launches its kernels one after another for hundreds of microseconds, and the device runs them
// meanwhile: the wait comes after that time, not right after the first launch). The waits are left
// out of the next dispatch: the engine makes the host wait for the device instead, so the recorded
// wait would otherwise count twice. The host tail is the time from the last launch to the step's
// end, less the waits and the sync_after_ns in it.
void Importer::fill_host_side() {
  const StepWindow& step = report_.step;
  std::vector<Nanoseconds> launch(workload_.ops.size(), step.start_ns);
  for (const Unit& u : units_) {
    if (u.op != kNoOp) launch[index(u.op)] = u.first_launch.value_or(event(u).start_ns);
  }
  const std::vector<BlockingCall> calls = blocking_calls(trace_, step.start_ns, step.end_ns);
  report_.blocking_calls = calls.size();
  std::size_t next_call = 0;
  OpId last = kNoOp;
  Nanoseconds previous = step.start_ns;  // the last op's launch
  // The host time between `previous` and `t` that the engine spends otherwise than dispatching:
  // the recorded waits, and the last op's sync_after_ns up to the first blocking call.
  auto accounted_before = [&](Nanoseconds t) {
    Nanoseconds wait = 0;
    Nanoseconds before_call = 0;
    for (; next_call < calls.size() && calls[next_call].start_ns < t; ++next_call) {
      if (last != kNoOp && !op(last).host->synchronizes) {
        before_call = std::max<Nanoseconds>(0, calls[next_call].start_ns - previous);
        op(last).host->synchronizes = true;
        op(last).host->sync_after_ns = before_call;
      }
      wait = saturating_add(wait, calls[next_call].wait_ns);
    }
    report_.blocked_ns = saturating_add(report_.blocked_ns, wait);
    return saturating_add(wait, before_call);
  };
  for (sim::Op& o : workload_.ops) {
    const Nanoseconds at = std::max(launch[index(o.id)], previous);
    const Nanoseconds accounted = accounted_before(at);
    o.host = sim::HostSide{.dispatch_ns = std::max<Nanoseconds>(0, at - previous - accounted)};
    previous = at;
    last = o.id;
  }
  const Nanoseconds accounted = accounted_before(step.end_ns);
  workload_.host_tail_ns = std::max<Nanoseconds>(0, step.end_ns - previous - accounted);
  workload_.launch_ns = median_launch_ns(trace_, step.start_ns, step.end_ns);
  report_.host_ops = workload_.ops.size();
  report_.streams = streams_used(trace_, step.start_ns, step.end_ns).size();
  for (const RecordedCopy& c : recorded_copies(trace_, step.start_ns, step.end_ns)) {
    ++report_.copies;
    if (c.pageable) ++report_.pageable_copies;
    if (c.direction == CopyDirection::kHostToDevice) report_.h2d_bytes += c.bytes;
    if (c.direction == CopyDirection::kDeviceToHost) report_.d2h_bytes += c.bytes;
  }
}

// The link bandwidths the trace's own copies measure, kept in the device info (`--link
// recorded` and the default machine use them), and a sentence for the provenance note.
std::string measure_device_link(const KinetoTrace& trace, sim::DeviceInfo& device) {
  const MeasuredLink measured = measure_link(recorded_copies(
      trace, std::numeric_limits<Nanoseconds>::min(), std::numeric_limits<Nanoseconds>::max()));
  if (!measured.link.has_bandwidth()) return "no copy of 1 MiB or more to measure the link with";
  device.link = measured.link;
  auto part = [](const char* what, const std::optional<double>& bw, std::size_t n, bool pageable) {
    if (!bw) return fmt::format("{} not measured", what);
    return fmt::format("{} {:.2f} GB/s ({} {} copies)", what, *bw / 1e9, n,
                       pageable ? "pageable" : "pinned");
  };
  return fmt::format(
      "link measured from the recorded copies: {}, {}",
      part("H2D", measured.link.h2d_bytes_per_s, measured.h2d_copies, measured.h2d_pageable),
      part("D2H", measured.link.d2h_bytes_per_s, measured.d2h_copies, measured.d2h_pageable));
}

// Note [Leaves from AccumulateGrad]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch accumulates the gradient of every leaf tensor that requires grad through one
// AccumulateGrad node per leaf and backward pass, and the profiler records the node with the
// gradient's shape, which is the leaf's. So the AccumulateGrad nodes of a step are its trainable
// parameters by PyTorch's own account, whatever ops read them (a tied weight is one leaf: one
// node). The layer rules find the parameters of the layers they know (a linear's weight and bias,
// a norm's affine); a leaf they leave unaccounted for is a weight some other op reads: an
// embedding's table, a matrix given to mm. The trace records no tensor identities, so such a leaf
// is matched by shape (and dtype) to a pre-existing input a forward op reads, which becomes a
// parameter (optimizer state, a gradient from that op's backward), once the forward is built
// (settle_parameters). The report compares the parameters with the leaves; where a tied weight is
// read as a parameter by one op and as an input by another, the bytes still agree (one leaf, one
// parameter), the input stays an input. A layer rule's parameter that no leaf stands for is left
// trainable: it may be frozen (fine-tuning), but a flat parameter (FSDP) is one leaf that the
// layers read through views of other shapes, and the shapes alone cannot tell the two apart.
std::optional<Importer::Leaf> Importer::leaf_of(std::size_t node) const {
  std::vector<std::size_t> todo{node};
  while (!todo.empty()) {
    const std::size_t i = todo.back();
    todo.pop_back();
    const CpuEvent& e = trace_.cpu_events[i];
    if (!e.input_dims.empty() && !e.input_dims.front().empty()) {
      return Leaf{e.input_dims.front(), dtype_of(e, 0)};
    }
    todo.insert(todo.end(), nesting_.children[i].begin(), nesting_.children[i].end());
  }
  return std::nullopt;
}

void Importer::settle_parameters() {
  // The layer rules' parameters take their leaves first.
  std::vector<Leaf> left = leaves_;
  auto take = [&left](const Shape& shape, const std::string& dtype) {
    const auto it = std::find_if(left.begin(), left.end(), [&](const Leaf& l) {
      return l.shape == shape && l.dtype == dtype;
    });
    if (it == left.end()) return false;
    left.erase(it);
    return true;
  };
  for (TensorId p : trainable_) take(tensor(p).shape, tensor(p).dtype);
  // A leaf left over: an input of that shape a forward op reads (in issue order, argument order).
  std::vector<OpId> order;
  for (const auto& entry : forward_) order.push_back(entry.first);
  std::sort(order.begin(), order.end());
  std::vector<TensorId> promoted;
  for (OpId o : order) {
    int of_op = 0;  // mm(a, b) with two leaves: .weight, .weight1
    for (TensorId x : op(o).inputs) {
      sim::Tensor& t = workload_.tensors[index(x)];
      if (t.kind != TensorKind::kInput || !take(t.shape, t.dtype)) continue;
      t.kind = TensorKind::kParameter;
      t.name = of_op == 0 ? fmt::format("{}.weight", op(o).name)
                          : fmt::format("{}.weight{}", op(o).name, of_op);
      ++of_op;
      promoted.push_back(x);
    }
  }
  for (TensorId x : promoted) {
    make_trainable(x);
    for (auto& [reader, info] : forward_) {  // a parameter of every forward op that reads it
      const auto& in = op(reader).inputs;
      if (std::find(in.begin(), in.end(), x) != in.end()) info.params.push_back(x);
    }
  }
  report_.promoted_leaves = promoted.size();
}

// The imported trainable parameters beside what the optimizer's own ops say, when they record
// tensor lists. Tensor lists record no dtype: their elements are sized with the parameters' dtype.
void Importer::check_parameters_against_optimizer() {
  std::string dtype = "float32";
  for (TensorId p : trainable_) {
    report_.trainable_parameters += 1;
    report_.trainable_parameter_bytes += tensor(p).bytes;
    dtype = tensor(p).dtype;
  }
  report_.leaf_tensors = leaves_.size();
  for (const Leaf& l : leaves_) {
    report_.leaf_bytes += checked_bytes(l.shape, sim::dtype_bytes(l.dtype).value_or(4),
                                        trace_.source + ": AccumulateGrad");
  }
  if (optimizer_list_.empty()) return;
  report_.optimizer_shape_tensors = optimizer_list_.size();
  for (const Shape& shape : optimizer_list_) {
    report_.optimizer_shape_bytes += checked_bytes(shape, sim::dtype_bytes(dtype).value_or(4),
                                                   trace_.source + ": optimizer tensor list");
  }
}

ImportResult Importer::run() {
  report_.gpu = std::any_of(trace_.gpu_events.begin(), trace_.gpu_events.end(),
                            [](const GpuEvent& g) { return g.kind != GpuKind::kMemcpy; });
  nesting_ = nest(trace_.cpu_events);
  report_.step = choose_step();
  collect_units(report_.step);
  attribute_device_time();
  measure_workspace();
  time_only_ = std::none_of(units_.begin(), units_.end(), [&](const Unit& u) {
    const auto& d = event(u).input_dims;
    return std::any_of(d.begin(), d.end(), [](const Shape& s) { return !s.empty(); });
  });
  report_.time_only = time_only_;
  classify_units();
  bool updated = false;
  bool settled = false;
  for (std::size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    if (!settled && (u.role == Unit::Role::kBackward || u.role == Unit::Role::kUpdate)) {
      settle_parameters();  // the forward is built: its inputs are known, no gradient made yet
      settled = true;
    }
    switch (u.role) {
      case Unit::Role::kForward:
        build_forward(u, i);
        break;
      case Unit::Role::kBackward:
        build_backward(u);
        break;
      case Unit::Role::kUpdate:
        if (updated) {
          fold(u);
        } else {
          build_update(u);
          updated = true;
        }
        break;
      case Unit::Role::kGlue:
        fold(u);
        break;
    }
  }
  if (!settled) settle_parameters();  // a step without backward or update
  if (report_.forward_ops == 0) {
    fail(
        fmt::format("{} has no forward layer op (no aten:: operator with recorded "
                    "input shapes): record with torch.profiler.profile(record_shapes=True)",
                    report_.step.label));
  }
  if (pending_ns_ > 0)
    op(OpId{0}).duration_ns = saturating_add(op(OpId{0}).duration_ns, pending_ns_);
  check_parameters_against_optimizer();
  check_outputs_against_allocations();
  if (report_.gpu) fill_host_side();

  workload_.provenance.source = "imported";
  workload_.provenance.file = file_label_;
  if (report_.step.number >= 0) workload_.provenance.step = report_.step.number;
  const std::string link = report_.gpu ? measure_device_link(trace_, workload_.device) : "";
  workload_.provenance.note = fmt::format(
      "PyTorch profiler ({} format) {}; layer-level dataflow reconstructed from "
      "program order, shapes and autograd sequence numbers (docs/kineto-import.md); {}{}{}",
      trace_.format == KinetoFormat::k2021 ? "2021" : "current", report_.step.label,
      report_.gpu ? "op durations are the device time of the kernels each op launched"
                  : "CPU-only trace: op durations are CPU times",
      link.empty() ? "" : "; ", link);
  workload_.device.name =
      report_.gpu ? (trace_.device_name.empty() ? "cuda" : trace_.device_name) : "cpu";
  workload_.device.memory_bytes = report_.gpu ? trace_.device_memory : 0;
  // The step's memory came from PyTorch's caching allocator (memory/caching_allocator.hpp).
  workload_.device.allocator = sim::AllocatorModel::kCaching;
  sim::validate(workload_, trace_.source);
  for (const sim::Op& o : workload_.ops) report_.op_time_ns += o.duration_ns;  // each under an hour
  return ImportResult{std::move(workload_), report_};
}

}  // namespace

std::vector<StepWindow> list_steps(const KinetoTrace& trace) {
  std::vector<StepWindow> steps;
  for (std::size_t i = 0; i < trace.cpu_events.size(); ++i) {
    const CpuEvent& e = trace.cpu_events[i];
    if (auto n = step_number(e.name))
      steps.push_back({*n, e.name, e.thread, e.start_ns, e.end_ns(), i});
  }
  return steps;
}

ImportResult import_kineto(const KinetoTrace& trace, const ImportOptions& options,
                           const std::string& file_label) {
  return Importer(trace, options, file_label).run();
}

}  // namespace memplan::importers
