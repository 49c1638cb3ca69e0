#pragma once
// Reading an input file as a stream, within limits. Every file memplan reads (traces, jobs, plans,
// profiler traces, memory snapshots) comes through InputStream: it reads a bounded buffer at a
// time (so /dev/zero, a FIFO or a 4 GiB file never sits whole in memory), gunzips transparently
// when the data starts with the gzip magic (PyTorch's tensorboard handler writes
// `*.pt.trace.json.gz`; the magic decides, not the name), refuses a NUL byte in a text input
// (JSON holds none, and nlohmann's lexer would read one as the end of the document), and refuses
// an input that expands past the size limit (a gzip bomb) at the byte where it does.
// The limits are the process's (set_input_limits: the CLI's --max-input-size and
// --max-input-values, memplan.set_input_limits in Python); `values` bounds what a parsed input may
// hold (io/json_reader.hpp counts JSON values, the snapshot reader pickle values), within what the
// machine's memory holds (value_budget).
// Every problem is an InputError naming the input: "t.json.gz: truncated gzip data".
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <streambuf>
#include <string>
#include <string_view>

namespace memplan::sim {

struct InputLimits {
  /// The most bytes one input may hold once decompressed.
  std::uint64_t bytes = std::uint64_t{4} << 30;
  /// The most values (JSON values, pickle values) one input may hold once parsed.
  std::uint64_t values = 100'000'000;
};

/// The limits every InputStream opened from now on gets (defaults: InputLimits{}).
[[nodiscard]] InputLimits input_limits();
void set_input_limits(InputLimits limits);

/// How many values a parsed input may hold at once: the values limit, or fewer where the memory
/// this machine has available (core/host_memory.hpp) holds fewer of `bytes_each` (what one
/// value parsed costs its reader, measured), so that a flood of values is refused in one line
/// before it ends in "out of memory".
struct ValueBudget {
  std::uint64_t values = 0;
  bool by_memory = false;       // the machine's memory, not the limit, sets `values`
  std::uint64_t available = 0;  // the machine's available memory, in bytes
  /// The InputError of an input that holds more (what they are: "JSON values"), with the cause.
  [[noreturn]] void refuse(std::string_view source, std::string_view what) const;
};
[[nodiscard]] ValueBudget value_budget(const InputLimits& limits, std::uint64_t bytes_each);

enum class Content : std::uint8_t {
  // JSON text: a NUL byte is an error, and whitespace between tokens past kMaxWhitespaceRun bytes
  // in a row is dropped (insignificant to JSON, but nlohmann's lexer keeps every byte between two
  // tokens for its messages: 4 GB of spaces were 4 GB held).
  kJson,
  kBinary,  // any byte
};
inline constexpr std::size_t kMaxWhitespaceRun = 4096;

class InputStream final : public std::streambuf {
 public:
  /// Opens `path` (a file, a FIFO, a device; not a folder). Throws InputError.
  InputStream(const std::filesystem::path& path, Content content,
              InputLimits limits = input_limits());
  /// Reads `data`, which must outlive the stream; `source` names it in errors.
  InputStream(std::string_view data, std::string source, Content content,
              InputLimits limits = input_limits());
  ~InputStream() override;
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const InputLimits& limits() const { return limits_; }
  /// Whether the input is gzip data (decided by its first two bytes).
  [[nodiscard]] bool gzip() const { return inflater_ != nullptr; }

 protected:
  int_type underflow() override;

 private:
  struct Inflater;
  void open_file(const std::filesystem::path& path);
  void start_inflating();
  // Up to `size` bytes of the input as stored (compressed or not); 0 at its end.
  std::size_t read_raw(char* into, std::size_t size);
  // Fills buffer_ with the next bytes of the data; 0 at its end.
  std::size_t fill();
  std::size_t inflate_into(char* into, std::size_t size);
  // Drops the whitespace of buffer_'s first `n` bytes that runs past kMaxWhitespaceRun outside
  // strings; returns how many bytes are left.
  std::size_t cut_whitespace(std::size_t n);

  std::string source_;
  Content content_;
  InputLimits limits_;
  int fd_ = -1;
  std::string_view memory_;  // the input when it is in memory (fd_ is -1)
  bool raw_end_ = false;
  std::string raw_;            // read ahead of the inflater, or the first bytes of plain data
  std::size_t raw_begin_ = 0;  // what of raw_ is not consumed yet starts here
  std::unique_ptr<Inflater> inflater_;
  std::string buffer_;
  std::uint64_t delivered_ = 0;  // bytes of the data read so far (before cut_whitespace)
  // cut_whitespace's state across buffers.
  bool in_string_ = false;
  bool escaped_ = false;
  std::size_t whitespace_run_ = 0;
};

/// Everything `input` holds from where it is, within its size limit.
std::string read_all(InputStream& input);
/// read_all of the file at `path` (gunzipped when it is gzip data).
std::string read_file(const std::filesystem::path& path, Content content = Content::kBinary);

}  // namespace memplan::sim
