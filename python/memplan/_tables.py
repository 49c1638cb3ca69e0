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
