"""Helpers shared by CLI commands: JSON output, tables, progress bars."""

from __future__ import annotations

import argparse

from pagecast.util.output import fmt, format_table, print_json, progress

__all__ = ["add_json_flag", "fmt", "format_table", "print_json", "progress"]  # the commands import these from here


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
