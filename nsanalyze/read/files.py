"""Finding out what a file is and making it readable: .xz/.gz are unpacked to a cache.

Both `ncu_report` and SQLite need a real file path, so compressed inputs are decompressed
once into a cache keyed by the compressed file's content, and reused; expansion is limited and the
cache evicts its least recently used entries past a size limit.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path

from nsanalyze.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
XZ_MAGIC = b"\xfd7zXZ\x00"
GZ_MAGIC = b"\x1f\x8b"
NSYS_REP_MAGIC_NAMES = (".nsys-rep", ".qdrep")


class ProfileKind(enum.Enum):
    NCU = "ncu"
    NSYS = "nsys"
    KINETO = "kineto"  # a PyTorch profiler (Kineto) Chrome-trace JSON, read through the nsys pipeline


# Limits on what a compressed input may expand to: a 472 KB .xz can hold gigabytes of zeros.
MAX_EXPANSION_RATIO = float(os.environ.get("NSANALYZE_MAX_EXPANSION", "1000"))
MAX_EXPANDED_BYTES = float(os.environ.get("NSANALYZE_MAX_EXPANDED_GB", "64")) * 2**30
CACHE_LIMIT_GB = 32.0
# A write that failed with less than this left on the cache's disk failed for want of space: the cache gives up
# its older entries and writes once more.
DISK_FULL_BYTES = 64 * 2**20
# Entries used this recently stay when the disk is full: another process may hold the path it was just given.
IN_USE_SECONDS = 60


def cache_limit_bytes() -> float:
    """The cache's size limit, NSANALYZE_CACHE_MAX_GB (read at each use, so a test session or a batch can set it)."""
    return float(os.environ.get("NSANALYZE_CACHE_MAX_GB") or CACHE_LIMIT_GB) * 2**30


def cache_dir() -> Path:
    """The cache folder: NSANALYZE_CACHE, else nsanalyze/ in XDG_CACHE_HOME or ~/.cache (errors name the one used)."""
    source = "NSANALYZE_CACHE" if os.environ.get("NSANALYZE_CACHE") else \
        "XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "~/.cache"
    root = os.environ.get("NSANALYZE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nsanalyze"
    )
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(path, f"the cache ({source}) is not a folder") from None
    except OSError as exc:
        raise InputError(path, f"cannot use the cache folder ({exc.strerror})") from None
    return path


def content_key(path: Path) -> str:
    """The cache key: the compressed file's content, so a file replaced in place is never mistaken
    for the one before it (same size and mtime or not)."""
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:24]


def _remove_orphans(folder: Path, stopped=()) -> None:
    """Partial copies whose process is gone (killed with SIGKILL, nothing could clean up), or is one of the
    `stopped` process ids (being killed: it will write no more), are removed."""
    for entry in folder.glob(".partial-*"):
        pid = entry.name.split("-")[1]
        if pid.isdigit() and (int(pid) in stopped or not process_alive(int(pid))):
            entry.unlink(missing_ok=True)


def remove_orphan_copies(stopped=()) -> None:
    """The partial copies of processes that have ended, or of the `stopped` ones, removed now: a batch that stopped
    its workers calls it with their ids, for the one killed (past its SIGTERM, or with the fork server) before it
    could remove its own (a SIGTERM to `batch --jobs 2` left one behind in one of five runs of the suite on
    2026-12-03, and in a fresh clone's run on 2026-12-05 under load: a worker not yet gone when the batch looked)."""
    try:
        _remove_orphans(cache_dir(), stopped)
    except (OSError, InputError):   # no cache, or one that cannot be listed: nothing to remove
        pass


def process_alive(pid: int) -> bool:
    """A running process (a zombie, dead but not yet reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _entries(folder: Path, keep: Path) -> list[tuple[float, int, Path]]:
    """The cache's complete entries but `keep`, as (last use, size, path), least recently used first."""
    entries = []
    for entry in folder.iterdir():
        try:
            stat = entry.stat()
        except OSError:    # removed meanwhile by another process's eviction
            continue
        if entry != keep and not entry.name.startswith(".partial-") and entry.is_file():
            entries.append((stat.st_atime, stat.st_size, entry))
    return sorted(entries)


class CacheHold:
    """A shared lock (flock) on a cache entry for as long as a reader uses it: eviction passes a held entry by.
    NVIDIA's `ncu_report` keeps no file open: it opens the report again for a launch's source counters, which
    came back empty once another process had evicted the entry (the suite's run with its cache capped, 2026-12-05)."""

    def __init__(self, path: Path):
        import fcntl

        self._handle = open(path, "rb")
        fcntl.flock(self._handle, fcntl.LOCK_SH)

    def close(self) -> None:
        self._handle.close()

    def __deepcopy__(self, memo):   # a copy of the report reads the same entry: the one lock holds it
        return self

    def __reduce__(self):           # a report sent to another process holds nothing there
        return (_released, ())


