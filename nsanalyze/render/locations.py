"""Source locations CI can place on a diff: paths relative to the working directory (the checkout).

A report holds the paths the program was built from (`/build/ci-1234/src/kernels/gemm.cu`) and the
headers it inlined (`/usr/local/cuda/.../device_atomic_functions.hpp`). For SARIF and GitHub
annotations each location is resolved once:

1. `--path-map OLD=NEW` prefixes are replaced first (the first that matches);
2. a path under the working directory becomes relative to it;
3. else the file under the working directory sharing the longest path suffix with it is taken
   (`src/kernels/gemm.cu` for the path above; at least the file name must match);
4. a CUDA or system header is attributed to the user's calling line: the line inside the kernel's own
   definition (found in the user's files) that calls into that header (`atomicAdd(` for the atomic
   functions header), else the kernel's `__global__` line; when the kernel is not found, left out.

A location that cannot be resolved keeps its (mapped) path, without the leading `/`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

SYSTEM_PREFIXES = ("/usr/", "/opt/", "/lib/", "/lib64/", "/System/", "C:/Program Files")
CUDA_INCLUDE = re.compile(r"(^|/)(cuda[^/]*|nvhpc[^/]*|cccl)(/.*)?/include/", re.IGNORECASE)
SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache", "out", "build-cache"}
MAX_FILES = 200_000
SOURCE_SUFFIXES = {".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".py", ".inl", ".ptx"}
# A CUDA header's name -> what a user's line calls into it with.
HEADER_CALLS = (("atomic", r"\batomic\w*\s*\("), ("mma", r"\b(w?mma|load_matrix_sync|store_matrix_sync)\w*"),
                ("fp16", r"__h\w+\s*\(|__half"), ("bf16", r"__\w*bf16\w*|__nv_bfloat16"),
                ("warp", r"__\w+_sync\s*\("), ("texture", r"\btex\w*\s*\("), ("cooperative_groups", r"\bcg::|this_grid"))


def is_system(path: str) -> bool:
    normalized = path.replace("\\", "/")
    return normalized.startswith(SYSTEM_PREFIXES) or bool(CUDA_INCLUDE.search(normalized))


def parse_path_map(values) -> list[tuple[str, str]]:
    from nsanalyze.errors import InputError

    pairs = []
    for item in values or ():
        old, sep, new = item.partition("=")
        if not sep or not old:
            raise InputError("--path-map", f"{item!r}: expected OLD=NEW (a build prefix and where it is here)")
        pairs.append((old, new))
    return pairs


@dataclass
class Locator:
    root: Path = field(default_factory=Path.cwd)
    path_map: list[tuple[str, str]] = field(default_factory=list)
    _by_name: dict[str, list[PurePosixPath]] | None = None
    _cache: dict[str, str | None] = field(default_factory=dict)

    def _index(self) -> dict[str, list[PurePosixPath]]:
        """Files under the root by name, walked once (version control and environment folders skipped)."""
        if self._by_name is None:
            self._by_name = {}
            seen = 0
            for folder, dirs, files in os.walk(self.root):
                dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
                for name in files:
                    if Path(name).suffix.lower() not in SOURCE_SUFFIXES:
                        continue
                    relative = PurePosixPath(Path(folder, name).relative_to(self.root).as_posix())
                    self._by_name.setdefault(name, []).append(relative)
                    seen += 1
                if seen > MAX_FILES:
                    break
        return self._by_name

    def mapped(self, path: str) -> str:
        for old, new in self.path_map:
            if path.startswith(old):
                return new + path[len(old):]
        return path

    def resolve(self, path: str) -> str | None:
        """The path relative to the root of the file it names, or None when no file here matches."""
        if path in self._cache:
            return self._cache[path]
        result = None
        mapped = self.mapped(path).replace("\\", "/")
        candidate = Path(mapped) if Path(mapped).is_absolute() else self.root / mapped
        try:
            if candidate.is_file():
                result = candidate.resolve().relative_to(self.root.resolve()).as_posix()
        except (ValueError, OSError):
            result = None
        if result is None:
            parts = PurePosixPath(mapped).parts
            best, best_length = None, 0
            for option in self._index().get(parts[-1] if parts else "", []):
                length = 0
                for a, b in zip(reversed(option.parts), reversed(parts)):
                    if a != b:
                        break
                    length += 1
                if length > best_length or (length == best_length and best is not None and len(option.parts) <
                                            len(best.parts)):
                    best, best_length = option, length
            result = best.as_posix() if best is not None else None
        self._cache[path] = result
        return result

    def display(self, path: str) -> str:
        resolved = self.resolve(path)
        return resolved if resolved is not None else self.mapped(path).lstrip("/")

    def caller(self, kernel_name: str | None, header: str, user_files: list[str]) -> tuple[str, int] | None:
        """The user's line that calls into a CUDA/system header from this kernel: (relative path, line)."""
        if not kernel_name:
            return None
        pattern = next((re.compile(call) for key, call in HEADER_CALLS if key in Path(header).name.lower()), None)
        definition = re.compile(rf"__global__[^;{{]*\b{re.escape(kernel_name)}\s*\(")
        for relative in user_files:
            try:
                lines = (self.root / relative).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for number, line in enumerate(lines, start=1):
                if not definition.search(line):
                    continue
                end = next((i for i in range(number, len(lines)) if "__global__" in lines[i]), len(lines))
                if pattern is not None:
                    for inner in range(number - 1, end):
                        if pattern.search(lines[inner]):
                            return relative, inner + 1
                return relative, number
        return None


def placed_locations(model: dict, locator: Locator):
    """(finding, path, line, note) for every source location CI can place, headers attributed to the
    user's calling line (note says so) and duplicates of one finding folded."""
    user_files = []
    for finding in model["findings"]:
        for spot in finding.get("source") or []:
            file = spot.get("file")
            if file and not is_system(locator.mapped(file)):
                resolved = locator.resolve(file)
                if resolved and resolved not in user_files:
                    user_files.append(resolved)
    for finding in model["findings"]:
        seen = set()
        for spot in finding.get("source") or []:
            file, line = spot.get("file"), spot.get("line")
            if not file or not line:
                continue
            note = None
            if is_system(locator.mapped(file)):
                called = locator.caller(finding.get("kernel_name"), file, user_files)
                if called is None:
                    continue
                path, line = called
                note = f"in {PurePosixPath(file).name}:{int(spot['line'])}, called from this line"
            else:
                path = locator.display(file)
            if (path, int(line)) in seen:
                continue
            seen.add((path, int(line)))
            yield finding, path, int(line), note
