// `memplan capture MODEL`: records one training step of a PyTorch model as a trace. The work is
// Python's (python/memplan/torch): this command only runs `python3 -m memplan.torch capture ...`
// (cli/python_runner), whose exit status it returns (2 on bad input, with the one line Python
// printed).
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/python_runner.hpp"
#include "io/output_file.hpp"

namespace memplan::cli {

void add_capture_command(CLI::App& app, int& exit_status) {
  struct Options {
    std::string model, input = "224x224", device = "cpu", optimizer = "sgd", step, compile, output;
    int batch = 32;
    int seed = 0;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "capture", "Record one training step of a PyTorch model as a trace (python3 + torch)");
  cmd->add_option("MODEL", options->model,
                  "torchvision:NAME, or package.module:factory for your own model "
                  "(memplan.torch.models:gpt_block is a GPT block)")
      ->required();
  cmd->add_option("--batch", options->batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--input", options->input, "HxW for images, a sequence length for a GPT");
  cmd->add_option("--device", options->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--optimizer", options->optimizer, "sgd (momentum 0.9) or adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  cmd->add_option("--seed", options->seed, "torch.manual_seed for the weights and the batch");
  cmd->add_option("--step", options->step,
                  "package.module:function, your own training step: function(model, batch, "
                  "loss_fn, optimizer) returning the loss (autocast, a GradScaler, clipping, "
                  "gradient accumulation over micro-batches); default: zero_grad, forward, loss, "
                  "backward, optimizer.step");
  cmd->add_option("--compile", options->compile,
                  "torch.compile the model with this backend (inductor, aot_eager, ...): the "
                  "trace holds what its compiled step saves");
  cmd->add_option("-o,--output", options->output,
                  "trace file to write (traces/FORMAT.md; - for standard output)")
      ->required();
  cmd->callback([options, &exit_status] {
    sim::check_output(options->output, "-o");  // before Python and torch start
    std::vector<std::string> args{
        "capture",     options->model,     "--batch",  std::to_string(options->batch),
        "--input",     options->input,     "--device", options->device,
        "--optimizer", options->optimizer, "--seed",   std::to_string(options->seed),
        "-o",          options->output};
    if (!options->step.empty()) args.insert(args.end(), {"--step", options->step});
    if (!options->compile.empty()) args.insert(args.end(), {"--compile", options->compile});
    exit_status = run_memplan_torch("capture", args);
  });
}

}  // namespace memplan::cli
