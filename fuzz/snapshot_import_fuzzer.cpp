// libFuzzer target for the memory-snapshot reader: any bytes (gzip or not) go through
// decompression, the pickle machine (importers/snapshot/pickle.hpp), the snapshot's field checks
// and the per-device figures. Bad input must end in InputError; anything else (a crash, a
// sanitizer report, another exception) is a bug. scripts/fuzz-import snapshot builds and runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/input_error.hpp"
#include "importers/compressed_file.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/pickle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  try {
    const std::string bytes = importers::decompress_if_gzip(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz", std::size_t{64} << 20);
    const importers::PickleDocument pickle = importers::read_pickle(bytes, "fuzz");
    const importers::MemorySnapshot snapshot = importers::memory_snapshot_from(*pickle, "fuzz");
    (void)importers::snapshot_histories(snapshot);
  } catch (const sim::InputError&) {
  }
  return 0;
}
