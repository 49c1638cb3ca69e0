#include "importers/snapshot/pickle.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "core/input_error.hpp"

namespace memplan::importers {

namespace {

using Kind = PickleValue::Kind;

constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;

// Empties the containers `values`: what a memo cycle holds is then freed with the rest.
void break_cycles(std::vector<PickleRef>& values) {
  for (const PickleRef& v : values) {
    v->items.clear();
    v->dict.clear();
  }
  values.clear();
}

PickleRef make(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

PickleRef make_int(std::int64_t i) {
  PickleRef v = make(Kind::kInt);
  v->integer = i;
  return v;
}

// What each refused opcode would do, for the one line that refuses it.
const char* refused(std::uint8_t op) {
  switch (op) {
    case 'c':
      return "GLOBAL (imports a Python object by name)";
    case 0x93:
      return "STACK_GLOBAL (imports a Python object by name)";
    case 'R':
      return "REDUCE (calls a function)";
    case 'b':
      return "BUILD (sets an object's state)";
    case 'i':
      return "INST (imports a class and calls it)";
    case 'o':
      return "OBJ (calls a class)";
    case 0x81:
      return "NEWOBJ (calls a class)";
    case 0x92:
      return "NEWOBJ_EX (calls a class)";
    case 0x82:
    case 0x83:
    case 0x84:
      return "EXT (imports a registered object)";
    case 'P':
    case 'Q':
      return "PERSID (asks the reader for an outside object)";
    case 0x97:
    case 0x98:
      return "an out-of-band buffer";
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96:
      return "bytes (a memory snapshot holds none)";
    case 'S':
    case 'T':
    case 'U':
      return "a Python 2 byte string (a memory snapshot holds none)";
    case 0x8f:
    case 0x90:
    case 0x91:
      return "a set (a memory snapshot holds none)";
    default:
      return nullptr;
  }
}

// The pickle machine (Python's Lib/pickle.py, _Unpickler) for the opcodes that build plain data.
class Machine {
 public:
  Machine(sim::InputStream& in, sim::ValueBudget budget) : in_(in), budget_(budget) {}
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;
  ~Machine() { break_cycles(values_); }  // a pickle refused half-way

  PickleDocument run() {
    while (in_.sgetc() != std::streambuf::traits_type::eof()) {
      op_at_ = pos_;
      const std::uint8_t op = byte();
      if (const char* what = refused(op)) {
        fail(
            fmt::format("{}: refused, memplan reads a pickle as plain data only (None, "
                        "booleans, numbers, strings, lists, tuples, dicts), and runs nothing",
                        what));
      }
      if (op == '.') {  // STOP
        PickleRef root = pop();
        return {std::move(root), std::move(values_)};
      }
      step(op);
    }
    op_at_ = pos_;
    fail("truncated: the data ends before the pickle's STOP");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw sim::InputError(in_.source(), fmt::format("pickle byte {}: {}", op_at_, what));
  }

  // The next `n` bytes, read in chunks so that a length the data does not hold is refused at its
  // end rather than allocated.
  std::string take(std::uint64_t n) {
    std::string s;
    while (s.size() < n) {
      const std::size_t chunk =
          static_cast<std::size_t>(std::min<std::uint64_t>(n - s.size(), kChunk));
      const std::size_t at = s.size();
      s.resize(at + chunk);
      const auto got =
          static_cast<std::size_t>(in_.sgetn(s.data() + at, static_cast<std::streamsize>(chunk)));
      pos_ += got;
      if (got < chunk) fail("truncated: an argument runs past the end of the data");
    }
    return s;
  }
  std::uint8_t byte() {
    const auto c = in_.sbumpc();
    if (c == std::streambuf::traits_type::eof())
      fail("truncated: an argument runs past the end of the data");
    ++pos_;
    return static_cast<std::uint8_t>(c);
  }
  std::uint64_t little_endian(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{byte()} << (8U * static_cast<unsigned>(i));
    return v;
  }
  std::string line() {
    std::string s;
    for (;;) {
      const auto c = in_.sbumpc();
      if (c == std::streambuf::traits_type::eof())
        fail("truncated: a text argument has no end of line");
      ++pos_;
      if (c == '\n') return s;
      s += static_cast<char>(c);
    }
  }
  std::int64_t decimal(std::string_view s) {
    std::int64_t v = 0;
    const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (error != std::errc() || end != s.data() + s.size()) {
      fail("an integer that is not a 64-bit decimal");
    }
    return v;
  }
  // LONG1 / LONG4: n bytes of two's complement, little-endian.
  PickleRef long_integer(std::uint64_t n) {
    if (n > 8) fail("an integer wider than 64 bits");
    const std::string s = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = s.size(); i-- > 0;) v = v << 8U | static_cast<std::uint8_t>(s[i]);
    if (n > 0 && n < 8 && (static_cast<std::uint8_t>(s.back()) & 0x80U) != 0) {
      v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
    }
    return make_int(static_cast<std::int64_t>(v));
  }
  // Protocol 0's strings: each byte a code point below 256, \uXXXX and \UXXXXXXXX the others;
  // returned as UTF-8.
  std::string raw_unicode_escape(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::uint32_t code = static_cast<std::uint8_t>(s[i]);
      const std::size_t digits = s[i] != '\\' || i + 1 == s.size() ? 0
                                 : s[i + 1] == 'u'                 ? 4
                                 : s[i + 1] == 'U'                 ? 8
                                                                   : 0;
      if (digits > 0) {
        if (i + 2 + digits > s.size()) fail("a truncated \\u escape");
        const char* first = s.data() + i + 2;
        const auto [end, error] = std::from_chars(first, first + digits, code, 16);
        if (error != std::errc() || end != first + digits || code > 0x10FFFF) {
          fail("a \\u escape that is not a code point");
        }
        i += 1 + digits;
      }
      append_utf8(out, code);
    }
    return out;
  }
  static void append_utf8(std::string& out, std::uint32_t code) {
    auto byte_of = [](std::uint32_t v) { return static_cast<char>(static_cast<std::uint8_t>(v)); };
    if (code < 0x80) {
      out += byte_of(code);
    } else if (code < 0x800) {
      out += byte_of(0xC0U | code >> 6U);
      out += byte_of(0x80U | (code & 0x3FU));
    } else if (code < 0x10000) {
      out += byte_of(0xE0U | code >> 12U);
      out += byte_of(0x80U | (code >> 6U & 0x3FU));
      out += byte_of(0x80U | (code & 0x3FU));
    } else {
      out += byte_of(0xF0U | code >> 18U);
      out += byte_of(0x80U | (code >> 12U & 0x3FU));
      out += byte_of(0x80U | (code >> 6U & 0x3FU));
      out += byte_of(0x80U | (code & 0x3FU));
    }
  }
  PickleRef string(std::string_view s) {
    PickleRef v = make(Kind::kString);
    v->text = std::string(s);
    return v;
  }

