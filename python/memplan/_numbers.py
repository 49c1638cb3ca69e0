"""Number arguments of the Python API, read as the CLI reads its flags: a value int() or float()
takes, and memplan.InputError naming the flag for one it cannot hold (int(float("inf")) and
float(10**400) raised OverflowError)."""
from memplan import _core


def whole(value, flag):
    """`value` as an int; memplan.InputError naming `flag` for an infinite one."""
    try:
        return int(value)
    except OverflowError:
        raise _core.InputError(f"{flag}: {value!r} is not a whole number") from None


def whole_or_none(value, flag):
    return None if value is None else whole(value, flag)


def real(value, flag):
    """`value` as a float; memplan.InputError naming `flag` for an int too large for one."""
    try:
        return float(value)
    except OverflowError:
        raise _core.InputError(f"{flag}: {value!r} is too large") from None
