"""Up-front checks of every numeric and path option, before a command does any work.

A command that records eight runs before it finds its ``--epochs`` negative has wasted
minutes and may have left files behind; so every ``int``/``float`` option of the chosen
command is checked once, right after parsing: finite, not negative (unless the option
takes negative values), at least 1 where zero means nothing, at most 1 for fractions.
Paths too: an output file's directory must exist and take new files (nothing is
created on the way), an output directory's parent must exist, an input file must be a
readable regular file. A problem is the command's usual one-line error (exit status 2). argparse's own errors
are one line too (no usage block), and a negative value with a unit (``-5%``, ``-1M``)
reaches the option's own check instead of being taken for an unknown flag.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Any, NoReturn

from pagecast.errors import PagecastError, one_line

# options that take negative values: a nice value
_MAY_BE_NEGATIVE = {"nice"}
# options where 0 means nothing (a count, a size, a rate, a period)
_AT_LEAST_ONE = {
    "size_mib", "runs", "tokens", "epochs", "lookahead", "ring_pages", "time_bins", "page_bins",
    "k", "j", "seq_len", "horizon", "vocab", "embed", "hidden", "layers", "heads", "batch", "windows_per_epoch",
    "page_table", "top_k", "threads", "depth", "chunk_kib", "rounds", "poll_ms", "chunks", "window",
    "timesteps", "n_envs", "every", "file_mib", "fill_pages", "pages", "accesses", "phase_accesses", "min_runs",
    "tick_freq", "uvm_perf_fault_batch_count",
}  # fmt: skip
_POSITIVE_FLOATS = {"lr", "bandwidth", "uvm_pcie_gbps", "slow_ns", "fast_ns", "seconds", "sample_period", "cpu_ghz"}
_FRACTIONS = {"val_fraction", "test_fraction", "fraction", "hot_fraction", "hot_share", "overlap", "capacity"}
_NEGATIVE_WITH_UNIT = re.compile(r"-[0-9.].*")  # -5%, -1M, -5%,10%: a value, not a flag


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, as every other error of pagecast."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {one_line(message)} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def join_negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--capacity -5%`` as ``--capacity=-5%`` (argparse would take ``-5%`` for a flag),
    for the command's own options only: never in the program's arguments (after ``--``,
    or from the program's name on for commands that run one)."""
    p, i, out = parser, 0, []
    while i < len(argv):  # the command's words: `pager run` is two
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or argv[i] not in subs[0].choices:
            break
        p = subs[0].choices[argv[i]]
        out.append(argv[i])
        i += 1
    takes_value = {o for a in p._actions if a.nargs is None for o in a.option_strings}
    runs_a_program = any(a.nargs == argparse.REMAINDER for a in p._actions)
    while i < len(argv):
        tok = argv[i]
        if tok == "--" or (runs_a_program and not tok.startswith("-")):
            break
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok in takes_value and nxt is not None:
            out.append(f"{tok}={nxt}" if _NEGATIVE_WITH_UNIT.fullmatch(nxt) else tok)
            if not _NEGATIVE_WITH_UNIT.fullmatch(nxt):
                out.append(nxt)
            i += 2
            continue
        out.append(tok)
        i += 1
    return out + argv[i:]


def _chosen_parsers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    chain = [parser]
    p = parser
    while True:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return chain
        name = getattr(args, subs[0].dest, None) if subs[0].dest != argparse.SUPPRESS else None
        nxt = subs[0].choices.get(name) if name else None
        if nxt is None:
            return chain
        chain.append(nxt)
        p = nxt


def _problem(dest: str, value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if value < 0 and dest not in _MAY_BE_NEGATIVE:
        return "must not be negative"
    if isinstance(value, int) and dest in _AT_LEAST_ONE and value < 1:
        return "must be at least 1"
    if isinstance(value, float) and dest in _POSITIVE_FLOATS and value <= 0:
        return "must be greater than 0"
    if isinstance(value, float) and dest in _FRACTIONS and value > 1:
        return "must be a fraction between 0 and 1"
    return None


def _check_capacity(value: Any) -> None:
    from pagecast.sim.config import check_capacity_text

    for v in value if isinstance(value, list) else [value]:
        check_capacity_text(v)


# path options by command ("*": every command) and destination
_OUTPUT_FILES = {
    ("*", "output"), ("*", "csv"), ("*", "plot"), ("pager run", "trace"), ("pager table", "out"),
    ("pager pack", "out"), ("run", "plan_status"),
}  # fmt: skip
_OUTPUT_DIRS = {("demo", "out"), ("bench", "out"), ("run", "out_dir"), ("cuda run", "out_dir"), ("gym train", "out")}
_INPUT_FILES = {
    ("demo", "weights"), ("bench", "weights"), ("demo", "model"), ("bench", "model"), ("run", "model"),
    ("eval", "model"), ("cuda run", "model"), ("*", "schedule"), ("import", "trace"), ("import", "loads"),
    ("import", "stats"), ("train", "val_trace"), ("plan", "show"), ("run", "pack"), ("pager run", "pack"),
    ("pager table", "trace"), ("pager table", "file"), ("pager pack", "file"), ("cuda run", "trace"),
    ("gym train", "eval"),
}  # fmt: skip


def _check_output_dir(path: str) -> None:
    from pathlib import Path

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PagecastError("not a directory (an output directory was asked for)", path=p)
    if not p.parent.is_dir():
        raise PagecastError(f"cannot write: directory {p.parent} does not exist", path=p)


def _check_paths(command: str, dest: str, value: Any) -> None:
    from pagecast.errors import check_output, check_readable

    def has(table: set[tuple[str, str]]) -> bool:
        return (command, dest) in table or ("*", dest) in table

    for v in value if isinstance(value, list) else [value]:
        if not isinstance(v, str) or not v:
            continue
        if has(_OUTPUT_FILES):
            check_output(v)
        elif (command, dest) in _OUTPUT_DIRS:
            _check_output_dir(v)
        elif has(_INPUT_FILES):
            check_readable(v)


# text options whose spelling can be checked before any input is read
_TEXT_CHECKS = {"capacity": _check_capacity, "capacities": _check_capacity}


def check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Raise a one-line PagecastError for the first numeric option out of its range."""
    chain = _chosen_parsers(parser, args)
    command = " ".join(chain[-1].prog.split()[1:])  # "pagecast pager run" -> "pager run"
    for p in chain:
        for a in p._actions:
            if a.option_strings and a.type not in (int, float) and p is chain[-1]:
                value = getattr(args, a.dest, None)
                if value is not None and value is not a.default:
                    _check_paths(command, a.dest, value)
            if a.option_strings and a.dest in _TEXT_CHECKS and a.type not in (int, float):
                value = getattr(args, a.dest, None)
                if value is not None and value is not a.default:
                    _TEXT_CHECKS[a.dest](value)
            if not a.option_strings or a.type not in (int, float):
                continue
            value = getattr(args, a.dest, None)
            for v in value if isinstance(value, list) else [value]:
                if v is None or v is a.default:
                    continue
                why = _problem(a.dest, v)
                if why:
                    raise PagecastError(f"{a.option_strings[-1]} {v}: {why}")
