"""The one error type users see: a file that cannot be read, and why."""


class InputError(Exception):
    """An input nsanalyze cannot use. The CLI prints `path: reason` and exits with status 2."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
