// libFuzzer target for the Kineto importer: any bytes (gzip or not) go through decompression,
// parsing and import. Bad input must end in InputError; anything else (a crash, a sanitizer
// report, another exception, a failed MEMPLAN_CHECK) is a bug. Built with -DMEMPLAN_FUZZ=ON and
// clang; scripts/fuzz-import builds and runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/input_error.hpp"
#include "core/liveness.hpp"
#include "importers/kineto/compressed_file.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/recorded_step.hpp"
#include "io/trace_io.hpp"
#include "io/workload_summary.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  try {
    std::string text(reinterpret_cast<const char*>(data), size);
    // A small cap keeps decompression bombs from exhausting the fuzzer's memory.
    text = importers::decompress_if_gzip(std::move(text), "fuzz", std::size_t{64} << 20);
    const importers::KinetoTrace trace = importers::parse_kineto_trace(text, "fuzz");
    // The input's size picks the step rule, so that every rule meets every input shape.
    importers::ImportOptions options;
    if (size % 3 == 1) options.whole_trace = true;
    if (size % 3 == 2) options.window = std::pair<sim::Nanoseconds, sim::Nanoseconds>{0, 1'000'000};
    const importers::ImportResult result = importers::import_kineto(trace, options, "fuzz");
    (void)importers::measure_recorded_step(trace, result.report.step, result.report.gpu);
    (void)sim::incore_peak(result.workload);
    (void)sim::host_timeline(result.workload);
    // What the importer writes must read back as the same workload.
    if (sim::parse_trace(sim::write_trace(result.workload), "fuzz-out") != result.workload)
      __builtin_trap();
  } catch (const sim::InputError&) {
  }
  return 0;
}
