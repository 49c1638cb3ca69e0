"""Input limits and output files, as the `memplan` command has them.

Inputs are read as streams within limits (io/input_stream.hpp): set_input_limits raises or lowers
them for this process, as `memplan --max-input-size --max-input-values` does for one command.

Output files, as the `memplan` command writes them (io/output_file.hpp, one writer for the C++
commands and this package): "-" is standard output; a file is written through a temporary file
beside it and a rename (nothing half-written on failure, the umask's mode), a symlink through to
its target, a FIFO or a device (/dev/full, /dev/null) directly, so that its error is the write's.
"""
import os
import sys

from memplan import _core


def set_input_limits(size=None, values=None):
    """Sets the most one input file may hold: `size` bytes once decompressed ("8GiB" or a number
    of bytes; default 4 GiB) and `values` JSON values (default 100,000,000). None leaves a limit
    as it is. Returns the limits before, as (size in bytes, values), to restore them with."""
    return _core.set_input_limits(size, values)


def check_output(path, flag):
    """memplan.InputError naming `flag` when `path` cannot be written (a folder, a missing or
    unwritable folder): to be said before the work, not after it."""
    _core.check_output(os.fspath(path), flag)


def write_output(path, text):
    """Writes `text` to `path` ("-": standard output, after what Python buffered there);
    memplan.InputError naming the file when it cannot."""
    path = os.fspath(path)
    if path == "-":
        sys.stdout.flush()
    _core.write_output(path, text)
