"""``pagecast launcher-path``: where the native launcher of ``run --plan`` is (built if needed)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launcher-path",
        help="print the path of the native launcher behind `run --plan`, for scripts that start it directly",
        description=(
            "Print the path of the native launcher (built on first use) that `pagecast run --plan` execs. A script "
            "that starts many planned runs can call it directly and skip the Python interpreter's start-up: "
            '`L=$(pagecast launcher-path); "$L" PLAN -- PROG ARGS` runs PROG with the plan exactly as '
            "`pagecast run --plan PLAN -- PROG ARGS` does (add `--wait` for the JSON report of `run --plan --json`, "
            "`--status FILE` for --plan-status, `--python PY` so plans with pack or per-fault files can hand them to "
            "pagecast's live machinery). Its advice shim lives next to it (LAUNCHER-advice.so)."
        ),
    )
    p.add_argument("--json", action="store_true", help="print {launcher, advice_shim} as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagecast.cli._common import print_json
    from pagecast.launch.binary import SHIM_SUFFIX, launcher_path

    path = launcher_path()
    if args.json:
        print_json({"launcher": path, "advice_shim": path + SHIM_SUFFIX})
    else:
        print(path)
    return 0
