"""Turning the libraries' JSON and CSV into pandas DataFrames (pandas is imported on first use)."""
import io


def frame(rows, columns=None):
    """A DataFrame of `rows` (dicts); nested dicts become `outer.inner` columns."""
    import pandas as pd

    df = pd.json_normalize(list(rows)) if rows else pd.DataFrame(columns=columns or [])
    return df


def read_csv(text, **kwargs):
    """A DataFrame of CSV `text`."""
    import pandas as pd

    return pd.read_csv(io.StringIO(text), **kwargs)
