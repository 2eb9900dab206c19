"""``pagecast recover``: turn the journal of an interrupted recording into a trace."""

from __future__ import annotations

import argparse

from pagecast.cli._common import add_json_flag, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recover",
        help="rebuild a trace from the journal (.partial) of a recording that was cut short",
        description="A recorder that dies (crash, kill -9, power loss) leaves T.parquet.partial, an Arrow IPC "
        "journal flushed at every row group, and T.parquet.partial.regions. This converts every "
        "complete, intact row group into T.parquet and says what it kept. Anything that is not a "
        "journal (a finished trace, a CSV, an empty file) is refused, and the journal is never "
        "written over.",
    )
    p.add_argument("journal", help="the .partial journal file")
    p.add_argument("-o", "--output", help="trace to write (default: the journal name without .partial)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.trace import recover_partial

    rec = recover_partial(args.journal, args.output)
    if args.json:
        print_json(rec.to_dict())
        return 0
    print(f"recovered {rec.rows:,} rows ({rec.batches} row groups), {rec.regions} regions into {rec.trace}")
    if rec.stopped:
        print(f"pagecast recover: warning: stopped early, {rec.stopped}; later rows are lost")
    if not rec.regions_journal:
        print(f"pagecast recover: warning: {rec.journal}.regions is missing: the trace has no region list")
    return 0
