"""Helpers shared by CLI commands: JSON output, tables, progress bars."""

from __future__ import annotations

import argparse

from pagecast.util.output import fmt, format_table, print_json, progress  # noqa: F401  (re-exported for the commands)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
