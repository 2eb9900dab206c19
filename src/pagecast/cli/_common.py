"""Helpers shared by CLI commands: JSON output, tables, progress bars."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from pagecast.util.output import fmt, format_table, print_json, progress

__all__ = [
    "add_cold_option",
    "add_json_flag",
    "apply_cold",
    "fmt",
    "format_table",
    "print_json",
    "progress",
    "warn_missing_reads",
]  # the commands import these from here


C = TypeVar("C")


def config_from_args(cls: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """``cls`` (a dataclass) from the options of the same names, then ``overrides``; a field
    without an option keeps its default."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}  # type: ignore[arg-type]
    return cls(**(given | overrides))


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def warn_missing_reads(command: str, traces: list[str] | str) -> None:
    """One warning line per recording that lacks read-family data (``pagecast.trace.sources``).
    An unreadable trace is left to the command's own error."""
    import sys

    from pagecast.trace import open_trace
    from pagecast.trace.sources import missing_reads

    for t in [traces] if isinstance(traces, str) else traces:
        try:
            why = missing_reads(open_trace(t).meta)
        except Exception:
            continue
        if why:
            print(f"pagecast {command}: warning: {t}: {why}", file=sys.stderr)


def add_cold_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cold",
        metavar="FILE",
        action="append",
        default=[],
        help="drop FILE's pages from the page cache before the program starts (repeatable): a cold start, and "
        "with --memory the data under the limit (a page cached before the run stays charged to the cgroup that "
        "read it, outside the limit, and the program reads it as if it had none)",
    )


def apply_cold(command: str, paths: list[str]) -> None:
    """``--cold``: the files made cold; one warning line for each file that stays cached. A
    path that is not a regular file is a one-line error."""
    import sys

    from pagecast.util.cached_outside import cold_files

    for line in cold_files(paths) if paths else []:
        print(f"pagecast {command}: warning: {line}", file=sys.stderr)
