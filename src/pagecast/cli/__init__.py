"""The ``pagecast`` command.

Each subcommand is a module in this package with ``register(subparsers)``; the module
adds its parser and sets ``func`` to a callable taking the parsed args and returning an
exit status. Modules are discovered, so adding a command means adding one file.

Only ``sys`` is imported at module level: ``pagecast run --plan`` must reach the native
launcher with nothing but the interpreter's start-up in front of the program
(``pagecast.launch.command``), so argparse and the subcommands load after that check.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, above)
if TYPE_CHECKING:
    import argparse

# Packages of the optional extras (pyproject.toml) -> the extra that installs them: a command
# that needs one says so in one line instead of a traceback.
_EXTRA = {
    "torch": "learn",
    "onnx": "learn",
    "onnxruntime": "learn",
    "gymnasium": "gym",
    "stable_baselines3": "gym",
    "ray": "ray",
}

# Order in --help; commands not listed here follow alphabetically.
_ORDER = [
    "demo",
    "record",
    "import",
    "info",
    "heatmap",
    "simulate",
    "eval",
    "sweep",
    "train",
    "predict",
    "plan",
    "run",
    "bench",
    "pager",
    "estimate",
    "gym",
    "recover",
]


def build_parser(only: str | None = None) -> "argparse.ArgumentParser":
    """The full parser, or with ``only`` a known subcommand's alone: a command then pays
    for importing its own module, not every subcommand's (importing the simulator and numba
    is slow, and `pagecast run` would spend that time in front of the program)."""
    import importlib
    import pkgutil

    from pagecast import __version__
    from pagecast.cli._validate import OneLineParser

    parser = OneLineParser(
        prog="pagecast",
        description=(
            "Record how programs touch memory pages, learn the pattern, evaluate prefetch and "
            "placement policies, and prefetch live. Start with `pagecast demo`."
        ),
    )
    parser.add_argument("--version", action="version", version=f"pagecast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import pagecast.cli as pkg

    names = [m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    if only in names:
        names = [only]
    for name in names:
        importlib.import_module(f"pagecast.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        from pagecast.launch.command import exec_if_planned

        exec_if_planned(sys.argv[1:])  # returns unless this is a simple `run --plan`
    from pagecast.cli._validate import check_numbers, join_negative_values
    from pagecast.errors import PagecastError, from_os_error, one_line

    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(join_negative_values(parser, words))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_numbers(parser, args)
        return int(args.func(args) or 0)
    except PagecastError as e:
        print(f"pagecast {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except ModuleNotFoundError as e:
        extra = _EXTRA.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        print(
            f"pagecast {args.command}: error: needs {e.name.partition('.')[0]}, which a plain install leaves out: "
            f"pip install 'pagecast[{extra}]'",
            file=sys.stderr,
        )
        return 2
    except OSError as e:
        # The environment (permission denied, disk full, a directory given for a file),
        # not a bug: one line naming the file, like a PagecastError.
        print(f"pagecast {args.command}: error: {from_os_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pagecast {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
