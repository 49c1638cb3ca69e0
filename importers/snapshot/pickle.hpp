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
// Bounded: each opcode makes at most one value, a string is at most what is left of the data, and
// a pickle of more than kMaxPickleValues values is refused (about 120 bytes each: a real
// snapshot's 3 MB pickle makes 3 million, 360 MB). Values may form cycles through the memo, as
// Python's do: a reader of the result follows a schema of known depth, never the graph.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memplan::importers {

inline constexpr std::size_t kMaxPickleValues = std::size_t{1} << 25;

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

/// The value `data` (a whole pickle, protocol 0 to 5) holds. `source` names it in errors
/// ("FILE: pickle byte 1234: ..."). Throws InputError on anything but plain data, on truncated
/// or malformed input, and past `max_values` values made (a memo GET or a DUP makes none).
PickleDocument read_pickle(std::string_view data, const std::string& source,
                           std::size_t max_values = kMaxPickleValues);

/// The name of a value's kind, for messages ("a dict", "a list", "an integer").
std::string kind_name(PickleValue::Kind kind);

}  // namespace memplan::importers
