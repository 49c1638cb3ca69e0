// libFuzzer target for the memory-snapshot reader: any bytes (gzip or not) go through
// decompression, the pickle machine (importers/snapshot/pickle.hpp), the snapshot's field checks
// the per-device figures and the caching-allocator model's replay of the events. Bad input must end
// in InputError; anything else (a crash, a sanitizer report, another exception) is a bug.
// scripts/fuzz-import snapshot builds and runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/input_error.hpp"
#include "importers/snapshot/allocator_replay.hpp"
#include "importers/snapshot/memory_snapshot.hpp"
#include "importers/snapshot/pickle.hpp"
#include "io/input_stream.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memplan;
  try {
    // A small cap keeps decompression bombs from exhausting the fuzzer's memory.
    sim::InputStream input(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz",
                           sim::Content::kBinary, {std::uint64_t{64} << 20, 1'000'000});
    const std::string bytes = sim::read_all(input);
    const importers::PickleDocument pickle = importers::read_pickle(bytes, "fuzz");
    const importers::MemorySnapshot snapshot = importers::memory_snapshot_from(*pickle, "fuzz");
    for (const importers::SnapshotHistory& h : importers::snapshot_histories(snapshot)) {
      (void)importers::replay_allocator(snapshot, h);
    }
  } catch (const sim::InputError&) {
  }
  return 0;
}
