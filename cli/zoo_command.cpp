// `memplan zoo`: the modeled training step of a known network on a known GPU, written as a trace.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
#include "core/input_error.hpp"
#include "core/interconnect.hpp"
#include "core/liveness.hpp"
#include "io/output_file.hpp"
#include "io/trace_io.hpp"
#include "requests/data_parallel_request.hpp"
#include "zoo/devices.hpp"
#include "zoo/models.hpp"
#include "zoo/network.hpp"
#include "zoo/zoo.hpp"

namespace memplan::cli {

namespace {
struct ZooFlags {
  std::string model;
  std::string device;
  ModelFlags shape;
  std::string output;
  std::string optimizer = "sgd";
  std::string precision = "fp32";
  std::string attention;   // empty: the precision's default (Note [Fused attention])
  std::string activation;  // empty: gpt's fused GELU
  bool list = false;
  bool caffe = false;
  bool channels_last = false;
  bool json = false;
  // Data parallelism (zoo/data_parallel.hpp).
  std::int64_t data_parallel = 0;
  std::int64_t fsdp = 0;
  std::string fsdp_strategy;
  std::int64_t fsdp_prefetch = 1;
  std::string interconnect;
  std::string network;
  std::int64_t gpus_per_node = 0;
};

// What --data-parallel, --fsdp and the fabric flags ask for (requests/data_parallel_request.hpp).
requests::DataParallelRequest data_parallel_request(const CLI::App& cmd, const ZooFlags& flags) {
  requests::DataParallelRequest r;
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--data-parallel")) r.data_parallel = flags.data_parallel;
  if (given("--fsdp")) r.fsdp = flags.fsdp;
  if (given("--fsdp-strategy")) r.fsdp_strategy = flags.fsdp_strategy;
  if (given("--fsdp-prefetch")) r.fsdp_prefetch = flags.fsdp_prefetch;
  if (given("--interconnect")) r.interconnect = flags.interconnect;
  if (given("--network")) r.network = flags.network;
  if (given("--gpus-per-node")) r.gpus_per_node = flags.gpus_per_node;
  return r;
}

// `memplan zoo --list`: the models and devices, one line each or one JSON object.
void print_list(bool json) {
  if (!json) {
    fmt::print("{}", zoo::list_text());
    return;
  }
  nlohmann::json j = {{"models", nlohmann::json::array()}, {"devices", nlohmann::json::array()}};
  for (const zoo::ModelInfo& m : zoo::models()) {
    j["models"].push_back({{"name", m.name}, {"summary", m.summary}});
  }
  for (const zoo::Device& d : zoo::devices()) {
    j["devices"].push_back({{"name", d.name},
                            {"summary", d.summary},
                            {"memory_bytes", d.memory_bytes},
                            {"link", d.link}});
  }
  fmt::print("{}\n", j.dump(2));
}

// The model the flags name, after checking that every flag a trace needs was given.
const zoo::ModelInfo& requested_model(const CLI::App& cmd, const ZooFlags& flags) {
  if (flags.model.empty()) {
    throw sim::InputError("MODEL", fmt::format("name a model (models: {})", zoo::model_names()));
  }
  if (flags.device.empty()) {
    throw sim::InputError("--device",
                          fmt::format("name a device (devices: {})", zoo::device_names()));
  }
  if (cmd.count("--batch") == 0) throw sim::InputError("--batch", "give the batch size");
  if (flags.output.empty()) throw sim::InputError("-o", "give the trace file to write");
  sim::check_output(flags.output, "-o");
  const zoo::ModelInfo* model = zoo::find_model(flags.model);
  if (model == nullptr) {
    throw sim::InputError(
        "MODEL", fmt::format("unknown model '{}' (models: {})", flags.model, zoo::model_names()));
  }
  return *model;
}

// Builds the model's workload, writes it as a trace and prints what was written.
void write_zoo_trace(const CLI::App& cmd, const ZooFlags& flags) {
  const zoo::ModelInfo& model = requested_model(cmd, flags);
  std::FILE* report = sim::report_stream({flags.output});
  zoo::ZooRequest request;
  request.model = flags.model;
  request.device = flags.device;
  request.options = model_options_from_flags(cmd, flags.shape, model);
  request.options.optimizer = zoo::optimizer_named(flags.optimizer);
  request.options.precision = zoo::precision_named(flags.precision);
  if (cmd.count("--attention") > 0)
    request.options.attention = zoo::attention_named(flags.attention);
  if (cmd.count("--activation") > 0)
    request.options.activation = zoo::activation_named(flags.activation);
  request.options.channels_last = flags.channels_last;
  sim::Workload workload = zoo::make_workload(request);
  if (flags.caffe) {
    const std::size_t relus = zoo::relu_backward_in_place(workload);
    const std::size_t masks = zoo::int32_pool_indices(workload);
    workload.provenance.note += fmt::format(
        "; Caffe conventions: {} ReLU gradients in place, {} int32 max-pool masks", relus, masks);
    sim::validate(workload, fmt::format("zoo model '{}'", request.model));
  }
  const requests::DataParallelRequest parallel = data_parallel_request(cmd, flags);
  const bool many = parallel.wanted();
  std::int32_t world_size = 1;
  std::string description;  // of the data parallelism, if any
  sim::Bytes peak = 0;
  if (many) {
    const requests::DataParallelJob dp =
        requests::data_parallel_job(workload, flags.device, parallel);
    workload = dp.job.ranks.front();
    world_size = dp.job.world_size();
    description = dp.description;
    peak = dp.incore_peak_bytes;
    sim::write_output(flags.output, sim::write_job(dp.job));
  } else {
    peak = sim::incore_peak(workload).bytes;
    sim::write_output(flags.output, sim::write_trace(workload));
  }
  if (flags.json) {
    const nlohmann::json j = {
        {"model", model.name},
        {"device", workload.device.name},
        {"optimizer", flags.optimizer},
        {"precision", flags.precision},
        {"channels_last", flags.channels_last},
        {"ops", workload.ops.size()},
        {"tensors", workload.tensors.size()},
        {"peak_bytes_incore", peak},
        {"world_size", world_size},
        {"data_parallel", many ? nlohmann::json(description) : nlohmann::json()},
        {"memory_bytes", workload.device.memory_bytes},
        {"output", flags.output}};
    fmt::print(report, "{}\n", j.dump(2));
  } else {
    fmt::print(report, "wrote {}: {} on {}{}, {} ops, {} tensors, in-core peak {} of {}\n",
               flags.output, model.name, workload.device.name,
               many ? fmt::format(", {} (each rank's step)", description) : "", workload.ops.size(),
               workload.tensors.size(), sim::format_bytes(peak),
               sim::format_bytes(workload.device.memory_bytes));
  }
}
}  // namespace

void add_zoo_command(CLI::App& app) {
  auto options = std::make_shared<ZooFlags>();
  auto* cmd = app.add_subcommand(
      "zoo", "Write the modeled training step of a known network on a known GPU");
  cmd->add_option("MODEL", options->model,
                  "model name, one of: " + zoo::model_names() + " (see --list)");
  cmd->add_flag("--list", options->list, "list models and devices, one line each");
  cmd->add_option("--device", options->device,
                  "device preset, one of: " + zoo::device_names() + " (see --list)");
  add_model_flags(*cmd, options->shape);
  cmd->add_option("--optimizer", options->optimizer,
                  "sgd (momentum; one state tensor per parameter) or adam (exp_avg and "
                  "exp_avg_sq per parameter); default sgd")
      ->check(CLI::IsMember({"sgd", "adam"}));
  // Checked by the zoo (zoo::precision_named): the Python API's message is the same.
  cmd->add_option("--precision", options->precision,
                  "fp32 (the default), tf32 (float32 tensors, TF32 tensor-core matmuls and "
                  "convolutions), bf16 or fp16 (torch.autocast: low-precision activations, float32 "
                  "parameters, gradients and optimizer state; fp16 with a GradScaler)");
  // Checked by the zoo (zoo::attention_named, zoo::activation_named), as --precision is.
  cmd->add_option("--attention", options->attention,
                  "the attention's kernels (gpt, llama, vit_b16): eager (scores, softmax, P.V; "
                  "the S x S probabilities saved) or sdpa (PyTorch's fused "
                  "scaled_dot_product_attention, FlashAttention-2: q, k, v, the output and a "
                  "log-sum-exp per row saved); default sdpa for bf16 and fp16, eager for fp32 and "
                  "tf32");
  cmd->add_option("--activation", options->activation,
                  "gpt's MLP activation: gelu (one fused kernel, the default) or gelu_new (Hugging "
                  "Face GPT-2's, eight elementwise kernels)");
  cmd->add_flag("--channels-last", options->channels_last,
                "the activations in NHWC (torch.channels_last; default NCHW): tensor-core "
                "convolutions without cuDNN's transposes into NHWC and back");
  cmd->add_flag("--caffe", options->caffe,
                "Caffe's memory conventions (vDNN, Layrub): ReLU backward in place, int32 "
                "max-pool masks");
  cmd->add_option("--data-parallel", options->data_parallel,
                  "train on N GPUs with DistributedDataParallel: gradients all-reduced in 25 MiB "
                  "buckets (writes a job: each rank's step)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--fsdp", options->fsdp,
                  "train on N GPUs with FullyShardedDataParallel, one unit per repeated block: "
                  "parameters, gradients and optimizer state sharded (writes a job)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--fsdp-strategy", options->fsdp_strategy,
                  "full-shard (ZeRO-3: parameters gathered again for backward, the default) or "
                  "shard-grad-op (ZeRO-2: kept from forward): the job's setting, every plan's "
                  "default for the gathered parameters, which a search may change per unit")
      ->check(CLI::IsMember({"full-shard", "shard-grad-op"}));
  cmd->add_option("--fsdp-prefetch", options->fsdp_prefetch,
                  "units whose parameters are gathered ahead of the one running, in forward and "
                  "(full-shard) backward (default 1)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option(
      "--interconnect", options->interconnect,
      "the fabric between the GPUs of a node, one of: " + sim::fabric_preset_names(false) +
          " (default: the device's servers': a100 nvlink3, h100 and gh200 nvlink4)");
  cmd->add_option("--network", options->network,
                  "the network between nodes, one NIC per GPU, one of: " +
                      sim::fabric_preset_names(true) + " (default: one fabric joins every GPU)");
  cmd->add_option("--gpus-per-node", options->gpus_per_node, "GPUs in a node (default 8)")
      ->check(CLI::Range(1, sim::kMaxGpusPerNode));
  cmd->add_option("-o,--output", options->output,
                  "trace file to write (traces/FORMAT.md; - for standard output)");
  cmd->add_flag("--json", options->json,
                "print one JSON object (with --list: the models and devices)");
  cmd->callback([options, cmd] {
    if (options->list) {
      print_list(options->json);
    } else {
      write_zoo_trace(*cmd, *options);
    }
  });
}

}  // namespace memplan::cli
