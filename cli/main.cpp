// memplan: plan GPU memory for training steps that do not fit. This file only wires the
// subcommands together and turns errors into one line and an exit status:
// 0 success, 1 an expected negative outcome a command reports (e.g. a plan that does not fit),
// 2 bad input (a trace, a plan, a flag), 1 also when a backend fails at run time
// (runtime::BackendError: a kernel, a CUDA call) and when the machine runs out of memory
// (std::bad_alloc), 3 an internal error (a bug in memplan: please report it). Every error line is
// one printable line (core/printable.hpp).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/input_limit_flags.hpp"
#include "core/host_memory.hpp"
#include "core/input_error.hpp"
#include "core/printable.hpp"
#include "runtime/backend_error.hpp"

namespace {

// What a request will need is said before it starts where it can be known (a zoo model's size,
// the input limits); anything else that runs the machine out of memory ends here, in one line:
// a std::bad_alloc caught in main once what it unwound has cleaned up (sim::hold_memory_reserve
// lets the destructors that allocate finish), or one that could not propagate (thrown in a
// noexcept function), at std::terminate.
constexpr const char* kOutOfMemory =
    "memplan: out of memory: the run needed more memory than this machine gave it\n";

std::terminate_handler default_terminate = nullptr;

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      std::fputs(kOutOfMemory, stderr);
      std::_Exit(1);
    } catch (...) {
    }
  }
  if (default_terminate != nullptr) default_terminate();  // the C++ runtime's message, then abort
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  memplan::sim::hold_memory_reserve();
  default_terminate = std::set_terminate(on_terminate);
  CLI::App app{"memplan: simulate, search and validate memory plans for GPU training steps"};
  app.name("memplan");
  app.require_subcommand(1);
  app.set_version_flag("--version", "memplan 0.1.0");
  int exit_status = 0;
  memplan::cli::add_info_command(app);
  memplan::cli::add_simulate_command(app, exit_status);
  memplan::cli::add_compare_command(app);
  memplan::cli::add_search_command(app, exit_status);
  memplan::cli::add_sweep_command(app);
  memplan::cli::add_zoo_command(app);
  memplan::cli::add_import_command(app);
  memplan::cli::add_validate_command(app, exit_status);
  memplan::cli::add_record_command(app);
  memplan::cli::add_capture_command(app, exit_status);
  memplan::cli::add_input_limit_flags(app);  // before a command's name
  memplan::cli::refuse_empty_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unexpected argument is most often the second word of a value with a space in it.
    const bool extra = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    fmt::print(stderr, "memplan: {} (see memplan --help{})\n", memplan::sim::printable(e.what()),
               extra ? "; write a value without spaces, e.g. --latency 10us" : "");
    return 2;
  } catch (const memplan::sim::InputError& e) {
    fmt::print(stderr, "memplan: {}\n", e.what());  // printable already
    return 2;
  } catch (const memplan::runtime::BackendError& e) {
    fmt::print(stderr, "memplan: backend failed: {}\n", memplan::sim::printable(e.what()));
    return 1;
  } catch (const std::bad_alloc&) {
    std::fputs(kOutOfMemory, stderr);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "memplan: internal error (a bug; please report it): {}\n",
               memplan::sim::printable(e.what()));
    return 3;
  }
  return exit_status;
}
