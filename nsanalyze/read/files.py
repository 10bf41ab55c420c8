"""Finding out what a file is and making it readable: .xz/.gz are unpacked to a cache.

Both `ncu_report` and SQLite need a real file path, so compressed inputs are decompressed
once into a cache keyed by the compressed file's size, mtime and name, and reused.
"""

from __future__ import annotations

import enum
import gzip
import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

from nsanalyze.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
XZ_MAGIC = b"\xfd7zXZ\x00"
GZ_MAGIC = b"\x1f\x8b"
NSYS_REP_MAGIC_NAMES = (".nsys-rep", ".qdrep")


class ProfileKind(enum.Enum):
    NCU = "ncu"
    NSYS = "nsys"


def cache_dir() -> Path:
    root = os.environ.get("NSANALYZE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nsanalyze"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a directory, not a profile file")
    if not os.access(path, os.R_OK):
        raise InputError(path, "permission denied")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file")


def _head(path: Path, n: int = 16) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(n)


def _decompress(path: Path, opener, suffix_len: int) -> Path:
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache_dir() / f"{key}-{path.name[:-suffix_len]}"
    if target.exists():
        return target
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
    try:
        with opener(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        os.replace(tmp, target)
    except (lzma.LZMAError, OSError, EOFError) as exc:
        os.unlink(tmp)
        reason = "truncated or corrupt compressed file" if not isinstance(exc, PermissionError) else str(exc)
        raise InputError(path, f"{reason} ({exc.__class__.__name__}: {exc})") from None
    return target


def detect_kind(path: Path, display: Path | None = None) -> ProfileKind:
    """Tells an nsys SQLite export from an ncu report by content, falling back on the name."""
    head = _head(path)
    path = Path(display) if display is not None else path
    if head.startswith(SQLITE_MAGIC):
        return ProfileKind.NSYS
    name = path.name.lower()
    for suffix in (".xz", ".gz"):
        name = name.removesuffix(suffix)
    if name.endswith(".ncu-rep"):
        return ProfileKind.NCU
    if name.endswith((".sqlite", ".sqlite3", ".db")):
        raise InputError(path, "not an SQLite database (wrong file signature)")
    if name.endswith(NSYS_REP_MAGIC_NAMES):
        raise InputError(
            path,
            "an Nsight Systems report must be exported first: "
            f"nsys export --type sqlite -o {Path(name).stem}.sqlite {path}",
        )
    raise InputError(path, "unknown profile type: expected .ncu-rep or an Nsight Systems .sqlite export")


def open_local(path) -> tuple[ProfileKind, Path]:
    """Returns the kind of profile and a plain, uncompressed file path to read it from."""
    path = Path(path)
    _check_readable(path)
    head = _head(path)
    if head.startswith(XZ_MAGIC) or path.name.endswith(".xz"):
        if not head.startswith(XZ_MAGIC):
            raise InputError(path, "not an xz file (wrong signature)")
        local = _decompress(path, lzma.open, 3)
    elif head.startswith(GZ_MAGIC) or path.name.endswith(".gz"):
        if not head.startswith(GZ_MAGIC):
            raise InputError(path, "not a gzip file (wrong signature)")
        local = _decompress(path, gzip.open, 3)
    else:
        local = path
    _check_readable_decompressed(path, local)
    return detect_kind(local, display=path), local


def _check_readable_decompressed(original: Path, local: Path) -> None:
    if local.stat().st_size == 0:
        raise InputError(original, "empty file after decompression")
