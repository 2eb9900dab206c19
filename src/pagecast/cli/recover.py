"""``pagecast recover``: turn the journal of an interrupted recording into a trace."""

from __future__ import annotations

import argparse

from pagecast.cli._common import add_json_flag, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recover", help="rebuild a trace from the journal (.partial) of a recording that was cut short",
        description="A recorder that dies (crash, kill -9, power loss) leaves T.parquet.partial, an Arrow IPC "
                    "journal flushed at every row group. This converts every complete row group into T.parquet.",
    )
    p.add_argument("journal", help="the .partial journal file")
    p.add_argument("-o", "--output", help="trace to write (default: the journal name without .partial)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.trace import open_trace, recover_partial

    out = recover_partial(args.journal, args.output)
    t = open_trace(out)
    info = {"trace": str(out), "rows": t.num_rows, "regions": len(t.regions),
            "truncated": bool(t.meta.get("recovered_truncated", False))}
    if args.json:
        print_json(info)
    else:
        print(f"recovered {info['rows']:,} rows, {info['regions']} regions into {out}"
              + (" (last row group was torn and dropped)" if info["truncated"] else ""))
    return 0
