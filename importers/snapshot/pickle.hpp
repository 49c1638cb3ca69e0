#pragma once
// A pickle read as data only. PyTorch writes its memory snapshots with Python's pickle
// (torch.cuda.memory._dump_snapshot), and unpickling runs whatever the file names: a GLOBAL and a
// REDUCE call any function (os.system) with any arguments. This reader builds values of the
// plain types a snapshot holds (None, booleans, integers up to 64 bits, floats, strings, lists,
// tuples, dicts) and refuses every opcode that names, calls or constructs anything else (GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT*, PERSID, BINPERSID, the
// out-of-band buffers) before acting on it, as well as bytes and sets: one InputError naming the
// byte offset and the opcode. Nothing is executed, imported or looked up.
//
// How: the pickle machine of protocols 0 to 5 (stack, marks, memo) over shared values, so that a
// memo GET yields the same list or dict as Python's would (an APPEND after it shows in both).
// Read as it streams from an InputStream (io/input_stream.hpp: gunzipped when it is gzip data,
// within the size limit), so that data which is not a pickle is refused at its first byte.
// Bounded: each opcode makes or shares at most one value, a string is read in chunks up to what
// the data holds, and every value made, shared (DUP, memo GET) or memoized (PUT) counts against
// the input's value budget (sim::value_budget, at kBytesPerPickleValue each: the Transformer
// snapshot's 3 MB pickle counts 856,000). Values may form cycles through the memo, as Python's do:
// a reader of the result follows a schema of known depth, never the graph.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/input_stream.hpp"

namespace memplan::importers {

// What one counted value costs: the value with its shared_ptr's control block, its places on the
// stack and in the document, and what the snapshot reader makes of it: `memplan import snapshot`
// on the 3 MB Transformer snapshot peaks at 147 MB for 856,000 counted, 176 bytes each.
inline constexpr std::uint64_t kBytesPerPickleValue = 176;

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict };
  Kind kind = Kind::kNone;
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0;
  std::string text;                                   // kString (UTF-8)
  std::vector<PickleRef> items;                       // kList, kTuple
  std::vector<std::pair<PickleRef, PickleRef>> dict;  // kDict, in insertion order
};

/// A pickle's values, owned together. A memo can make a value hold itself (a list appended to
/// itself through a GET), which shared ownership alone would never free: the document empties
/// every list, tuple and dict it made when it goes. Keep it while reading its values.
class PickleDocument {
 public:
  PickleDocument(PickleRef root, std::vector<PickleRef> values)
      : root_(std::move(root)), values_(std::move(values)) {}
  PickleDocument(PickleDocument&&) = default;
  PickleDocument& operator=(PickleDocument&&) = delete;
  PickleDocument(const PickleDocument&) = delete;
  PickleDocument& operator=(const PickleDocument&) = delete;
  ~PickleDocument();

  [[nodiscard]] const PickleValue& operator*() const { return *root_; }
  const PickleValue* operator->() const { return root_.get(); }

 private:
  PickleRef root_;
  std::vector<PickleRef> values_;
};

/// The value `input` (a whole pickle, protocol 0 to 5) holds; `input.source()` names it in errors
/// ("FILE: pickle byte 1234: ..."). Throws InputError on anything but plain data, on truncated
/// or malformed input, and past the value budget.
PickleDocument read_pickle(sim::InputStream& input);
/// read_pickle of `data`, named `source`.
PickleDocument read_pickle(std::string_view data, const std::string& source);

/// The name of a value's kind, for messages ("a dict", "a list", "an integer").
std::string kind_name(PickleValue::Kind kind);

}  // namespace memplan::importers
