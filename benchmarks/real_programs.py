"""Cold start of real programs: the kernel's strategies, every pagecast strategy, the bound, the oracle, warm cache.

    python benchmarks/real_programs.py                    # every case, 5 rounds (about 20-30 min on 2 cores)
    python benchmarks/real_programs.py --quick            # small data, 1 round: a smoke test
    python benchmarks/real_programs.py --cases sqlite-mmap,git --rounds 7 --json

Programs the project did not write: SQLite through Python's sqlite3 module (mmap I/O and
ordinary reads) over a generated database, CPython importing a large package (sympy),
git over a real repository (this checkout's own), a safetensors (mmap) reader of a
generated weights file, a mixture-of-experts weights reader (experts read whole when
routed) and `grep -r -l` over the system's documentation and headers. Each case has training inputs and a held-out input that touches
different pages; every run starts cold (posix_fadvise DONTNEED on each file involved),
strategies interleaved round by round, medians. Harness: ``pagecast.bench.coldstart``.
The bound row warms the held-out run's pages that a training run used too: the most a
plan of warmed pages learned from the recordings could do (the oracle warms them all).
Generated data goes to ``$PAGECAST_CACHE/realbench`` (default ~/.cache/pagecast) and is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
if (
    REPO / "src" / "pagecast"
).is_dir():  # a clone without `pip install -e .`: this tree, for us and the pagecast commands we start
    sys.path.insert(0, str(REPO / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))

from pagecast.bench.coldstart import (  # noqa: E402
    Case,
    Config,
    Input,
    default_strategies,
    format_case,
    format_recurrence,
    format_summary,
    run_case,
    summary,
)
from pagecast.bench.sparse_weights import cache_dir  # noqa: E402
from pagecast.bench.workloads import sqlite_table  # noqa: E402
from pagecast.errors import PagecastError  # noqa: E402

PY = sys.executable

# --------------------------------------------------------------------------- SQLite

SQLITE_QUERY = r"""
import sqlite3, sys, random
db, mmap_size, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
c.execute(f"PRAGMA mmap_size={mmap_size}")
rows = c.execute("SELECT value FROM meta WHERE name = 'rows'").fetchone()[0]
rng = random.Random(seed)
total = 0
# a power-law head shared by every input plus an input-specific spread; k is a scattered
# permutation of the rowid, so neighbouring ranks live on unrelated pages
for _ in range(n):
    k = int(rows * rng.random() ** 3)
    total += c.execute("SELECT length(v) FROM t WHERE k = ?", (k,)).fetchone()[0]
lo = rng.randrange(rows - 2000)
total += c.execute("SELECT count(*), sum(length(v)) FROM t WHERE id BETWEEN ? AND ?", (lo, lo + 2000)).fetchone()[0]
print(total)
"""


def sqlite_db(cache: Path, quick: bool) -> Path:
    """A generated table (rowid, scattered key, 300-byte blob) with an index on the key."""
    rows = 100_000 if quick else 1_000_000
    return sqlite_table(cache / f"sqlite_{rows}.db", rows)


HELDOUT_SEED = 7


def train_seeds(n: int) -> list[int]:
    """The training inputs' seeds of the seeded cases: 1, 2, 3, ... skipping the held-out seed."""
    if n < 2:
        raise PagecastError(f"--train-runs {n}: at least two training inputs are needed")
    return [s for s in range(1, n + 2) if s != HELDOUT_SEED][:n]


def sqlite_case(mmap: bool) -> Callable[..., Case]:
    def make(cache: Path, quick: bool, train_runs: int = 3) -> Case:
        db = sqlite_db(cache, quick)
        n = "500" if quick else "3000"
        size = str(1 << 30) if mmap else "0"
        inp = lambda seed: Input(f"seed {seed}", [PY, "-c", SQLITE_QUERY, str(db), size, str(seed), n])  # noqa: E731
        mode = "mmap I/O (PRAGMA mmap_size=1 GiB)" if mmap else "ordinary reads (mmap_size=0)"
        return Case(
            f"sqlite-{'mmap' if mmap else 'read'}",
            f"SQLite {sqlite3.sqlite_version} (Python sqlite3 module), {mode}: {n} indexed lookups + one "
            f"range scan over a {db.stat().st_size >> 20} MiB database",
            [inp(s) for s in train_seeds(train_runs)],
            inp(HELDOUT_SEED),
            [db],
            mmap_files=[db] if mmap else [],
        )

    return make


