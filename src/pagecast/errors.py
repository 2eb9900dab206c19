"""One exception type for every user-facing failure.

The CLI prints a PagecastError as a single line and exits with status 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import os


class PagecastError(Exception):
    """A problem with the user's input or environment, reported as one line."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
