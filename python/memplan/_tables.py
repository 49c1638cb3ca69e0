"""Turning the libraries' JSON and CSV into pandas DataFrames (pandas is imported on first use)."""
import io


def frame(rows, columns=None):
    """A DataFrame of `rows` (dicts); nested dicts become `outer.inner` columns; `columns` names
    the columns of an empty one."""
    import pandas as pd

    rows = list(rows)
    return pd.json_normalize(rows) if rows else pd.DataFrame(columns=columns or [])


def read_csv(text, **kwargs):
    """A DataFrame of CSV `text`."""
    import pandas as pd

    return pd.read_csv(io.StringIO(text), **kwargs)


class JsonFields:
    """A result whose JSON object (the attribute `_fields` names, `data` unless a class says
    otherwise) also gives its keys as attributes."""

    _fields = "data"

    def __getattr__(self, key):
        try:
            return self.__dict__[self._fields][key]
        except KeyError:
            raise AttributeError(key) from None