# SQLite under a YCSB-style key distribution (workload C: point reads): key ranks follow a
# Zipf law with exponent 0.99 (YCSB's default request distribution), scrambled by an FNV-1a
# hash of the rank as YCSB's "scrambled zipfian" does, so the hot keys are spread over the
# key space instead of clustered at one end. Rank draws use YCSB's ZipfianGenerator (Gray
# et al., "Quickly generating billion-record synthetic databases"); zeta(n, 0.99) is summed
# in closed form (Euler-Maclaurin, error < 1e-3) so the program does no O(n) warm-up.
SQLITE_ZIPF_QUERY = r"""
import sqlite3, sys, random
db, mmap_size, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
c.execute(f"PRAGMA mmap_size={mmap_size}")
rows = c.execute("SELECT value FROM meta WHERE name = 'rows'").fetchone()[0]
theta = 0.99
zetan = (rows ** (1 - theta) - 1) / (1 - theta) + (1 + rows ** -theta) / 2 + theta * (1 - rows ** (-theta - 1)) / 12
zeta2 = 1 + 0.5 ** theta
alpha, eta = 1 / (1 - theta), (1 - (2 / rows) ** (1 - theta)) / (1 - zeta2 / zetan)
def rank(u):
    uz = u * zetan
    return 0 if uz < 1 else 1 if uz < zeta2 else min(rows - 1, int(rows * (eta * u - eta + 1) ** alpha))
def fnv(x):
    h = 0xCBF29CE484222325
    for _ in range(8):
        h = ((h ^ (x & 0xFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        x >>= 8
    return h
rng = random.Random(seed)
total = 0
for _ in range(n):
    k = fnv(rank(rng.random())) % rows
    total += c.execute("SELECT length(v) FROM t WHERE k = ?", (k,)).fetchone()[0]
print(total)
"""


def sqlite_zipf_case(cache: Path, quick: bool, train_runs: int = 3) -> Case:
    db = sqlite_db(cache, quick)
    n = "500" if quick else "3000"
    inp = lambda seed: Input(f"seed {seed}", [PY, "-c", SQLITE_ZIPF_QUERY, str(db), "0", str(seed), n])  # noqa: E731
    return Case(
        "sqlite-zipf",
        f"SQLite {sqlite3.sqlite_version} (Python sqlite3 module), ordinary reads: {n} point "
        f"reads with YCSB-style scrambled Zipfian keys (exponent 0.99) over a {db.stat().st_size >> 20} MiB "
        "database",
        [inp(s) for s in train_seeds(train_runs)],
        inp(HELDOUT_SEED),
        [db],
        note="skewed keys as in YCSB's default workloads: hot keys recur across inputs, cold ones do not",
    )


# --------------------------------------------------------------------------- CPython import

IMPORTS = {
    "solve": "import sympy as s; x = s.Symbol('x'); s.solve(x**2 - 2, x)",
    "units+series": "import sympy.physics.units, sympy as s; x = s.Symbol('x'); s.series(s.exp(x), x, 0, 4)",
    "stats+integrate": "import sympy.stats, sympy as s; x = s.Symbol('x'); s.integrate(x * s.exp(x), x)",
}


