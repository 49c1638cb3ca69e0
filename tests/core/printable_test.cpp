// core/printable.hpp: what a message quotes of a user's text is one line, drives no terminal and
// is never a huge echo (#40 item 9).
#include <string>

#include <catch2/catch.hpp>

#include "core/input_error.hpp"
#include "core/printable.hpp"

using memplan::sim::InputError;
using memplan::sim::printable;

TEST_CASE("printable escapes control characters and keeps the rest", "[core][printable]") {
  CHECK(printable("relu_1") == "relu_1");
  CHECK(printable("a\nb\r\tc") == "a\\nb\\r\\tc");
  CHECK(printable("\x1b[31mred\x7f") == "\\x1b[31mred\\x7f");
  CHECK(printable("\xc2\x9b"
                  "2J") == "\\u009b2J");  // a C1 CSI
  CHECK(printable("caf\xc3\xa9 \xe2\x86\x92 ok") == "caf\xc3\xa9 \xe2\x86\x92 ok");
  CHECK(printable(printable("x\n\x1b")) == printable("x\n\x1b"));  // escaping twice: the same
}

TEST_CASE("printable cuts a run of over 200 characters without a space", "[core][printable]") {
  const std::string digits(5000, '9');
  const std::string short_form = printable("'" + digits + "GiB' is too large");
  CHECK(short_form.size() < 120);
  CHECK(short_form.find("...[4925 characters]...") != std::string::npos);
  CHECK(short_form.rfind("'999", 0) == 0);
  CHECK(short_form.find("9GiB' is too large") != std::string::npos);
  const std::string path(200, 'p');  // at the limit: kept whole
  CHECK(printable(path) == path);
}

TEST_CASE("an InputError is one printable line, however its parts were", "[core][printable]") {
  const InputError e("t.json: $.ops[1]", "op 1 'relu\n\x1b[2Kmemplan: all good' is not forward");
  const std::string what = e.what();
  CHECK(what.find('\n') == std::string::npos);
  CHECK(what.find('\x1b') == std::string::npos);
  CHECK(what == "t.json: $.ops[1]: op 1 'relu\\n\\x1b[2Kmemplan: all good' is not forward");
  CHECK(e.problem() == "op 1 'relu\\n\\x1b[2Kmemplan: all good' is not forward");
}
