#pragma once
// Reading files that may be gzip-compressed: PyTorch's tensorboard handler writes
// `*.pt.trace.json.gz`, plain `export_chrome_trace` writes `.json`; a memory snapshot may be
// gzip'd too. The gzip magic bytes decide,
// not the file name. Truncated or corrupt data is bad input (InputError), never a crash.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace memplan::importers {

/// Largest decompressed size accepted (a guard against decompression bombs).
inline constexpr std::size_t kMaxDecompressedBytes = std::size_t{4} << 30;

/// The file's text, gunzipped when it starts with the gzip magic. Throws InputError.
std::string read_maybe_compressed(const std::filesystem::path& path);

/// `data` gunzipped when it starts with the gzip magic, else unchanged; `source` names it in
/// errors. Throws InputError on truncated or corrupt gzip data.
std::string decompress_if_gzip(std::string data, std::string_view source,
                               std::size_t max_bytes = kMaxDecompressedBytes);

}  // namespace memplan::importers