def import_case(cache: Path, quick: bool) -> Case:
    try:
        import mpmath
        import sympy
    except ImportError:
        raise PagecastError("the python-import case needs sympy (pip install sympy)") from None
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # the standard library without its site-packages (other installed packages: not this program's files)
    std = [p for p in stdlib.iterdir() if p.name not in ("site-packages", "dist-packages")]
    pkgs = [Path(sympy.__file__).parent, Path(mpmath.__file__).parent, *std]
    inp = lambda k: Input(k, [PY, "-c", IMPORTS[k]])  # noqa: E731
    return Case(
        "python-import",
        f"CPython {platform.python_version()} importing sympy {sympy.__version__} "
        f"(+ a submodule) and calling one function",
        [inp("solve"), inp("units+series")],
        inp("stats+integrate"),
        pkgs,
        note="cold: sympy, mpmath and the standard library (the interpreter binary and libraries the "
        "harness itself maps stay cached)",
    )


# --------------------------------------------------------------------------- git


def git_case(cache: Path, quick: bool, repo: Path | None = None) -> Case:
    repo = repo or REPO
    common = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True,
        text=True,
    )
    if common.returncode != 0:
        raise PagecastError("the git case needs a git checkout (run from a clone)", path=repo)
    gitdir = Path(common.stdout.strip())
    git = lambda name, *a: Input(name, ["git", "-C", str(repo), *a])  # noqa: E731
    size = sum(f.stat().st_size for f in (gitdir / "objects").rglob("*") if f.is_file()) >> 20
    git_bin = subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip()
    return Case(
        "git",
        f"git {subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.split()[-1]} "
        f"over this repository ({size} MiB of objects): git log -p of one or two directories",
        [
            git("log -p src/pagecast/online", "log", "-p", "--", "src/pagecast/online"),
            git("log -p src/pagecast/sim", "log", "-p", "--", "src/pagecast/sim"),
        ],
        git("log -p src/pagecast/trace docs", "log", "-p", "--", "src/pagecast/trace", "docs"),
        [gitdir / "objects", gitdir / "index", gitdir / "packed-refs", gitdir / "refs", git_bin],
        note="a small repository: the git binary and its libraries are a large share of what is read",
    )


# --------------------------------------------------------------------------- safetensors

SAFETENSORS_READ = r"""
import sys, random
from safetensors import safe_open
path, seed, rows_per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
total = 0.0
with safe_open(path, framework="numpy") as f:
    names = sorted(f.keys())
    for i, name in enumerate(names):
        sl = f.get_slice(name)
        n = sl.get_shape()[0]
        # sparse rows: a power-law head shared by every input, scattered by a per-tensor permutation
        for _ in range(rows_per):
            r = (int(n * rng.random() ** 3) * 7919 + i * 104729) % n
            total += float(sl[r:r + 1].sum())
print(total)
"""


# Embedding lookups of a token stream: the file's 96 tensors of 1024 rows are one table of
# 98,304 rows (a vocabulary), token frequencies follow a Zipf law (exponent 1.0, as word
# frequencies roughly do) and the token ids are a fixed permutation of the frequency ranks
# (a tokenizer does not number tokens by frequency), so hot rows are scattered over the file.
SAFETENSORS_ZIPF_READ = r"""
import sys, random, bisect, itertools
from safetensors import safe_open
path, seed, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with safe_open(path, framework="numpy") as f:
    names = sorted(f.keys())
    slices = [f.get_slice(n) for n in names]
    per = slices[0].get_shape()[0]
    vocab = per * len(names)
    cdf = list(itertools.accumulate(1.0 / r for r in range(1, vocab + 1)))
    ids = list(range(vocab))
    random.Random(12345).shuffle(ids)  # the tokenizer's numbering: fixed, not the input's
    rng = random.Random(seed)
    total = 0.0
    for _ in range(tokens):
        t = ids[min(vocab - 1, bisect.bisect(cdf, rng.random() * cdf[-1]))]
        total += float(slices[t // per][t % per:t % per + 1].sum())
print(total)
"""


def weights_file(cache: Path, quick: bool) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    layers, rows = (8, 256) if quick else (24, 1024)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"weights_{layers}x4x{rows}.safetensors"
    if path.exists():
        return path
    rng = np.random.default_rng(1)
    tensors = {
        f"layer{l:02d}.{w}": rng.standard_normal((rows, 1024), dtype=np.float32)
        for l in range(layers)
        for w in ("q", "k", "v", "o")
    }
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path)
    return path


