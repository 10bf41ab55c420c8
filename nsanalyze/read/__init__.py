"""Readers: turn files on disk into raw, unit-carrying Python data. No analysis here."""

from nsanalyze.read.files import ProfileKind, detect_kind, open_local
from nsanalyze.read.ncu import NcuReport, read_ncu
from nsanalyze.read.nsys import NsysExport, read_nsys

__all__ = ["ProfileKind", "detect_kind", "open_local", "NcuReport", "read_ncu", "NsysExport", "read_nsys", "read_profile"]


def read_profile(path, ncu_metrics=None):
    """Open any supported profile and return an NcuReport or an NsysExport. `ncu_metrics`: the raw
    ncu metric names the caller uses (None: all)."""
    kind, local = open_local(path)
    if kind is ProfileKind.NCU:
        return read_ncu(local, display_path=path, metrics=ncu_metrics)
    if kind is ProfileKind.KINETO:
        from nsanalyze.read.kineto import read_kineto

        return read_kineto(local, display_path=path)
    return read_nsys(local, display_path=path)
