"""The LD_PRELOAD list of a program that pagecast starts with one of its shims."""

from __future__ import annotations

import os


def preload_list(existing: str, lib: str | os.PathLike[str], *, first: bool) -> str:
    """``existing`` (the LD_PRELOAD already set, "" for none) with ``lib`` added.

    The dynamic loader binds a symbol to the first preloaded library that defines it:
    ``first`` puts ``lib`` ahead, so its wrappers see the program's calls before any library
    the user preloads; otherwise it goes last, behind the user's own."""
    if not existing:
        return str(lib)
    return f"{lib}:{existing}" if first else f"{existing}:{lib}"