def _safetensors(case: str) -> Any:
    try:
        import safetensors
    except ImportError:
        raise PagecastError(f"the {case} case needs safetensors (pip install safetensors)") from None
    return safetensors


def safetensors_case(cache: Path, quick: bool, train_runs: int = 3) -> Case:
    safetensors = _safetensors("safetensors")
    w = weights_file(cache, quick)
    per = "8" if quick else "48"
    inp = lambda seed: Input(f"seed {seed}", [PY, "-c", SAFETENSORS_READ, str(w), str(seed), per])  # noqa: E731
    return Case(
        "safetensors",
        f"safetensors {safetensors.__version__} safe_open(framework='numpy') (mmap), {per} "
        f"sparse rows per tensor from a {w.stat().st_size >> 20} MiB file",
        [inp(s) for s in train_seeds(train_runs)],
        inp(HELDOUT_SEED),
        [w, Path(safetensors.__file__).parent],
        mmap_files=[w],
    )


def safetensors_zipf_case(cache: Path, quick: bool, train_runs: int = 3) -> Case:
    safetensors = _safetensors("safetensors-zipf")
    w = weights_file(cache, quick)
    tokens = "800" if quick else "4608"
    inp = lambda seed: Input(f"seed {seed}", [PY, "-c", SAFETENSORS_ZIPF_READ, str(w), str(seed), tokens])  # noqa: E731
    return Case(
        "safetensors-zipf",
        f"safetensors {safetensors.__version__} safe_open(framework='numpy') (mmap): "
        f"embedding lookups of {tokens} Zipf-distributed tokens (exponent 1.0) in a "
        f"{w.stat().st_size >> 20} MiB table, token ids scattered",
        [inp(s) for s in train_seeds(train_runs)],
        inp(HELDOUT_SEED),
        [w, Path(safetensors.__file__).parent],
        mmap_files=[w],
        note="skewed rows as in real token streams: frequent tokens' rows recur across inputs",
    )


# --------------------------------------------------------------------------- mixture of experts

# A mixture-of-experts weights reader: the file is LAYERS x EXPERTS experts of EXPERT_KIB
# each, back to back (expert (l, e) at ((l * EXPERTS) + e) * size), mapped. For each token
# and layer the router picks TOPK distinct experts, which are read whole (a copy of the
# mapping: every page of the expert, in order). Expert load is imbalanced as in trained MoE
# models: per layer a fixed popularity (Zipf, exponent 0.8, over a per-layer permutation of
# the experts), while the tokens, and so the experts chosen, depend on the input (the seed).
MOE_READ = r"""
import mmap, random, sys
path, seed, tokens, layers, experts, kib, topk = sys.argv[1], *map(int, sys.argv[2:8])
size = kib << 10
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
weights = []
for l in range(layers):
    perm = list(range(experts))
    random.Random(1000 + l).shuffle(perm)  # the model's own imbalance: fixed, not the input's
    w = [0.0] * experts
    for rank, e in enumerate(perm):
        w[e] = 1.0 / (rank + 1) ** 0.8
    weights.append(w)
rng = random.Random(seed)
total = 0
for _ in range(tokens):
    for l in range(layers):
        chosen = set()
        while len(chosen) < topk:
            chosen.add(rng.choices(range(experts), weights=weights[l])[0])
        for e in sorted(chosen):
            off = (l * experts + e) * size
            block = m[off:off + size]
            total += block[0] + block[-1]
print(total)
"""


def moe_file(cache: Path, quick: bool) -> tuple[Path, tuple[int, int, int]]:
    """Random bytes as LAYERS x EXPERTS experts of EXPERT_KIB (256 MiB; quick: 16 MiB)."""
    layers, experts, kib = (4, 16, 256) if quick else (16, 64, 256)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"moe_{layers}x{experts}x{kib}k.bin"
    if not path.exists():
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            for _ in range(layers * experts):
                f.write(os.urandom(kib << 10))
        tmp.replace(path)
    return path, (layers, experts, kib)


