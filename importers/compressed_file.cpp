#include "importers/compressed_file.hpp"

#include <zlib.h>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "io/trace_io.hpp"

namespace memplan::importers {

std::string read_maybe_compressed(const std::filesystem::path& path) {
  return decompress_if_gzip(sim::read_file(path), path.string());
}

std::string decompress_if_gzip(std::string data, std::string_view source, std::size_t max_bytes) {
  const bool gzip = data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
                    static_cast<unsigned char>(data[1]) == 0x8b;
  if (!gzip) return data;
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip header; inflateInit2 is a macro with an old-style cast.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw sim::InputError(std::string(source), "cannot initialise zlib");
  }
  std::string out;
  std::string chunk(std::size_t{1} << 20, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(data.data());
  stream.avail_in = static_cast<uInt>(data.size());
  int status = Z_OK;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk.data());
    stream.avail_out = static_cast<uInt>(chunk.size());
    status = inflate(&stream, Z_NO_FLUSH);
    const std::size_t produced = chunk.size() - stream.avail_out;
    out.append(chunk.data(), produced);
    if (out.size() > max_bytes) {
      inflateEnd(&stream);
      throw sim::InputError(std::string(source),
                            fmt::format("gzip data expands to more than {} bytes", max_bytes));
    }
    if (status == Z_STREAM_END) {
      // Concatenated gzip members are legal; read the next one if bytes remain.
      if (stream.avail_in == 0) break;
      if (inflateReset(&stream) != Z_OK) break;
      continue;
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR && stream.avail_in == 0) {
      inflateEnd(&stream);
      throw sim::InputError(std::string(source),
                            "truncated gzip data (the file ends in the middle of the stream)");
    }
    const std::string message =
        stream.msg != nullptr ? stream.msg : fmt::format("zlib error {}", status);
    inflateEnd(&stream);
    throw sim::InputError(std::string(source), "corrupt gzip data: " + message);
  }
  inflateEnd(&stream);
  return out;
}

}  // namespace memplan::importers
