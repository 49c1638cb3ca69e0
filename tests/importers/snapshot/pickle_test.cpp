// The pickle reader: plain data under every protocol Python writes (0 to 5), the memo's sharing,
// and refusal of everything that would import, call or construct (the pickles below are what
// Python 3.11's pickle.dumps wrote for the values named beside them).
#include <random>
#include <string>
#include <string_view>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "importers/snapshot/pickle.hpp"
#include "io/input_stream.hpp"

using memplan::importers::PickleDocument;
using memplan::importers::PickleValue;
using memplan::importers::read_pickle;
using Kind = PickleValue::Kind;

namespace {

// Bytes from their hex digits.
std::string bytes(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

// {'a': [1, 2.5, None, True, 'x'], 'b': (1, 2), 'big': -2**40, 'neg': -3, 'k': 300, 'u': 'é'}
// at protocols 0, 1, 2 and 4 (5 differs from 4 in its first byte only).
const std::string kProtocol[] = {
    bytes("286470300a56610a70310a286c70320a49310a6146322e350a614e614930310a6156780a70330a617356"
          "620a70340a2849310a49320a7470350a73566269670a70360a4c2d313039393531313632373737364c0a"
          "73566e65670a70370a492d330a73566b0a70380a493330300a7356750a70390a56e90a7031300a732e"),
    bytes("7d71002858010000006171015d7102284b014740040000000000004e4930310a58010000007871036558"
          "01000000627104284b014b02747105580300000062696771064c2d313039393531313632373737364c0a"
          "58030000006e656771074afdffffff58010000006b71084d2c0158010000007571095802000000c3a971"
          "0a752e"),
    bytes("80027d71002858010000006171015d7102284b014740040000000000004e88580100000078710365580100"
          "00006271044b014b02867105580300000062696771068a060000000000ff58030000006e656771074afdff"
          "ffff58010000006b71084d2c0158010000007571095802000000c3a9710a752e"),
    bytes("80049551000000000000007d94288c0161945d94284b014740040000000000004e888c017894658c0162"
          "944b014b0286948c03626967948a060000000000ff8c036e6567944afdffffff8c016b944d2c018c0175"
          "948c02c3a994752e"),
};

const PickleValue& at(const PickleValue& dict, const std::string& key) {
  for (const auto& [k, v] : dict.dict) {
    if (k->kind == Kind::kString && k->text == key) return *v;
  }
  FAIL("no key " << key);
  throw std::logic_error("unreachable");
}

std::string refusal(const std::string& pickle) {
  try {
    read_pickle(pickle, "x.pickle");
  } catch (const memplan::sim::InputError& e) {
    return e.what();
  }
  return "(read)";
}

}  // namespace

TEST_CASE("a pickle of plain data reads the same under protocols 0, 1, 2 and 4",
          "[importers][snapshot]") {
  for (const std::string& pickle : kProtocol) {
    const PickleDocument v = read_pickle(pickle, "x.pickle");
    REQUIRE(v->kind == Kind::kDict);
    REQUIRE(v->dict.size() == 6);
    const PickleValue& a = at(*v, "a");
    REQUIRE(a.kind == Kind::kList);
    REQUIRE(a.items.size() == 5);
    CHECK(a.items[0]->kind == Kind::kInt);
    CHECK(a.items[0]->integer == 1);
    CHECK(a.items[1]->kind == Kind::kFloat);
    CHECK(a.items[1]->number == 2.5);
    CHECK(a.items[2]->kind == Kind::kNone);
    CHECK(a.items[3]->kind == Kind::kBool);
    CHECK(a.items[3]->boolean);
    CHECK(a.items[4]->text == "x");
    const PickleValue& b = at(*v, "b");
    CHECK(b.kind == Kind::kTuple);
    REQUIRE(b.items.size() == 2);
    CHECK(b.items[1]->integer == 2);
    CHECK(at(*v, "big").integer == -(std::int64_t{1} << 40));
    CHECK(at(*v, "neg").integer == -3);
    CHECK(at(*v, "k").integer == 300);
    CHECK(at(*v, "u").text == "\xc3\xa9");  // 'é' in UTF-8, from latin-1 in protocol 0
  }
}

TEST_CASE("the memo shares a value as Python's does", "[importers][snapshot]") {
  // l = [1]; [l, l] at protocol 2: the second item is a GET of the first.
  const PickleDocument v = read_pickle(bytes("80025d7100285d71014b01616801652e"), "x.pickle");
  REQUIRE(v->items.size() == 2);
  CHECK(v->items[0].get() == v->items[1].get());
  CHECK(v->items[0]->items.size() == 1);
}

TEST_CASE("a pickle that would import, call or construct is refused before it acts",
          "[importers][snapshot]") {
  // A __reduce__ to os.system('touch /tmp/memplan-pwned') at protocols 0, 2 and 4.
  CHECK(refusal(bytes("63706f7369780a73797374656d0a70300a2856746f756368202f746d702f6d656d706c616e"
                      "2d70776e65640a70310a7470320a5270330a2e")) ==
        "x.pickle: pickle byte 0: GLOBAL (imports a Python object by name): refused, memplan "
        "reads a pickle as plain data only (None, booleans, numbers, strings, lists, tuples, "
        "dicts), and runs nothing");
  CHECK(refusal(bytes("800263706f7369780a73797374656d0a71005818000000746f756368202f746d702f6d656d"
                      "706c616e2d70776e656471018571025271032e"))
            .find("pickle byte 2: GLOBAL") != std::string::npos);
  CHECK(refusal(bytes("80049533000000000000008c05706f736978948c0673797374656d9493948c18746f756368"
                      "202f746d702f6d656d706c616e2d70776e656494859452942e"))
            .find("pickle byte 28: STACK_GLOBAL") != std::string::npos);
  // A REDUCE, BUILD, NEWOBJ or PERSID on its own, whatever is on the stack.
  CHECK(refusal(bytes("80024e4e522e")).find("byte 4: REDUCE (calls a function)") !=
        std::string::npos);
  CHECK(refusal(bytes("80024e4e622e")).find("byte 4: BUILD") != std::string::npos);
  CHECK(refusal(bytes("80024e4e812e")).find("byte 4: NEWOBJ") != std::string::npos);
  CHECK(refusal(bytes("80024e512e")).find("byte 3: PERSID") != std::string::npos);
  // Types a memory snapshot never holds: {1, 2}, b'ab', 2**70.
  CHECK(refusal(bytes("80049509000000000000008f94284b014b02902e")).find("byte 11: a set") !=
        std::string::npos);
  CHECK(refusal(bytes("800495060000000000000043026162942e")).find("byte 11: bytes") !=
        std::string::npos);
  CHECK(refusal(bytes("80028a090000000000000000402e")).find("an integer wider than 64 bits") !=
        std::string::npos);
  CHECK(refusal(bytes("80064e2e")).find("protocol 6") != std::string::npos);
  CHECK(refusal(bytes("8002ff2e")).find("unknown opcode 0xff") != std::string::npos);
}

TEST_CASE("a list that holds itself through the memo is read and freed", "[importers][snapshot]") {
  // l = []; l.append(l) at protocol 2: ] PUT 0, GET 0, APPEND. ASan's leak check frees it or fails.
  const PickleDocument v = read_pickle(bytes("80025d71006800612e"), "x.pickle");
  REQUIRE(v->items.size() == 1);
  CHECK(v->items[0].get() == &*v);
}

TEST_CASE("a pickle of more values than the limit is refused, references to shared ones count",
          "[importers][snapshot]") {
  const memplan::sim::InputLimits limits{.bytes = std::uint64_t{1} << 20, .values = 1000};
  auto read = [&](const std::string& pickle) {
    memplan::sim::InputStream input(pickle, "x.pickle", memplan::sim::Content::kBinary, limits);
    return read_pickle(input);
  };
  // Protocol 2: 1001 None (each a new value), then STOP.
  CHECK_THROWS_WITH(read(bytes("8002") + std::string(1001, 'N') + "."),
                    "x.pickle: holds more than 1000 pickle values (memplan's input limit: raise it "
                    "with --max-input-values, or memplan.set_input_limits in Python)");
  // 1000 None popped as they come: still 1000 made. One more is refused.
  std::string popped = bytes("8002");
  for (int i = 0; i < 1000; ++i) popped += "N0";
  CHECK_THROWS_WITH(read(popped + "N."), Catch::Contains("more than 1000 pickle values"));
  // A list and 999 DUPs of it are 1000 on the stack; 1000 DUPs are one too many (a pickle of DUPs
  // alone would otherwise hold 16 bytes of stack per byte read).
  CHECK(read(bytes("80025d") + std::string(999, '2') + ".")->kind == Kind::kList);
  CHECK_THROWS_WITH(read(bytes("80025d") + std::string(1000, '2') + "."),
                    Catch::Contains("more than 1000 pickle values"));
  // Memo PUTs count: a list MEMOIZEd (0x94) under 1000 indices.
  CHECK_THROWS_WITH(read(bytes("80045d") + std::string(1000, '\x94') + "."),
                    Catch::Contains("more than 1000 pickle values"));
}

TEST_CASE("popped lists are freed as the pickle is read, nested ones without recursion",
          "[importers][snapshot]") {
  // 200,000 lists nested in one another (EMPTY_LIST each, then APPEND each into the one below),
  // with a list made and popped between any two, and one that holds itself through the memo.
  // Freeing the nesting one shared_ptr inside the next would recurse 200,000 deep; the ASan
  // preset's leak check sees the cycle freed.
  constexpr int kDepth = 200000;
  std::string pickle = bytes("80045d9468006130");  // [] MEMOIZE GET 0 APPEND, POP: l = [l]
  for (int i = 0; i < kDepth; ++i) pickle += "]]0";
  pickle += std::string(kDepth - 1, 'a') + ".";
  const PickleDocument v = read_pickle(pickle, "x.pickle");
  const PickleValue* inner = &*v;
  int depth = 1;
  while (!inner->items.empty()) {
    inner = inner->items[0].get();
    ++depth;
  }
  CHECK(depth == kDepth);
}

TEST_CASE("what is not a pickle is refused at its first byte, however long it is",
          "[importers][snapshot]") {
  // /dev/zero was read whole, up to the 4 GiB size limit, before the first opcode was looked at.
  memplan::sim::InputStream zeros("/dev/zero", memplan::sim::Content::kBinary);
  CHECK_THROWS_WITH(read_pickle(zeros), "/dev/zero: pickle byte 0: unknown opcode 0x00");
  // A string whose length is past the data's end is refused at the end, not allocated.
  CHECK_THROWS_WITH(
      read_pickle(bytes("80048d") + std::string("\xff\xff\xff\xff\xff\xff\x00\x00") + "ab",
                  "x.pickle"),
      "x.pickle: pickle byte 2: truncated: an argument runs past the end of the data");
}

TEST_CASE("a truncated or malformed pickle is one InputError, never a crash",
          "[importers][snapshot]") {
  for (const std::string& pickle : kProtocol) {
    for (std::size_t n = 0; n < pickle.size(); ++n) {
      CAPTURE(n);
      CHECK_THROWS_AS(read_pickle(pickle.substr(0, n), "x.pickle"), memplan::sim::InputError);
    }
  }
  CHECK(refusal(bytes("800268052e")).find("GET of memo 5, which was never PUT") !=
        std::string::npos);
  CHECK(refusal(bytes("80024b01612e")).find("the stack is empty") != std::string::npos);
  CHECK(refusal(bytes("8002294b01612e")).find("APPEND onto a tuple") != std::string::npos);
  CHECK(refusal(bytes("8002652e")).find("no MARK") != std::string::npos);
  // Single-byte changes anywhere: read, or refused with an InputError (the ASan preset checks
  // that no byte of it is read out of bounds).
  std::mt19937 rng(41);
  for (int i = 0; i < 20000; ++i) {
    std::string pickle = kProtocol[static_cast<std::size_t>(i) % std::size(kProtocol)];
    pickle[rng() % pickle.size()] = static_cast<char>(rng() % 256);
    try {
      read_pickle(pickle, "x.pickle");
    } catch (const memplan::sim::InputError&) {
    }
  }
}
