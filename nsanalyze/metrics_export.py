"""`nsanalyze metrics`: the normalized table of one profile, written as CSV, Parquet or JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from nsanalyze.errors import InputError
from nsanalyze.normalize import normalize_ncu, normalize_nsys_kernels
from nsanalyze.normalize.kernels import metrics_to_read
from nsanalyze.read import NcuReport, read_profile


def metrics_frame(path, kernel: str | None = None) -> pd.DataFrame:
    """`kernel`: -k NAME|regex:PATTERN, only those kernels' rows."""
    from nsanalyze.kernel_filter import filter_kernel_rows, filter_ncu, parse

    kernel_filter = parse(kernel)
    profile = read_profile(path, ncu_metrics=metrics_to_read())
    if isinstance(profile, NcuReport):
        table = normalize_ncu(filter_ncu(profile, kernel_filter))
    else:
        table = filter_kernel_rows(normalize_nsys_kernels(profile), kernel_filter, profile.path)
        profile.close()
    frame = table.frame.copy()
    frame.attrs["units"] = table.units
    return frame


def _csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells that a spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) get a leading `'`."""
    from nsanalyze.render.format import csv_text

    text_columns = [c for c in frame.columns if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c])]
    if not text_columns:
        return frame
    frame = frame.copy()
    for column in text_columns:
        frame[column] = frame[column].map(csv_text)
    return frame


def write_frame(frame: pd.DataFrame, target: str | None) -> None:
    if not target or target == "-":
        _csv_safe(frame).to_csv(sys.stdout, index=False)
        return
    suffix = Path(target).suffix.lower()
    writers = {".csv": lambda f, p: _csv_safe(f).to_csv(p, index=False),
               ".parquet": lambda f, p: f.to_parquet(p, index=False),
               ".json": lambda f, p: f.to_json(p, orient="records", indent=1)}
    if suffix not in writers:
        raise InputError(target, "unknown table format; use .csv, .parquet or .json")
    from nsanalyze.render import write_atomically

    write_atomically(target, lambda tmp: writers[suffix](frame, tmp))