def moe_case(cache: Path, quick: bool, train_runs: int = 3) -> Case:
    w, (layers, experts, kib) = moe_file(cache, quick)
    tokens, topk = ("4", "2") if quick else ("8", "2")
    args = [tokens, str(layers), str(experts), str(kib), topk]
    inp = lambda seed: Input(f"seed {seed}", [PY, "-c", MOE_READ, str(w), str(seed), *args])  # noqa: E731
    return Case(
        "moe",
        f"mixture-of-experts weights reader (mmap): {tokens} tokens x {layers} layers, top-{topk} of "
        f"{experts} experts of {kib} KiB per layer, each read whole when routed; routing depends on the "
        f"input, expert popularity is imbalanced per layer ({w.stat().st_size >> 20} MiB file)",
        [inp(s) for s in train_seeds(train_runs)],
        inp(HELDOUT_SEED),
        [w],
        mmap_files=[w],
        note="objects: experts of one size and alignment, entered at their first page and read whole",
    )


# --------------------------------------------------------------------------- grep -r

# large real trees of text files (manual pages are compressed: grep finds nothing in them)
GREP_TREES = [Path("/usr/share/doc"), Path("/usr/share/perl"), Path("/usr/include")]


def grep_case(cache: Path, quick: bool) -> Case:
    trees = [t for t in (GREP_TREES[:1] if quick else GREP_TREES) if t.is_dir()]
    if not trees:
        raise PagecastError("the grep case needs a tree of text files", path=GREP_TREES[0])
    files = sum(1 for t in trees for p in t.rglob("*") if p.is_file())
    inp = lambda word: Input(word, ["grep", "-r", "-l", "-F", word, *map(str, trees)])  # noqa: E731
    return Case(
        "grep",
        f"grep -r -l WORD over {', '.join(map(str, trees))} ({files:,} files): every file read until its first match",
        [inp("license"), inp("warranty")],
        inp("signal"),
        trees,
        note="-l stops reading a file at its first match, so the pages read depend on the word",
    )


CASES: dict[str, Callable[..., Case]] = {
    "sqlite-mmap": sqlite_case(True),
    "sqlite-read": sqlite_case(False),
    "python-import": import_case,
    "git": git_case,
    "safetensors": safetensors_case,
    # skewed inputs (labelled: the uniform/power-law cases above stay as they are)
    "sqlite-zipf": sqlite_zipf_case,
    "safetensors-zipf": safetensors_zipf_case,
    "moe": moe_case,
    "grep": grep_case,
}
# cases whose inputs are seeds: --train-runs applies to them (the others have fixed inputs)
SEEDED = ("sqlite-mmap", "sqlite-read", "safetensors", "sqlite-zipf", "safetensors-zipf", "moe")


# --------------------------------------------------------------------------- main


