"""Train/test pairs of real programs the project did not write, recorded once and cached.

Each pair is two runs of one program on different inputs: the first trains, the second
is held out. Page-fault pairs are recorded with ``pagecast record`` (perf), full access
pairs with ``pagecast record --lackey`` (valgrind; inputs kept small, ~100x slower).
Recordings are cached under ``$PAGECAST_CACHE/learned_real`` (default
``~/.cache/pagecast``) keyed by the pair's command lines, so a rerun only trains and
simulates. Used by benchmarks/learned_real.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from pagecast.util.atomic import atomic_output  # noqa: E402


def cache_root() -> Path:
    d = Path(os.environ.get("PAGECAST_CACHE", Path.home() / ".cache" / "pagecast")) / "learned_real"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class Pair:
    name: str
    kind: str  # "faults" (perf) or "lackey" (every load/store)
    train: list[str]
    test: list[str]

    def key(self) -> str:
        return hashlib.sha1(json.dumps([self.kind, self.train, self.test]).encode()).hexdigest()[:10]


def _write_text(path: Path, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text)


def _inputs(d: Path) -> dict[str, Path]:
    """Generated inputs (deterministic): number lists for sort, a sqlite db, text for gzip."""
    out = {}
    for seed in (1, 2):
        p = d / f"numbers{seed}.txt"
        if not p.exists():
            rng = random.Random(seed)
            _write_text(p, "\n".join(str(rng.randrange(10**6)) for _ in range(1500 + 500 * seed)) + "\n")
        out[f"numbers{seed}"] = p
        t = d / f"text{seed}.txt"
        if not t.exists():
            # pseudo-words from a fixed seed (not the repository's files, which change), Zipf-like use
            vocab_rng = random.Random(0)
            words = [
                "".join(vocab_rng.choice("etaoinshrdlucmfwyp") for _ in range(vocab_rng.randint(2, 9)))
                for _ in range(600)
            ]
            weights = [1.0 / (i + 1) for i in range(len(words))]
            rng = random.Random(100 + seed)
            _write_text(t, " ".join(rng.choices(words, weights, k=6000 + 3000 * seed)))
        out[f"text{seed}"] = t
    db = d / "kv.sqlite"
    if not db.exists():
        tmp = db.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-c", _SQLITE_MAKE, str(tmp)], check=True)
        tmp.rename(db)
    out["db"] = db
    return out


_SQLITE_MAKE = """
import random, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute('create table kv (k integer primary key, v text)')
rng = random.Random(0)
c.executemany('insert into kv values (?, ?)', ((i * 7919 % 1000003, 'x' * rng.randrange(20, 200)) for i in range(200000)))
c.execute('create index kv_v on kv(v)')
c.commit()
"""

_SQLITE_QUERY = """
import random, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
n = 0
for _ in range(3000):
    k = rng.randrange(1000003)
    n += len(c.execute('select v from kv where k >= ? order by k limit 3', (k,)).fetchall())
print(n)
"""


def pairs(d: Path) -> list[Pair]:
    inp = _inputs(d)
    py = sys.executable
    git = ["git", "-C", str(ROOT), "--no-pager"]
    obj = str(d / "gcc-out.o")
    return [
        Pair("git log -p", "faults", [*git, "log", "-p", "--", "src"], [*git, "log", "-p", "--", "tests", "docs"]),
        Pair(
            "gcc -O2 -c",
            "faults",
            ["gcc", "-O2", "-c", str(ROOT / "workloads/faultstorm.c"), "-o", obj],
            ["gcc", "-O2", "-c", str(ROOT / "workloads/touchpages.c"), "-o", obj],
        ),
        Pair(
            "sqlite3 lookups",
            "faults",
            [py, "-c", _SQLITE_QUERY, str(inp["db"]), "1"],
            [py, "-c", _SQLITE_QUERY, str(inp["db"]), "2"],
        ),
        Pair(
            "CPython import",
            "faults",
            [py, "-c", "import pyarrow.parquet, numpy.linalg"],
            [py, "-c", "import pyarrow.compute, pyarrow.csv, numpy.fft"],
        ),
        Pair("sort -n (lackey)", "lackey", ["sort", "-n", str(inp["numbers1"])], ["sort", "-n", str(inp["numbers2"])]),
        Pair(
            "gzip -9 (lackey)",
            "lackey",
            ["gzip", "-9", "-c", str(inp["text1"])],
            ["gzip", "-9", "-c", str(inp["text2"])],
        ),
    ]


def record(cmd: list[str], out: Path, kind: str) -> None:
    """``pagecast record`` (the CLI, as a user runs it) into ``out``; the program's output is dropped."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [sys.executable, "-m", "pagecast", "record", "--json", "-o", str(out)]
    if kind == "lackey":
        args.append("--lackey")
    r = subprocess.run(
        [*args, "--", *cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    )  # the program's own output (gzip: binary) lands on stderr
    if r.returncode != 0 or not out.exists():
        why = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"recording failed ({r.returncode}: {why}): {' '.join(cmd)[:80]}")


def recorded_pairs(only: list[str] | None = None, log=print) -> list[tuple[Pair, Path, Path]]:
    """(pair, train trace, test trace), recording what is not cached yet."""
    d = cache_root()
    out = []
    for p in pairs(d):
        if only and not any(o in p.name for o in only):
            continue
        paths = []
        try:
            for role, cmd in (("train", p.train), ("test", p.test)):
                t = d / f"{p.key()}-{role}.parquet"
                if not t.exists():
                    log(f"recording {p.name} ({role}): {' '.join(cmd)[:100]}")
                    tmp = t.with_name(t.stem + ".tmp.parquet")
                    record(cmd, tmp, p.kind)
                    tmp.rename(t)
                paths.append(t)
        except (RuntimeError, OSError) as e:  # no perf permission, no valgrind/gcc/git here
            log(f"skipped {p.name}: {e}")
            continue
        out.append((p, paths[0], paths[1]))
    return out


if __name__ == "__main__":
    for p, a, b in recorded_pairs(sys.argv[1:] or None):
        print(p.name, a, b)
