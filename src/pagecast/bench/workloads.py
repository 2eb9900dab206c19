"""Build the project's real test programs (``workloads/*.c``) on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pagecast.util.native import build, native_dir


def workloads_dir() -> Path:
    return native_dir().parent / "workloads"


def build_workload(name: str, ldflags: Sequence[str] = ("-pthread",)) -> Path:
    """Compile ``workloads/<name>.c`` into an executable and return its path."""
    return build(f"wl-{name}", [workloads_dir() / f"{name}.c"], shared=False, ldflags=ldflags)


def sqlite_table(path: Path, rows: int) -> Path:
    """A generated SQLite table at ``path`` (made once, written under another name and renamed):
    rowid, a key scattered over the rows by a permutation, a 300-byte blob, and an index on the
    key; ``meta`` holds the row count. The real-program benchmarks read it."""
    import os
    import sqlite3

    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    prime = 1_000_003  # coprime with rows: (x * prime) % rows is a permutation
    con.executescript(f"""
        PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
        CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v BLOB NOT NULL);
        WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < {rows - 1})
          INSERT INTO t SELECT x, (x * {prime}) % {rows}, randomblob(300) FROM c;
        CREATE INDEX t_k ON t(k);
        CREATE TABLE meta(name TEXT PRIMARY KEY, value INTEGER);
        INSERT INTO meta VALUES ('rows', {rows});
    """)
    con.commit()
    con.close()
    tmp.replace(path)
    return path
