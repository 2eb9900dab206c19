"""The fast path of ``pagecast run --plan``: from the command line to the launcher's exec.

The ``pagecast`` command (``bin/pagecast``) calls ``exec_if_planned(sys.argv[1:])`` before
even ``pagecast.cli`` is imported (``python -m pagecast``: ``pagecast.cli.main``, before
argparse or any subcommand): a ``run --plan`` command line in its simple form
(``run --plan FILE [--json] [--plan-status FILE] -- PROG ARGS``) is handed to the native
launcher with ``os.execv``, so the interpreter's start-up is the only Python cost in front
of the program. Any other form (``--help``, other options, a missing program) returns and
goes through the full parser, which handles it or prints a proper error.

A regular install's ``pagecast`` is the native front (``pagecast.launch.front``), which
takes this path itself without Python once a pointer names the launcher; when it has none
it sets ``PAGECAST_FRONT_ID`` and this module writes the pointer for the next run.
"""

import os
import sys

HANDOVER_ENV = "PAGECAST_PLAN_HANDOVER"
FRONT_HINT_ENV = "PAGECAST_FRONT_ID"  # pagecast.launch.front.HINT_ENV, without importing it here


def planned_argv(args: list[str]) -> tuple[str, bool, str | None, list[str]] | None:
    """(plan, json, status file, program argv) if ``args`` is a simple ``run --plan``."""
    if len(args) < 4 or args[0] != "run" or "--" not in args:
        return None
    sep = args.index("--")
    opts, prog = args[1:sep], args[sep + 1 :]
    plan = status = None
    as_json = False
    i = 0
    while i < len(opts):
        o = opts[i]
        if o == "--json":
            as_json = True
        elif o in ("--plan", "--plan-status") and i + 1 < len(opts):
            if o == "--plan":
                plan = opts[i + 1]
            else:
                status = opts[i + 1]
            i += 1
        elif o.startswith("--plan="):
            plan = o[len("--plan=") :]
        elif o.startswith("--plan-status="):
            status = o[len("--plan-status=") :]
        else:
            return None
        i += 1
    if not plan or not prog:
        return None
    return plan, as_json, status, prog


def launcher_argv(launcher: str, plan: str, as_json: bool, status: str | None, prog: list[str]) -> list[str]:
    # native/front/front.c builds the same argv (without --restore-signals: it ignores no signal)
    # and accepts exactly what planned_argv accepts: change them together
    argv = [launcher, "--restore-signals", "--python", sys.executable]  # Python ignores SIGPIPE: undo it
    if as_json:
        argv.append("--wait")
    if status:
        argv += ["--status", status]
    return argv + [plan, "--", *prog]


def exec_if_planned(args: list[str]) -> None:
    """Replace this process with the launcher for a simple ``run --plan``; else return."""
    front_id = os.environ.pop(FRONT_HINT_ENV, None)  # never passed on to the program
    if os.environ.get(HANDOVER_ENV):
        return  # the launcher handed a pack/per-fault plan back to Python
    parsed = planned_argv(args)
    if parsed is None:
        return
    from pagecast.launch.binary import launcher_path

    try:
        launcher = launcher_path()
    except Exception:  # noqa: BLE001 - no compiler etc.: the full path reports it in one line
        return
    if front_id:
        from pagecast.launch.front import write_pointer

        try:
            launcher = write_pointer(front_id) or launcher
        except Exception:  # noqa: BLE001 - the pointer only saves the next run some time
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(launcher, launcher_argv(launcher, *parsed))
