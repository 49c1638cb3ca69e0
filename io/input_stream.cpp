#include "io/input_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "core/host_memory.hpp"
#include "core/input_error.hpp"
#include "core/units.hpp"

namespace memplan::sim {
namespace {

constexpr std::size_t kChunk = std::size_t{1} << 20;

// The gzip magic: the data decides, not the file's name.
bool starts_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

std::atomic<std::uint64_t> limit_bytes{InputLimits{}.bytes};
std::atomic<std::uint64_t> limit_values{InputLimits{}.values};

}  // namespace

InputLimits input_limits() {
  return {limit_bytes.load(), limit_values.load()};
}

void set_input_limits(InputLimits limits) {
  limit_bytes = limits.bytes;
  limit_values = limits.values;
}

ValueBudget value_budget(const InputLimits& limits, std::uint64_t bytes_each) {
  const auto available = static_cast<std::uint64_t>(std::max<Bytes>(available_host_memory(), 0));
  const std::uint64_t by_memory = available / std::max<std::uint64_t>(bytes_each, 1);
  if (by_memory < limits.values) return {by_memory, true, available};
  return {limits.values, false, available};
}

void ValueBudget::refuse(std::string_view source, std::string_view what) const {
  if (by_memory) {
    throw InputError(std::string(source),
                     fmt::format("holds more than {} {}, as many as this machine's available "
                                 "memory ({}) holds",
                                 values, what, format_bytes(static_cast<Bytes>(available))));
  }
  throw InputError(std::string(source),
                   fmt::format("holds more than {} {} (memplan's input limit: raise it with "
                               "--max-input-values, or memplan.set_input_limits in Python)",
                               values, what));
}

struct InputStream::Inflater {
  z_stream stream{};
  bool member_ended = false;  // the last gzip member ended; more may follow
  Inflater() = default;
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  ~Inflater() { inflateEnd(&stream); }
};

InputStream::InputStream(const std::filesystem::path& path, Content content, InputLimits limits)
    : source_(path.string()), content_(content), limits_(limits) {
  open_file(path);
  raw_.resize(kChunk);
  raw_.resize(read_raw(raw_.data(), kChunk));
  if (starts_gzip(raw_)) start_inflating();
}

InputStream::InputStream(std::string_view data, std::string source, Content content,
                         InputLimits limits)
    : source_(std::move(source)), content_(content), limits_(limits), memory_(data) {
  if (starts_gzip(data)) start_inflating();
}

void InputStream::start_inflating() {
  inflater_ = std::make_unique<Inflater>();
  // 16 + MAX_WBITS: expect a gzip header; inflateInit2 is a macro with an old-style cast.
  if (inflateInit2(&inflater_->stream, 16 + MAX_WBITS) != Z_OK)
    throw InputError(source_, "cannot initialise zlib");
}

InputStream::~InputStream() {
  if (fd_ >= 0) ::close(fd_);
}

void InputStream::open_file(const std::filesystem::path& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  if (fd_ < 0) {
    if (errno == ENOENT) throw InputError(source_, "cannot open for reading (does it exist?)");
    throw InputError(source_, fmt::format("cannot open for reading: {}", std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd_, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(source_, "is a directory, not a file");
  }
}

std::size_t InputStream::read_raw(char* into, std::size_t size) {
  if (raw_end_) return 0;
  if (fd_ < 0) {
    const std::size_t n = std::min(size, memory_.size());
    std::memcpy(into, memory_.data(), n);
    memory_.remove_prefix(n);
    raw_end_ = memory_.empty();
    return n;
  }
  while (true) {
    const ssize_t n = ::read(fd_, into, size);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) {
      raw_end_ = true;
      return 0;
    }
    if (errno != EINTR)
      throw InputError(source_, fmt::format("read failed: {}", std::strerror(errno)));
  }
}

std::size_t InputStream::inflate_into(char* into, std::size_t size) {
  z_stream& z = inflater_->stream;
  z.next_out = reinterpret_cast<Bytef*>(into);
  z.avail_out = static_cast<uInt>(size);
  while (z.avail_out > 0) {
    if (z.avail_in == 0) {
      if (fd_ >= 0) {
        if (raw_begin_ >= raw_.size()) {
          raw_.resize(kChunk);
          raw_.resize(read_raw(raw_.data(), kChunk));
          raw_begin_ = 0;
        }
        z.next_in = reinterpret_cast<Bytef*>(raw_.data() + raw_begin_);
        z.avail_in = static_cast<uInt>(raw_.size() - raw_begin_);
        raw_begin_ = raw_.size();
      } else if (!raw_end_) {
        // In memory: hand zlib what it can take of the rest.
        const std::size_t n = std::min<std::size_t>(memory_.size(), std::size_t{1} << 30);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(memory_.data()));
        z.avail_in = static_cast<uInt>(n);
        memory_.remove_prefix(n);
        raw_end_ = memory_.empty();
      }
      if (z.avail_in == 0) {
        if (inflater_->member_ended) break;  // the data ends after a whole member
        throw InputError(source_,
                         "truncated gzip data (the file ends in the middle of the stream)");
      }
    }
    if (inflater_->member_ended) {
      // Concatenated gzip members are legal: bytes after one start the next.
      if (inflateReset(&z) != Z_OK) throw InputError(source_, "cannot reset zlib");
      inflater_->member_ended = false;
    }
    const int status = inflate(&z, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      inflater_->member_ended = true;
      continue;
    }
    if (status == Z_OK || (status == Z_BUF_ERROR && z.avail_in == 0)) continue;
    throw InputError(source_,
                     fmt::format("corrupt gzip data: {}",
                                 z.msg != nullptr ? z.msg : fmt::format("zlib error {}", status)));
  }
  return size - z.avail_out;
}

std::size_t InputStream::fill() {
  buffer_.resize(kChunk);
  std::size_t n = 0;
  if (inflater_ != nullptr) {
    n = inflate_into(buffer_.data(), buffer_.size());
  } else if (raw_begin_ < raw_.size()) {
    // The bytes read to look for the gzip magic.
    n = raw_.size() - raw_begin_;
    std::memcpy(buffer_.data(), raw_.data() + raw_begin_, n);
    raw_begin_ = raw_.size();
  } else {
    n = read_raw(buffer_.data(), buffer_.size());
  }
  buffer_.resize(n);
  return n;
}

InputStream::int_type InputStream::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  std::size_t kept = 0;
  while (kept == 0) {  // 0 when a whole buffer was whitespace past the run's limit
    const std::size_t n = fill();
    if (n == 0) return traits_type::eof();
    if (delivered_ + n > limits_.bytes) {
      throw InputError(source_,
                       fmt::format("larger than {}{} (memplan's input limit: raise it with "
                                   "--max-input-size, or memplan.set_input_limits in Python)",
                                   format_bytes(static_cast<Bytes>(limits_.bytes)),
                                   gzip() ? " once decompressed" : ""));
    }
    if (content_ == Content::kJson) {
      if (const void* nul = std::memchr(buffer_.data(), '\0', n); nul != nullptr) {
        const auto at =
            delivered_ + static_cast<std::uint64_t>(static_cast<const char*>(nul) - buffer_.data());
        throw InputError(source_, fmt::format("a NUL byte at byte {}{}: not a text file", at,
                                              gzip() ? " of the decompressed data" : ""));
      }
    }
    delivered_ += n;
    kept = content_ == Content::kJson ? cut_whitespace(n) : n;
  }
  setg(buffer_.data(), buffer_.data(), buffer_.data() + kept);
  return traits_type::to_int_type(*gptr());
}

std::size_t InputStream::cut_whitespace(std::size_t n) {
  char* data = buffer_.data();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = data[i];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (++whitespace_run_ > kMaxWhitespaceRun) continue;
    } else {
      whitespace_run_ = 0;
      in_string_ = c == '"';
    }
    data[kept++] = c;
  }
  return kept;
}

std::string read_file(const std::filesystem::path& path, Content content) {
  InputStream input(path, content);
  return read_all(input);
}

std::string read_all(InputStream& input) {
  std::string out;
  char chunk[1 << 16];
  while (true) {
    const std::streamsize n = input.sgetn(chunk, sizeof chunk);
    if (n <= 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace memplan::sim
