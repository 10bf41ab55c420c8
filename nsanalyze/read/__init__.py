"""Readers: turn files on disk into raw, unit-carrying Python data. No analysis here."""

from nsanalyze.read.files import ProfileKind, detect_kind, hold, open_local
from nsanalyze.read.ncu import NcuReport, read_ncu
from nsanalyze.read.nsys import NsysExport, read_nsys

__all__ = ["ProfileKind", "detect_kind", "open_local", "NcuReport", "read_ncu", "NsysExport", "read_nsys", "read_profile",
           "read_profiles"]


def read_profile(path, ncu_metrics=None):
    """Open any supported profile and return an NcuReport or an NsysExport. `ncu_metrics`: the raw
    ncu metric names the caller uses (None: all), or a function that gives them (asked for only when
    the profile is an ncu report: building the list parses the metric table)."""
    kind, local = open_local(path)
    if kind is ProfileKind.NCU:
        held = hold(local)   # ncu_report opens the file again later (a launch's source): evicted, it finds nothing
        report = read_ncu(local, display_path=path, metrics=ncu_metrics() if callable(ncu_metrics) else ncu_metrics)
        report.cache_hold = held
        return report
    if kind is ProfileKind.KINETO:
        from nsanalyze.read.kineto import read_kineto

        return read_kineto(local, display_path=path)
    return read_nsys(local, display_path=path)   # (SQLite keeps the file open: an evicted entry reads on)


def read_profiles(path, ncu_metrics=None, reader=None) -> list:
    """The profiles a command-line path names: a folder of PyTorch profiler traces (one per rank) is
    its traces in rank order (`distributedInfo.rank`); any other path is one profile. `reader`: the
    function that reads one (read_profile, or the caller's wrapper of it)."""
    from pathlib import Path

    reader = reader or read_profile
    if Path(path).is_dir():   # (the Kineto reader, imported for folders and traces only)
        from nsanalyze.read.kineto import trace_files

        traces = trace_files(Path(path))
    else:
        traces = None
    if not traces:
        return [reader(path, ncu_metrics=ncu_metrics)]
    exports = [reader(str(trace), ncu_metrics=ncu_metrics) for trace in traces]
    return sorted(exports, key=lambda e: (getattr(e, 'rank', 0), e.path))