def _released() -> None:
    return None


def hold(local: Path) -> CacheHold | None:
    """A hold on `local` where it is an entry of the cache (None for a file of the user's own)."""
    try:
        if local.resolve().parent != cache_dir().resolve():
            return None
        return CacheHold(local)
    except (OSError, InputError):
        return None


def _held(entry: Path) -> bool:
    """Whether a reader holds the entry (CacheHold): an exclusive lock cannot be had at once."""
    import fcntl

    try:
        with open(entry, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _evict(keep: Path) -> None:
    """Least recently used cache entries go once the cache holds more than its limit; entries a reader holds stay."""
    entries = _entries(keep.parent, keep)
    total = keep.stat().st_size + sum(size for _, size, _ in entries)
    for _, size, entry in entries:
        if total <= cache_limit_bytes():
            break
        if _held(entry):
            continue
        entry.unlink(missing_ok=True)
        total -= size


def _disk_full(folder: Path) -> bool:
    import shutil

    try:
        return shutil.disk_usage(folder).free < DISK_FULL_BYTES
    except OSError:
        return False


def _make_room(keep: Path) -> bool:
    """On a full disk, the entries not used in the last IN_USE_SECONDS go (a decompressed copy is worth less than
    the run that needs the space); whether any went."""
    import time

    stale = [entry for used, _, entry in _entries(keep.parent, keep)
             if used < time.time() - IN_USE_SECONDS and not _held(entry)]
    for entry in stale:
        entry.unlink(missing_ok=True)
    return bool(stale)


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a directory, not a profile file")
    if not path.is_file():
        raise InputError(path, "not a regular file (a FIFO, socket or device): give a saved profile")
    if not os.access(path, os.R_OK):
        raise InputError(path, "permission denied")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file")


def _head(path: Path, n: int = 16) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(n)


def cached(target: Path, write) -> Path:
    """The cache entry `target`, made by `write(partial)` when it is missing: written to a partial file
    that only a complete write renames into place, removed on every other exit (Ctrl-C and SIGTERM
    included); the least recently used entries are evicted past the cache's limit, and all but those in use
    when the disk fills during the write, which is then tried once more."""
    import tempfile

    _remove_orphans(target.parent)
    if target.exists():
        os.utime(target)  # recently used: the last to be evicted
        return target
    for attempt in (1, 2):
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".partial-{os.getpid()}-")
        except OSError as exc:   # a folder that takes no new files (/proc, a read-only mount)
            raise InputError(target.parent, f"cannot write to the cache folder ({exc.strerror}); NSANALYZE_CACHE "
                                            "names another") from None
        try:   # from the first statement after the file is made: a SIGTERM anywhere past it removes the file
            os.close(fd)
            write(Path(tmp))
            os.replace(tmp, target)
            break
        except Exception:
            if attempt == 1 and _disk_full(target.parent) and _make_room(target):
                continue
            raise
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    _evict(target)
    return target