  // Each value made, each reference to one pushed (a DUP, a memo GET) and each memo PUT counts
  // against the budget: together they are what the machine holds.
  void count() {
    if (++counted_ > budget_.values) budget_.refuse(in_.source(), "pickle values");
  }
  void push(PickleRef v) {
    count();
    // A new list, tuple or dict (not a DUP or a GET) is kept until the document goes: it may be in
    // a cycle, and emptying each in turn frees the deepest nesting without recursion. Scalars
    // are freed with what holds them, or when popped.
    if (v.use_count() == 1 &&
        (v->kind == Kind::kList || v->kind == Kind::kTuple || v->kind == Kind::kDict)) {
      if (values_.size() >= next_drop_) drop_unreachable();
      values_.push_back(v);
    }
    stack_.push_back(std::move(v));
  }
  // Frees the containers only values_ still holds (popped, or replaced in the memo): none of them
  // is in a cycle, and what each held is either freed or in values_ too, so nothing recurses.
  // Done when values_ has doubled since the last time: each container is looked at O(1) times
  // on average.
  void drop_unreachable() {
    std::erase_if(values_, [](const PickleRef& v) {
      if (v.use_count() > 1) return false;
      v->items.clear();
      v->dict.clear();
      return true;
    });
    next_drop_ = std::max<std::size_t>(2 * values_.size(), kFirstDrop);
  }
  PickleRef pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("the stack is empty");
    PickleRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  // Values below the innermost MARK are out of reach until it is popped, as in Python's machine.
  PickleRef& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("the stack is empty");
    return stack_.back();
  }
  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const std::size_t from = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(std::make_move_iterator(stack_.begin() + static_cast<long>(from)),
                                 std::make_move_iterator(stack_.end()));
    stack_.resize(from);
    return items;
  }
  PickleValue& top_of(Kind kind, const char* op) {
    PickleValue& v = *top();
    if (v.kind != kind) fail(fmt::format("{} onto {}", op, kind_name(v.kind)));
    return v;
  }
  void set_items(PickleValue& dict, std::vector<PickleRef> items) {
    if (items.size() % 2 != 0) fail("a dict's items are not key and value pairs");
    for (std::size_t i = 0; i < items.size(); i += 2) {
      dict.dict.emplace_back(std::move(items[i]), std::move(items[i + 1]));
    }
  }
  void put(std::uint64_t index) {
    count();
    memo_[index] = top();
  }
  void get(std::uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail(fmt::format("GET of memo {}, which was never PUT", index));
    push(it->second);
  }

  void step(std::uint8_t op) {
    if (!scalar(op) && !number(op) && !container(op) && !stack_or_memo(op)) {
      fail(fmt::format("unknown opcode 0x{:02x}", op));
    }
  }

  // The protocol, and the opcodes that push None, a boolean or a string. False for any other
  // opcode.
  bool scalar(std::uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const int protocol = byte();
        if (protocol > 5) fail(fmt::format("protocol {} (this reader knows 0 to 5)", protocol));
        return true;
      }
      case 0x95:
        little_endian(8);
        return true;  // FRAME: only a hint for buffering
      case 'N':
        push(make(Kind::kNone));
        return true;
      case 0x88:
      case 0x89: {
        PickleRef v = make(Kind::kBool);
        v->boolean = op == 0x88;
        push(v);
        return true;
      }
      case 'V':
        push(string(raw_unicode_escape(line())));
        return true;  // UNICODE, protocol 0
      case 'X':
        push(string(take(little_endian(4))));
        return true;
      case 0x8c:
        push(string(take(byte())));
        return true;
      case 0x8d:
        push(string(take(little_endian(8))));
        return true;
      default:
        return false;
    }
  }

  // The opcodes that push an integer or a float. False for any other opcode.
  bool number(std::uint8_t op) {
    switch (op) {
      case 'I': {  // INT: also protocol 0's booleans
        const std::string s = line();
        if (s == "00" || s == "01") {
          PickleRef v = make(Kind::kBool);
          v->boolean = s == "01";
          push(v);
        } else {
          push(make_int(decimal(s)));
        }
        return true;
      }
      case 'L': {
        std::string s = line();
        if (!s.empty() && s.back() == 'L') s.pop_back();
        push(make_int(decimal(s)));
        return true;
      }
      case 'J':
        push(make_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(little_endian(4)))));
        return true;
      case 'K':
        push(make_int(byte()));
        return true;
      case 'M':
        push(make_int(static_cast<std::int64_t>(little_endian(2))));
        return true;
      case 0x8a:
        push(long_integer(byte()));
        return true;
      case 0x8b:
        push(long_integer(little_endian(4)));
        return true;
      case 'F': {
        const std::string s = line();
        PickleRef v = make(Kind::kFloat);
        const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v->number);
        if (error != std::errc() || end != s.data() + s.size()) fail("a float that is not one");
        push(v);
        return true;
      }
      case 'G': {
        std::uint64_t bits = 0;
        for (const char c : take(8)) bits = bits << 8U | static_cast<std::uint8_t>(c);
        PickleRef v = make(Kind::kFloat);
        v->number = std::bit_cast<double>(bits);
        push(v);
        return true;
      }
      default:
        return false;
    }
  }

  // The opcodes that make or fill a list, a tuple or a dict. False for any other opcode.
  bool container(std::uint8_t op) {
    switch (op) {
      case ']':
        push(make(Kind::kList));
        return true;
      case ')':
        push(make(Kind::kTuple));
        return true;
      case '}':
        push(make(Kind::kDict));
        return true;
      case 'l':
      case 't': {
        PickleRef v = make(op == 'l' ? Kind::kList : Kind::kTuple);
        v->items = pop_mark();
        push(v);
        return true;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        PickleRef v = make(Kind::kTuple);
        v->items.resize(static_cast<std::size_t>(op - 0x84));
        for (std::size_t i = v->items.size(); i-- > 0;) v->items[i] = pop();
        push(v);
        return true;
      }
      case 'd': {
        PickleRef v = make(Kind::kDict);
        set_items(*v, pop_mark());
        push(v);
        return true;
      }
      case 'a': {
        PickleRef item = pop();
        top_of(Kind::kList, "APPEND").items.push_back(std::move(item));
        return true;
      }
      case 'e': {
        std::vector<PickleRef> items = pop_mark();
        PickleValue& list = top_of(Kind::kList, "APPENDS");
        for (PickleRef& item : items) list.items.push_back(std::move(item));
        return true;
      }
      case 's': {
        PickleRef value = pop();
        PickleRef key = pop();
        top_of(Kind::kDict, "SETITEM").dict.emplace_back(std::move(key), std::move(value));
        return true;
      }
      case 'u': {
        std::vector<PickleRef> items = pop_mark();
        set_items(top_of(Kind::kDict, "SETITEMS"), std::move(items));
        return true;
      }
      default:
        return false;
    }
  }

  // Marks, the stack and the memo. False for any other opcode.
  bool stack_or_memo(std::uint8_t op) {
    switch (op) {
      case '(':
        marks_.push_back(stack_.size());
        return true;
      case '0':  // POP: the top value, or the top mark when no value is above it (Python's rule)
        if (stack_.size() > (marks_.empty() ? 0 : marks_.back())) {
          stack_.pop_back();
        } else {
          pop_mark();
        }
        return true;
      case '1':
        pop_mark();
        return true;
      case '2':
        push(top());
        return true;
      case 'p':
        put(static_cast<std::uint64_t>(decimal(line())));
        return true;
      case 'q':
        put(byte());
        return true;
      case 'r':
        put(little_endian(4));
        return true;
      case 0x94:
        put(memo_.size());
        return true;
      case 'g':
        get(static_cast<std::uint64_t>(decimal(line())));
        return true;
      case 'h':
        get(byte());
        return true;
      case 'j':
        get(little_endian(4));
        return true;
      default:
        return false;
    }
  }

  sim::InputStream& in_;
  sim::ValueBudget budget_;
  std::uint64_t counted_ = 0;
  std::uint64_t pos_ = 0;
  std::uint64_t op_at_ = 0;
  std::vector<PickleRef> values_;  // every container made and still reachable, for PickleDocument
  static constexpr std::size_t kFirstDrop = 4096;
  std::size_t next_drop_ = kFirstDrop;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
};

}  // namespace

PickleDocument::~PickleDocument() {
  break_cycles(values_);
}

PickleDocument read_pickle(sim::InputStream& input) {
  return Machine(input, sim::value_budget(input.limits(), kBytesPerPickleValue)).run();
}

PickleDocument read_pickle(std::string_view data, const std::string& source) {
  sim::InputStream input(data, source, sim::Content::kBinary);
  return read_pickle(input);
}

std::string kind_name(PickleValue::Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "a boolean";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a float";
    case Kind::kString:
      return "a string";
    case Kind::kList:
      return "a list";
    case Kind::kTuple:
      return "a tuple";
    case Kind::kDict:
      return "a dict";
  }
  return "a value";
}

}  // namespace memplan::importers
