#pragma once
// printable: user-supplied text made fit for a one-line message. A name in a trace or a value on
// the command line can hold anything: a newline would split the one line an error is, an ESC
// would drive the terminal (recolour it, move the cursor, spoof a line), and a 5,000-digit number
// would be echoed whole. Every message that quotes what a user gave goes through here: InputError
// (core/input_error.hpp), the CLI's error line (cli/main.cpp), a run's why-not (io's why_not_text).
#include <cstddef>
#include <string>
#include <string_view>

namespace memplan::sim {

/// A run of more characters than this without a space is shortened.
inline constexpr std::size_t kMaxPrintableRun = 200;

/// `text` with control characters escaped (\n, \r, \t, \x1b, ...; the C1 controls of UTF-8 as
/// \u0085, ...) and every run of over kMaxPrintableRun characters without a space cut to its
/// first 60 and last 20 around "...[N characters]...". Escaping twice changes nothing more.
std::string printable(std::string_view text);

}  // namespace memplan::sim