class _Expanding:
    """A compressed file read as the bytes it holds, refused once it expands past the limits (a
    decompression bomb) and named in one line when it is truncated or corrupt."""

    def __init__(self, path: Path, opener):
        self.path, self.read_so_far = path, 0
        self.limit = min(MAX_EXPANDED_BYTES, max(path.stat().st_size, 1 << 20) * MAX_EXPANSION_RATIO)
        self._src = opener(path, "rb")

    def read(self, n: int = 1 << 20) -> bytes:
        import gzip
        import lzma
        import zlib

        try:
            chunk = self._src.read(n)
        except (lzma.LZMAError, OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            reason = str(exc) if isinstance(exc, PermissionError) else "truncated or corrupt compressed file"
            raise InputError(self.path, f"{reason} ({exc.__class__.__name__}: {exc})") from None
        self.read_so_far += len(chunk)
        if self.read_so_far > self.limit:
            raise InputError(self.path, f"expands to more than {self.limit / 2**30:.1f} GiB (over "
                                        f"{MAX_EXPANSION_RATIO:g}x its size): refused as a decompression bomb; "
                                        "NSANALYZE_MAX_EXPANSION and NSANALYZE_MAX_EXPANDED_GB raise the limits")
        return chunk

    def close(self) -> None:
        self._src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _opener(head: bytes):
    import gzip
    import lzma

    return lzma.open if head.startswith(XZ_MAGIC) else gzip.open if head.startswith(GZ_MAGIC) else None


def open_stream(path: Path):
    """The file's bytes as a binary stream: xz and gzip decompressed as they are read, within the limits."""
    opener = _opener(_head(path))
    return _Expanding(path, opener) if opener else open(path, "rb")


def _decompress(path: Path, suffix_len: int) -> Path:
    def write(partial: Path) -> None:
        try:
            with open_stream(path) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except OSError as exc:
            reason = str(exc) if isinstance(exc, PermissionError) else "truncated or corrupt compressed file"
            if exc.errno == 28:
                reason = "no space left for the decompressed copy in the cache"
            raise InputError(path, f"{reason} ({exc.__class__.__name__}: {exc})") from None

    return cached(cache_dir() / f"{content_key(path)}-{path.name[:-suffix_len]}", write)


def is_kineto_name(name: str) -> bool:
    name = name.lower()
    for suffix in (".xz", ".gz"):
        name = name.removesuffix(suffix)
    return name.endswith(".json")


def looks_like_json(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def detect_kind(path: Path, display: Path | None = None) -> ProfileKind:
    """Tells an nsys SQLite export from an ncu report by content, falling back on the name."""
    return _kind_of(_head(path), Path(display) if display is not None else path)


def _kind_of(head: bytes, path: Path) -> ProfileKind:
    if head.startswith(SQLITE_MAGIC):
        return ProfileKind.NSYS
    name = path.name.lower()
    for suffix in (".xz", ".gz"):
        name = name.removesuffix(suffix)
    if name.endswith(".ncu-rep"):
        return ProfileKind.NCU
    if name.endswith(".json") or looks_like_json(head):
        return ProfileKind.KINETO
    if name.endswith((".sqlite", ".sqlite3", ".db")):
        raise InputError(path, "not an SQLite database (wrong file signature)")
    if name.endswith(NSYS_REP_MAGIC_NAMES):
        raise InputError(
            path,
            "an Nsight Systems report must be exported first: "
            f"nsys export --type sqlite -o {Path(name).stem}.sqlite {path}",
        )
    raise InputError(path, "unknown profile type: expected .ncu-rep, an Nsight Systems .sqlite export "
                           "or a PyTorch profiler trace (.json)")


def open_local(path) -> tuple[ProfileKind, Path]:
    """Returns the kind of profile and a plain, uncompressed file path to read it from; a compressed
    PyTorch profiler trace stays as it is (the Kineto reader decompresses it as a stream)."""
    path = Path(path)
    _check_readable(path)
    head = _head(path)
    if head.startswith(XZ_MAGIC) or path.name.endswith(".xz"):
        if not head.startswith(XZ_MAGIC):
            raise InputError(path, "not an xz file (wrong signature)")
    elif head.startswith(GZ_MAGIC) or path.name.endswith(".gz"):
        if not head.startswith(GZ_MAGIC):
            raise InputError(path, "not a gzip file (wrong signature)")
    else:
        _check_readable_decompressed(path, path)
        return detect_kind(path), path
    with open_stream(path) as stream:
        inner = stream.read(16)
    if not inner:
        raise InputError(path, "empty file after decompression")
    name = path.name.lower().removesuffix(".xz").removesuffix(".gz")
    if not inner.startswith(SQLITE_MAGIC) and not name.endswith(".ncu-rep") and (
            name.endswith(".json") or looks_like_json(inner)):
        return ProfileKind.KINETO, path   # (as detect_kind tells them)
    local = _decompress(path, 3)
    _check_readable_decompressed(path, local)
    return detect_kind(local, display=path), local


def kind_of(path) -> ProfileKind:
    """The kind open_local would tell, from the first bytes alone (decompressed as a stream where the file
    is compressed): a command that takes one kind refuses another before a 500 MB report is decompressed."""
    path = Path(path)
    _check_readable(path)
    head = _head(path)
    if not (head.startswith((XZ_MAGIC, GZ_MAGIC)) or path.name.endswith((".xz", ".gz"))):
        return detect_kind(path)
    if not head.startswith((XZ_MAGIC, GZ_MAGIC)) or (path.name.endswith(".xz") and not head.startswith(XZ_MAGIC)):
        return open_local(path)[0]   # its one-line error on the wrong signature
    with open_stream(path) as stream:
        inner = stream.read(16)
    if not inner:
        raise InputError(path, "empty file after decompression")
    return _kind_of(inner, path)


def _check_readable_decompressed(original: Path, local: Path) -> None:
    if local.stat().st_size == 0:
        raise InputError(original, "empty file after decompression")
