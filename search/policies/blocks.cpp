// Note [Checkpointed blocks]
// `torch.utils.checkpoint(block, x)` runs the block's forward without saving anything for
// backward but the block's inputs, and before the block's backward runs its forward again to
// regenerate what that backward reads (non-reentrant checkpointing since PyTorch 2.1 stops the
// recomputation once it has what it needs). In a plan, a feature map the block writes is then
// recomputed — unless a backward op outside the block reads it too: that reader saved it when it
// ran in forward (or its own checkpoint saved it as an input), so it stays on the device. The
// lowering keeps a regenerated map until its last backward use, so the block is recomputed once,
// as PyTorch does. What a plan cannot say: PyTorch regenerates a block's maps all together
// before its backward; memplan regenerates each map before its first backward use, which may be
// later (never earlier), so memplan's peak is never above PyTorch's for the same choice.
#include "search/policies/blocks.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/core.h>

namespace memplan::search {
namespace {

bool numbered(std::string_view component) {
  const auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
  };
  if (digits(component)) return true;
  const std::size_t underscore = component.rfind('_');
  return underscore != std::string_view::npos && underscore > 0 &&
         digits(component.substr(underscore + 1));
}

// Runs of consecutive forward ops with the same non-empty block name.
std::vector<Block> runs_of_names(const NetworkView& view) {
  std::vector<Block> blocks;
  std::string current;
  for (sim::OpId op : view.layers()) {
    std::string name = block_name(view.workload().op(op).name);
    if (name.empty()) {
      current.clear();
      continue;
    }
    if (name != current || blocks.empty()) blocks.push_back({name, {}});
    current = std::move(name);
    blocks.back().ops.push_back(op);
  }
  return blocks;
}

// Blocks by module path: runs of consecutive forward ops with the same non-empty block name that
// compute (a convolution, a matmul, attention): a lone dropout or activation in a Sequential
// (a classifier's Dropout) is no block anyone checkpoints.
std::vector<Block> named_blocks(const NetworkView& view) {
  std::vector<Block> blocks = runs_of_names(view);
  std::erase_if(blocks, [&](const Block& b) {
    return std::none_of(b.ops.begin(), b.ops.end(), [&](sim::OpId op) {
      return compute_intensive(op_kind(view.workload().op(op)));
    });
  });
  return blocks;
}

// Blocks by structure: the forward cut after each op past which exactly one tensor that carries
// the batch (derives from a step input through forward ops) is still to be read by a later
// forward op. Masks and tables derived from parameters or constants alone do not count: every
// block may read them.
std::vector<Block> structural_blocks(const NetworkView& view) {
  const sim::Workload& w = view.workload();
  const std::vector<sim::OpId>& layers = view.layers();
  std::vector<char> carries(w.tensors.size(), 0);
  std::vector<int> last_reader(w.tensors.size(), -1);
  for (const sim::Tensor& t : w.tensors) {
    carries[sim::index(t.id)] = static_cast<char>(t.kind == sim::TensorKind::kInput);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const sim::Op& op = w.op(layers[i]);
    bool any = false;
    for (sim::TensorId in : op.inputs) {
      any = any || carries[sim::index(in)] != 0;
      last_reader[sim::index(in)] = static_cast<int>(i);
    }
    for (sim::TensorId out : op.outputs) carries[sim::index(out)] = static_cast<char>(any);
  }
  // live[i]: carrying tensors written at or before layer i and read after it.
  std::vector<int> change(layers.size() + 1, 0);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    for (sim::TensorId out : w.op(layers[i]).outputs) {
      const int q = last_reader[sim::index(out)];
      if (carries[sim::index(out)] == 0 || q <= static_cast<int>(i)) continue;
      ++change[i];
      --change[static_cast<std::size_t>(q)];
    }
  }
  // Segments between cuts; one of a single op joins the block before it when that block is the
  // segment just before (a residual block's last ReLU, after its add: PyTorch's block holds it),
  // and is no block otherwise (a stem's layers: checkpointing one op saves nothing).
  std::vector<Block> blocks;
  std::vector<sim::OpId> segment;
  bool previous_is_block = false;
  int live = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    segment.push_back(layers[i]);
    live += change[i];
    if (live != 1 && i + 1 < layers.size()) continue;  // no cut after this op
    if (segment.size() == 1 && previous_is_block) {
      blocks.back().ops.push_back(segment.front());
      previous_is_block = false;
    } else if (segment.size() > 1) {
      blocks.push_back({fmt::format("block {}", blocks.size()), segment});
      previous_is_block = true;
    } else {
      previous_is_block = false;
    }
    segment.clear();
  }
  return blocks;
}

}  // namespace

std::string block_name(std::string_view op_name) {
  // The module path is every component but the last (the op's or the layer's own name).
  const std::size_t last_dot = op_name.rfind('.');
  if (last_dot == std::string_view::npos) return {};
  std::size_t start = 0;
  while (start < last_dot) {
    const std::size_t dot = op_name.find('.', start);
    if (start > 0 && numbered(op_name.substr(start, dot - start))) {
      return std::string(op_name.substr(0, dot));
    }
    start = dot + 1;
  }
  return {};
}

std::vector<Block> checkpoint_blocks(const NetworkView& view) {
  std::vector<Block> blocks = named_blocks(view);
  return blocks.empty() ? structural_blocks(view) : blocks;
}

std::vector<int> block_of_maps(const NetworkView& view, const std::vector<Block>& blocks) {
  const sim::Workload& w = view.workload();
  std::vector<int> block_of_op(w.ops.size(), -1);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    for (sim::OpId op : blocks[b].ops) block_of_op[sim::index(op)] = static_cast<int>(b);
  }
  std::vector<int> out;
  out.reserve(view.feature_maps().size());
  for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
    out.push_back(block_of_op[sim::index(view.producer(static_cast<int>(m)))]);
  }
  return out;
}

bool read_outside_block(const NetworkView& view, const Block& block, int map) {
  const sim::FeatureMap& fm = view.feature_maps()[static_cast<std::size_t>(map)];
  return std::any_of(fm.backward_uses.begin(), fm.backward_uses.end(), [&](sim::OpId use) {
    const sim::OpId forward = view.workload().op(use).differentiates;
    return forward == sim::kNoOp ||
           !std::binary_search(block.ops.begin(), block.ops.end(), forward);
  });
}

}  // namespace memplan::search
