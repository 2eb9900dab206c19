"""Option groups shared by commands: ``--policy`` (a registered prefetcher spec) and the
deprecated spellings older scripts use.

``--policy NAME[:key=value,...]`` means one thing in every command: a prefetcher of the
registry (``pagecast.policies``) with options. Commands that take several repeat the flag
(``--policy none --policy stride:degree=8``); a comma-separated list in one value works
too, because a piece that is not ``key=value`` starts the next spec
(``policies/spec.py``), as long as no option value contains a comma.

The flag stores the text the user gave; ``policy_text``/``policy_texts`` check it against
the registry when the command runs, so a bad name is the command's one-line error (exit 2)
and building the parser does not import the policies (``pagecast run`` starts programs
and must stay quick).
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

_METAVAR = "NAME[:k=v,...]"


def add_deprecated_alias(
    parser: argparse.ArgumentParser | Any, old: str, new: str, dest: str, *, append: bool = False, **kw: Any
) -> None:
    """``old`` stays accepted, hidden from --help, as a spelling of ``new`` (documented as
    deprecated). It prints nothing: scripts that read stderr (one line per error) keep
    working unchanged."""
    parser.add_argument(old, dest=dest, action="append" if append else "store", help=argparse.SUPPRESS, **kw)


def policy_help(text: str, *, list_defaults: bool = True) -> str:
    """``text`` followed by every registered policy with its options and defaults.

    ``list_defaults=False`` skips the list: it imports every policy module (numba, about
    0.3 s), which a command that starts a program should not pay to build its parser.
    """
    if not list_defaults:
        return text + " (`pagecast simulate --help` lists every policy's options and defaults)"
    from pagecast.policies.spec import policy_defaults_help

    return f"{text}. Policies and their options (defaults): {policy_defaults_help()}".replace("%", "%%")


def add_policy_option(
    parser: argparse.ArgumentParser | Any,
    *,
    repeated: bool = False,
    default: str | None = None,
    help: str = "",
    deprecated: Sequence[str] = (),
    list_defaults: bool = True,
) -> None:
    """``--policy NAME[:k=v,...]`` into ``args.policy`` (a list of texts when ``repeated``).

    ``parser`` may be a group (a mutually exclusive one included). ``deprecated`` are old
    spellings kept as hidden aliases: for a repeated option each use appends (an old
    comma list still works), for a single one the last use wins.
    """
    if repeated:
        text = (
            help
            or "a prefetcher spec; repeat the flag for several (a comma-separated list works too when no option value contains a comma)"
        )
        if default:
            text += f" (default {default})"
        parser.add_argument(
            "--policy",
            action="append",
            default=None,
            metavar=_METAVAR,
            help=policy_help(text, list_defaults=list_defaults),
        )
    else:
        text = help or "a prefetcher spec, e.g. stride:degree=8"
        if default:
            text += f" (default {default})"
        parser.add_argument(
            "--policy", default=None, metavar=_METAVAR, help=policy_help(text, list_defaults=list_defaults)
        )
    for old in deprecated:
        add_deprecated_alias(parser, old, "--policy", "policy", append=repeated, metavar=_METAVAR)


def policy_texts(
    args: argparse.Namespace, default: str | None = None, *, dest: str = "policy", check: bool = True
) -> list[str]:
    """The specs of a repeated ``--policy`` (or ``default`` when none was given), each
    checked against the registry (unless ``check`` is false: the UVM model has its own
    names): a bad one is a one-line PagecastError."""
    from pagecast.policies.spec import parse_policy_spec, split_policy_list

    given = getattr(args, dest, None)
    texts = split_policy_list(given if given else (default or ""))
    for t in texts if check else ():
        parse_policy_spec(t)
    return texts


def policy_text(args: argparse.Namespace, *, dest: str = "policy") -> str | None:
    """The spec of a single ``--policy`` (None when not given), checked against the registry."""
    from pagecast.policies.spec import parse_policy_spec

    text = getattr(args, dest, None)
    if text is None:
        return None
    parse_policy_spec(text)
    return text.strip()


def add_eviction_option(parser: argparse.ArgumentParser | Any, *, default: str = "lru") -> None:
    """``--eviction NAME[:k=v,...]``: an eviction policy of the registry, the same grammar
    as ``--policy`` (``policies/spec.py``), checked when the command runs."""
    parser.add_argument(
        "--eviction",
        default=default,
        metavar=_METAVAR,
        help=(
            "eviction policy: lru, fifo, clock, min (Belady), lfu, reuse:trace=RUN.parquet, "
            "learned:model=EV.pt (pagecast train --target eviction) (default %(default)s)"
        ),
    )


def eviction_text(text: str) -> str:
    """The eviction spec, checked against the registry (a one-line error if it is not one)."""
    from pagecast.policies.spec import parse_eviction_spec

    return str(parse_eviction_spec(text))


def eviction_texts(texts: str | Sequence[str]) -> list[str]:
    """Eviction specs from a repeated flag or comma-separated lists, each checked."""
    from pagecast.policies.spec import split_policy_list

    return [eviction_text(t) for t in split_policy_list(texts)]
