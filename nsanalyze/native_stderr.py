"""File descriptor 2 kept for nsanalyze's own lines while native libraries run: NVIDIA's `ncu_report`
(the readers), Fontconfig under matplotlib and WeasyPrint (the renderers) write to it themselves. Shared
by every layer, as errors.py and numbers.py are."""


class NativeStderr:
    """NVIDIA's library logs to file descriptor 2 itself (absl: "Can't parse message of type
    NV.Profiler.Messages.FileHeader ...") on damaged reports: while it reads, fd 2 goes to a temporary
    file, so stderr keeps nsanalyze's one line; `said` is the library's last line, for that line."""

    def __enter__(self):
        import os
        import sys
        import tempfile

        self.said = ""
        try:
            sys.stderr.flush()
            self._log = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._log.fileno(), 2)
        except (OSError, ValueError, AttributeError):   # no fd 2 (a GUI, a closed stderr): nothing to keep off
            self._saved = None
        return self

    def __exit__(self, *exc):
        import os
        import sys

        if self._saved is None:
            return False
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read(1 << 16).decode("utf-8", "replace").splitlines()
                 if line.strip() and "absl::InitializeLog" not in line]
        self._log.close()
        if lines:
            self.said = lines[-1].split("] ", 1)[-1][:200]
        return False
