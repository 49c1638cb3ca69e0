// `memplan capture MODEL`: records one training step of a PyTorch model as a trace. The work is
// Python's (python/memplan/torch): this command only finds the package beside the binary and runs
// `python3 -m memplan.torch capture ...`, whose exit status it returns (2 on bad input, with the
// one line Python printed).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "sim/input_error.hpp"

namespace memplan::cli {
namespace {

namespace fs = std::filesystem;

/// The folder holding the `memplan` Python package: $MEMPLAN_PYTHONPATH, else the source tree's
/// python/ above a build tree's bin/ (build/PRESET/bin), else an install's share/memplan/python.
fs::path find_package() {
  if (const char* env = std::getenv("MEMPLAN_PYTHONPATH"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (const fs::path& candidate :
       {bin / "../../../python", bin / "../share/memplan/python", bin / "../lib/memplan/python"}) {
    if (fs::exists(candidate / "memplan/torch/__main__.py", ec))
      return fs::weakly_canonical(candidate);
  }
  throw sim::InputError("capture",
                        fmt::format("cannot find the memplan Python package beside {} (set "
                                    "MEMPLAN_PYTHONPATH to the folder holding memplan/)",
                                    bin.string()));
}

/// Runs argv with PYTHONPATH starting at `package`; returns its exit status.
int run_python(const std::vector<std::string>& argv, const fs::path& package) {
  std::string path = package.string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    path += ":";
    path += old;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw sim::InputError("capture", fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setenv("PYTHONPATH", path.c_str(), 1);
    ::execv(args[0], args.data());
    fmt::print(stderr, "memplan: capture: cannot run {}: {}\n", argv[0], std::strerror(errno));
    ::_exit(2);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fmt::print(stderr, "memplan: capture: {} was killed by signal {}\n", argv[0], WTERMSIG(status));
  return 3;
}

}  // namespace

void add_capture_command(CLI::App& app, int& exit_status) {
  struct Options {
    std::string model, input = "224x224", device = "cpu", optimizer = "sgd", output;
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
  cmd->add_option("-o,--output", options->output, "trace file to write (format v1)")->required();
  cmd->callback([options, &exit_status] {
    const char* python = std::getenv("MEMPLAN_PYTHON");
    const std::vector<std::string> argv{
        python != nullptr && *python != '\0' ? python : "/usr/bin/python3",
        "-m",
        "memplan.torch",
        "capture",
        options->model,
        "--batch",
        std::to_string(options->batch),
        "--input",
        options->input,
        "--device",
        options->device,
        "--optimizer",
        options->optimizer,
        "--seed",
        std::to_string(options->seed),
        "-o",
        options->output};
    exit_status = run_python(argv, find_package());
  });
}

}  // namespace memplan::cli
