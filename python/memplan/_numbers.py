"""Whole-number arguments of the Python API, read as the CLI reads its flags: a value int() takes,
and memplan.InputError naming the flag for one it cannot (float("inf") raised OverflowError)."""
from memplan import _core


def whole(value, flag):
    """`value` as an int; memplan.InputError naming `flag` for an infinite one."""
    try:
        return int(value)
    except OverflowError:
        raise _core.InputError(f"{flag}: {value!r} is not a whole number") from None


def whole_or_none(value, flag):
    return None if value is None else whole(value, flag)