def machine_facts(dev: str | None, started: float) -> dict[str, str]:
    ra = Path(f"/sys/block/{dev}/queue/read_ahead_kb") if dev else None
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "kernel": platform.release(),
        "cores": str(os.cpu_count()),
        "device": dev or "?",
        "read_ahead_kb": ra.read_text().strip() if ra and ra.exists() else "?",
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated cases (default all: {','.join(CASES)})")
    ap.add_argument("--rounds", type=int, default=None, help="cold runs per strategy (default 5; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="small data and 1 round: a smoke test, not a measurement")
    ap.add_argument("--work-dir", default="realbench-out", help="recordings, schedules, packs and the JSON report")
    ap.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    ap.add_argument(
        "--strategies",
        choices=("all", "plan"),
        default="all",
        help="all (default) or plan: only the kernel's strategies, the --plan rows (the predicted and the "
        "measured plan, each through pagecast run and the launcher binary), the oracle and warm cache (the other pagecast run rows each add 0.5-1.5 s "
        "of start-up per run)",
    )
    ap.add_argument(
        "--train-runs",
        type=int,
        default=3,
        help="training inputs (seeds 1, 2, ... skipping the held-out seed 7) of the seeded cases "
        f"({', '.join(SEEDED)}); default 3. The other cases have fixed inputs",
    )
    ap.add_argument(
        "--device-model",
        metavar="FILE|DIR",
        help="price every plan with this device model (pagecast calibrate -o FILE); default: the stored "
        "calibration of each file's device, else the built-in model",
    )
    args = ap.parse_args(argv)
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"real_programs: unknown case(s) {', '.join(unknown)} (valid: {', '.join(CASES)})", file=sys.stderr)
        return 2
    fixed = [n for n in names if n not in SEEDED]
    if args.train_runs != 3 and fixed:
        print(f"real_programs: --train-runs applies to seeded cases only, not {', '.join(fixed)}", file=sys.stderr)
        return 2
    if args.train_runs < 2:
        print(
            f"real_programs: --train-runs {args.train_runs}: at least two training inputs are needed", file=sys.stderr
        )
        return 2
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    cache = cache_dir() / "realbench"
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_dir)
    strategies = default_strategies()
    if args.strategies == "plan":
        strategies = [s for s in strategies if s.kind != "pagecast" or "plan" in s.name.lower()]
    plan_args = ["--device-model", str(Path(args.device_model).resolve())] if args.device_model else []
    cfg = Config(work, rounds=rounds, strategies=strategies, plan_args=plan_args)
    results = []
    t0 = time.time()
    load0 = os.getloadavg()
    try:
        for name in names:
            log = lambda s: tqdm.write(s, file=sys.stderr)  # noqa: E731
            log(f"{name}: preparing data")
            case = CASES[name](cache, args.quick, **({"train_runs": args.train_runs} if name in SEEDED else {}))
            bar = tqdm(total=None, desc=name, unit="run", file=sys.stderr, leave=False)

            def progress(msg: str, bar=bar) -> None:
                bar.set_postfix_str(msg[-60:])
                bar.update(1)

            res = run_case(case, cfg, progress=progress, log=log)
            bar.close()
            results.append(res)
            if not args.json:
                print(
                    f"\n### {res['title']}\n\ntraining: {', '.join(res['train_inputs'])}; held-out: "
                    f"{res['heldout_input']}; oracle page set {res['oracle_pages']:,} pages in "
                    f"{res['oracle_files']} files ({res['page_set_source']}); {res['files_made_cold']:,} files made "
                    f"cold per run; median of {rounds}\n"
                )
                print(format_case(res))
                for n in [res["note"], format_recurrence(res["recurrence"]), *res["notes"]] + (
                    [f"not applicable: {', '.join(res['skipped'])}"] if res["skipped"] else []
                ):
                    if n:
                        print(f"\n{n}")
                sys.stdout.flush()
    except PagecastError as e:
        print(f"real_programs: {e}", file=sys.stderr)
        return 1
    summ = summary(results)
    report = {
        "command": " ".join(["python", "benchmarks/real_programs.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_facts(results[0]["device"] if results else None, t0),
        "rounds": rounds,
        "quick": args.quick,
        "load_average_start": list(load0),
        "elapsed_s": round(time.time() - t0, 1),
        "cases": results,
        "summary": summ,
    }
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / "real_programs.json.tmp"
    tmp.write_text(json.dumps(report, indent=2, default=str))
    tmp.replace(work / "real_programs.json")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print("\n### Summary: × the best kernel strategy of each case, and the median share of the oracle's "
              "headroom captured over the cases that have headroom (the oracle 3 % faster or more)\n")  # fmt: skip
        print(format_summary(summ, [r["case"] for r in results]))
        m = report["machine"]
        print(
            f"\n{m['date_utc']}; Linux {m['kernel']}, {m['cores']} cores, {m['device']} read_ahead_kb "
            f"{m['read_ahead_kb']}; load average {' '.join(f'{x:.2f}' for x in load0)} → {m['load_average']}; "
            f"{report['elapsed_s']:.0f} s. Report: {work / 'real_programs.json'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
