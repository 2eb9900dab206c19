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
import shutil
import subprocess
import sys
import sysconfig
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
    split: str = "dev"  # "dev": defaults were chosen on it; "heldout": reported as it falls

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


_CXX = {
    1: "#include <map>\n#include <string>\n#include <vector>\n#include <sstream>\n"
    "std::map<std::string, int> count(const std::vector<std::string>& w) {\n"
    "  std::map<std::string, int> m; for (auto& s : w) ++m[s]; return m; }\n"
    "std::string join(const std::vector<std::string>& w) { std::ostringstream o; for (auto& s : w) o << s; return o.str(); }\n",
    2: "#include <algorithm>\n#include <numeric>\n#include <unordered_map>\n#include <iostream>\n#include <memory>\n#include <vector>\n"
    "struct Node { int v; std::unique_ptr<Node> next; };\n"
    "int main() { std::unordered_map<int, double> h; for (int i = 0; i < 100; ++i) h[i] = i * 0.5;\n"
    "  std::vector<int> v(10); std::iota(v.begin(), v.end(), 0); std::sort(v.rbegin(), v.rend());\n"
    "  auto n = std::make_unique<Node>(); std::cout << h.size() + v[0] + n->v << std::endl; }\n",
}

_PERL = {
    1: "use POSIX qw(floor); use Data::Dumper; use List::Util qw(sum max); my %h; "
    "$h{$_ % 97} += floor($_ / 3) for 1..20000; print sum(values %h), Dumper([max(keys %h)]);",
    2: "use File::Basename; use Text::Wrap; use Getopt::Long; use Storable qw(dclone); "
    "my @a = map { basename(\"/x/y/f$_.txt\") } 1..5000; my $c = dclone(\\@a); print wrap('', '', @$c[0..50]);",
}

_NODE = {
    1: "const z = require('zlib'); const b = z.gzipSync(Buffer.alloc(1 << 20, 7)); console.log(b.length)",
    2: "const c = require('crypto'); const u = require('util'); "
    "console.log(c.createHash('sha256').update('x'.repeat(1 << 20)).digest('hex'), u.inspect({a: 1}))",
}

_BC = {
    1: "scale=20; s=0; for (i=1; i<40; i++) s += sqrt(i); s",
    2: "scale=16; p=1; for (i=1; i<60; i++) p = p * (1 + 1/(i*i)); p; l(p)",
}


def _heldout_inputs(d: Path) -> dict[str, Path]:
    """Sources, scripts and query files of the held-out programs (deterministic)."""
    out = {}
    for seed in (1, 2):
        for name, body in (
            (f"src{seed}.cc", _CXX[seed]),
            (f"script{seed}.pl", _PERL[seed]),
            (f"bc{seed}.bc", _BC[seed] + "\n"),
        ):
            p = d / name
            if not p.exists():
                _write_text(p, body)
            out[name] = p
        q = d / f"queries{seed}.sql"
        if not q.exists():
            rng = random.Random(200 + seed)
            lines = [
                f"select count(*), max(length(v)) from kv where k between {k} and {k + 2000 * seed};"
                for k in (rng.randrange(1000003) for _ in range(400))
            ]
            _write_text(q, "PRAGMA mmap_size=268435456;\n" + "\n".join(lines) + "\n")
        out[f"queries{seed}"] = q
        big = d / f"words{seed}.txt"
        if not big.exists():
            rng = random.Random(300 + seed)
            words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 8))) for _ in range(3000)]
            _write_text(big, "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(20000 * seed)) + "\n")
        out[f"words{seed}"] = big
        small = d / f"small{seed}.txt"
        if not small.exists():
            _write_text(small, inp_text(d, seed)[: 6000 * seed])
        out[f"small{seed}"] = small
    return out


def inp_text(d: Path, seed: int) -> str:
    return _inputs(d)[f"text{seed}"].read_text()


def heldout_pairs(d: Path) -> list[Pair]:
    """Programs none of whose runs chose a default: other compilers, interpreters, a database
    CLI, text tools, a compressor and a numeric program (each where installed)."""
    inp = _inputs(d)
    h = _heldout_inputs(d)
    std = Path(sysconfig.get_paths()["stdlib"])
    obj = str(d / "gxx-out.o")
    awk = "{for (i = 1; i <= NF; i++) c[$i]++} END {for (w in c) if (c[w] > 40) n++; print n}"
    which = {
        b: shutil.which(b) for b in ("g++", "perl", "sqlite3", "grep", "awk", "node", "objdump", "bzip2", "bc", "sed")
    }
    out = [
        Pair("g++ -O2 -c", "faults", ["g++", "-O2", "-c", str(h["src1.cc"]), "-o", obj],
             ["g++", "-O2", "-c", str(h["src2.cc"]), "-o", obj], "heldout"),
        Pair("perl modules", "faults", ["perl", str(h["script1.pl"])], ["perl", str(h["script2.pl"])], "heldout"),
        Pair("sqlite3 CLI (mmap)", "faults", ["sqlite3", str(inp["db"]), f".read {h['queries1']}"],
             ["sqlite3", str(inp["db"]), f".read {h['queries2']}"], "heldout"),
        Pair("grep -r", "faults", ["grep", "-rc", "def ", str(std / "email")],
             ["grep", "-rc", "import", str(std / "json"), str(std / "http"), str(std / "xml")], "heldout"),
        Pair("awk word count", "faults", ["awk", awk, str(h["words1"])], ["awk", awk, str(h["words2"])], "heldout"),
        Pair("node require", "faults", ["node", "-e", _NODE[1]], ["node", "-e", _NODE[2]], "heldout"),
        Pair("objdump -d", "faults", ["objdump", "-d", str(which["grep"])], ["objdump", "-d", str(which["sed"])],
             "heldout"),
        Pair("bzip2 -1 (lackey)", "lackey", ["bzip2", "-1", "-c", str(h["small1"])], ["bzip2", "-1", "-c", str(h["small2"])],
             "heldout"),
        Pair("bc -l (lackey)", "lackey", ["bc", "-lq", str(h["bc1.bc"])], ["bc", "-lq", str(h["bc2.bc"])], "heldout"),
    ]  # fmt: skip
    return [p for p in out if which.get(p.train[0]) or shutil.which(p.train[0])]


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


def recorded_pairs(only: list[str] | None = None, log=print, split: str = "dev") -> list[tuple[Pair, Path, Path]]:
    """(pair, train trace, test trace) of the ``split`` ("dev", "heldout" or "all"),
    recording what is not cached yet."""
    d = cache_root()
    out = []
    chosen = (pairs(d) if split in ("dev", "all") else []) + (heldout_pairs(d) if split in ("heldout", "all") else [])
    for p in chosen:
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
    for p, a, b in recorded_pairs(sys.argv[2:] or None, split=sys.argv[1] if len(sys.argv) > 1 else "dev"):
        print(p.split, p.name, a, b)
