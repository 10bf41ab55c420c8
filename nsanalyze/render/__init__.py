"""Renderers: each turns the report model (a dict, the JSON contract) into one format.

`write_report(model, target)` picks the renderer from the file extension (render.formats: one registry
of format -> renderer for every kind of document) and writes through a temporary file renamed into
place, so an interrupted run never leaves half a report.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from nsanalyze.errors import InputError


def render_bytes(model: dict, fmt: str) -> bytes:
    """The report in the format `fmt` (a name of render.formats.RENDERERS["report"])."""
    from nsanalyze.render.formats import render

    return render(model, fmt)


def format_for(target: str, kind: str = "report") -> str:
    """The format name an output path asks for; an unknown extension is refused in one line."""
    from nsanalyze.render.formats import renderer_for

    return renderer_for(target, kind).name


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_report(model: dict, target: str, kind: str = "report") -> None:
    write_reports(model, [target], kind)


def write_reports(document, targets, kind: str = "report") -> None:
    """Every target rendered first, then all put in place together: an interrupt or an error leaves none.
    `kind`: what the document is (report, diff, trend, whatif: render.formats.RENDERERS)."""
    from nsanalyze.render.formats import renderer_for

    write_many([(target, renderer_for(target, kind).render(document)) for target in targets])


def _stop_if_interrupted() -> None:
    from nsanalyze.errors import INTERRUPTED

    if INTERRUPTED.is_set():   # a Ctrl-C some library swallowed: nothing is put in place
        raise KeyboardInterrupt


def check_target(target: str) -> None:
    """Refuse an output target that cannot be written, before any work: one line naming it."""
    if target == "-":
        return
    path = Path(target)
    if path.is_dir():
        raise InputError(target, "is a directory: give a file name for the report")
    folder = path.parent if str(path.parent) else Path(".")
    blocking = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(target, f"{blocking} is a file, not a folder")
    if folder.exists() and not os.access(folder, os.W_OK):
        raise InputError(target, f"cannot write in {folder} (permission denied)")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(target, "cannot write over it (read-only)")


def refuse_inputs(targets, inputs, what: str = "the inputs") -> None:
    """No command writes over what it reads: a target naming an input (the same path, a symlink or a
    hard link to it), or a file that exists inside an input folder (a folder's traces are its inputs), is
    refused before any work, one line naming it."""
    seen, resolved, folders = set(), set(), []
    for source in inputs:
        if not source or source == "-":
            continue
        try:
            info = os.stat(source)
            seen.add((info.st_dev, info.st_ino))
        except OSError:
            pass
        try:
            resolved.add(Path(source).resolve())
            if os.path.isdir(source):
                folders.append(Path(source).resolve())
        except (OSError, RuntimeError):
            pass
    for target in targets:
        if not target or target == "-":
            continue
        try:
            info = os.stat(target)
            same = (info.st_dev, info.st_ino) in seen
        except OSError:
            same = False
        try:
            where = Path(target).resolve()
        except (OSError, RuntimeError):
            where = None
        if same or (where is not None and where in resolved):
            raise InputError(target, f"is one of {what}: refusing to write over it")
        inside = next((f for f in folders if where.is_relative_to(f)), None) \
            if where is not None and folders and os.path.lexists(target) else None
        if inside is not None:
            raise InputError(target, f"is in {inside}, a folder of {what}: refusing to write over it")


def write_bytes(data: bytes, target: str) -> None:
    """Writes to stdout (`-`) or to a file, atomically."""
    write_many([(target, data)])


def write_many(outputs) -> None:
    """(target, bytes) pairs: the files written to temporary files first, then renamed into place one
    after the other once all are written (a full disk or Ctrl-C on the third leaves none of them), then
    stdout (`-`)."""
    staged: list[tuple[str, str]] = []
    try:
        for target, data in outputs:
            if target != "-":
                staged.append((target, _stage(target, lambda tmp, data=data: Path(tmp).write_bytes(data))))
        _stop_if_interrupted()
        for target, tmp in staged:
            _put_in_place(target, tmp)
    finally:
        for _, tmp in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
    for target, data in outputs:
        if target == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()


def write_atomically(target: str, write) -> None:
    """`write(temporary path)`, then renamed into place: never half a file, nothing left behind on any
    exit path. A new file gets the usual mode (0666 less the umask); a file written over keeps its own."""
    tmp = _stage(target, write)
    try:
        _stop_if_interrupted()
        _put_in_place(target, tmp)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _through_links(target: str) -> str:
    """The file a target names: a symlink's destination (`-o latest.md`, a link to this week's report, is written
    through, as the shell's `>` does; renaming over the link replaced it with a file and left its destination stale)."""
    return os.path.realpath(target) if os.path.islink(target) else target


def _stage(target: str, write) -> str:
    """`write(temporary path)` beside the target; the temporary file's path (removed on any error)."""
    path = Path(_through_links(target))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial" + path.suffix)
    except OSError as exc:
        raise InputError(target, f"cannot write the report ({exc.strerror})") from None
    os.close(fd)
    try:
        write(tmp)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # disk full, the target became a directory, ...
            raise InputError(target, f"cannot write the report ({exc.strerror or exc})") from None
        raise
    return tmp


def _put_in_place(target: str, tmp: str) -> None:
    try:
        os.replace(tmp, _through_links(target))
    except OSError as exc:
        raise InputError(target, f"cannot write the report ({exc.strerror or exc})") from None
