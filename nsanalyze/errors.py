"""The one error type users see: a file that cannot be read, and why."""


import threading

# Set by the CLI's SIGINT handler: a Ctrl-C that a library swallowed (a C callback, a broad except) still
# stops the run before any report is put in place (render.write_many) and makes the exit status 130.
INTERRUPTED = threading.Event()


class InputError(Exception):
    """An input nsanalyze cannot use. The CLI prints `path: reason` and exits with status 2."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):   # raised in a worker process, re-raised in the CLI's (analyze.analyze_each)
        return (type(self), (self.path, self.reason))
