#pragma once
// Output files of every command (-o, --timeline, --memory-csv, --plan-out) and of the Python
// package (memplan.torch's capture -o, a Capture's save): one way to check them before the work
// and one way to write them after it. "-" means standard output; anything
// else goes through write_file_atomically (a temporary file renamed into place, symlinks
// written through, FIFOs and devices written directly). A command writes its files only when it
// succeeds, so a run that exits 1 or 2 leaves none.
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memplan::sim {

/// Refuses, before any work, an output path that cannot be written: a directory, one whose
/// folder does not exist or is not writable. Empty means "not asked for". Throws InputError
/// naming `flag`.
void check_output(const std::string& path, std::string_view flag);

/// An output of a command: its path ("" when not asked for, "-" standard output) and its flag.
struct OutputFile {
  std::string_view path;
  std::string_view flag;
};
/// A file a command reads, and what names it ("TRACE", "--plan").
struct InputFile {
  std::string_view path;
  std::string_view name;
};

/// check_output of every output of one run, then refuses, before any work, two outputs that are
/// one file (the second would replace the first) and an output that is one of `inputs` (it would
/// replace what the run read), comparing what the paths name on disk: an existing file by device
/// and inode (through symlinks, "./" and hard links), a new one by the absolute path a write
/// creates. FIFOs and devices (/dev/null) may be shared. Throws InputError naming the flag.
void check_outputs(const std::vector<OutputFile>& outputs,
                   const std::vector<InputFile>& inputs = {});

/// Writes `text` to `path` ("-": standard output). Throws InputError when it cannot.
void write_output(const std::string& path, std::string_view text);

/// Writes several outputs of one run (path, text; empty paths skipped): standard output, FIFOs
/// and devices first, since only those can still refuse (a FIFO nobody reads) once check_output
/// passed, then the regular files. So a refused output leaves no regular file written.
void write_outputs(std::initializer_list<std::pair<std::string_view, std::string_view>> outputs);

/// Where a command prints its human-readable report: standard error when one of `outputs` is
/// standard output ("-"), so that the file written there is not mixed with it; standard output
/// otherwise. Throws InputError when more than one output is "-".
std::FILE* report_stream(std::initializer_list<std::string_view> outputs);

}  // namespace memplan::sim
