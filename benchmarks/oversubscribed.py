"""Real programs under a memory limit: the kernel alone against ``pagecast run --memory --plan``.

    python benchmarks/oversubscribed.py                   # every case, limits at 75 % and 50 % of the data
    python benchmarks/oversubscribed.py --quick           # small data, one round: a smoke test
    python benchmarks/oversubscribed.py --cases llama,numeric --rounds 2 --json

Cases, each a program the project did not write going over the same data again and again:

- ``llama``: llama.cpp (llama-cpp-python 0.3.36, built from source once into
  ``$PAGECAST_CACHE/oversub/llama-venv``) generating tokens from an mmap'd llama GGUF of
  random f16 weights written with the ``gguf`` package (24 layers, width 1024: 0.6 GB);
  greedy decoding, time per token after the first; the weights stay in the mapping on every
  CPU (llama.cpp's extra buffer types off: on a CPU with AMX it would otherwise copy 542 of
  the 605 MiB into anonymous memory, and no limit below the program's own would be tried);
- ``moe``: a mixture-of-experts weights reader (numpy over an mmap'd file): per token and
  layer a few experts of 2 MiB, routed by a prior every input shares and the prompt's own
  preference;
- ``numeric``: power iteration over a ``numpy.memmap`` matrix, one pass per iteration;
- ``sqlite``: SQLite (Python's sqlite3 module, mmap I/O) answering a full scan and a few
  hundred indexed point queries per round.

Each case runs at limits that hold its program's own memory plus 75 % and 50 % of the
data it reads (measured: page cache after a cold run with no limit). Every run starts
cold; strategies interleaved; the figure is the median time of the passes after the
first. Beside the plan learned from the training inputs runs the oracle: the planner given
the held-out input's own recording (measured on that input with ``--measure-rounds``), the
most a plan of these mechanisms reaches when it knows this run's pages (``--no-oracle``:
left out). Harness: ``pagecast.bench.oversub``. Generated data goes to
``$PAGECAST_CACHE/oversub`` (default ~/.cache/pagecast) and is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if (REPO / "src" / "pagecast").is_dir():  # a clone without `pip install -e .`: this tree, for us and the commands
    sys.path.insert(0, str(REPO / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))

from pagecast.bench.coldstart import Input  # noqa: E402
from pagecast.bench.oversub import (  # noqa: E402
    BACKENDS,
    Config,
    LimitCase,
    format_limit,
    format_summary,
    run_case,
    summary,
)
from pagecast.bench.sparse_weights import cache_dir  # noqa: E402
from pagecast.bench.workloads import sqlite_table  # noqa: E402
from pagecast.errors import PagecastError  # noqa: E402
from pagecast.util.atomic import atomic_write_text  # noqa: E402

PY = sys.executable
HELDOUT_SEED = 7
TRAIN_SEEDS = (1, 2)
LLAMA_CPP_VERSION = "0.3.36"


def _write_atomic(path: Path, make: Callable[[Path], None]) -> Path:
    if path.exists():
        return path
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    make(tmp)
    tmp.replace(path)
    return path


# --------------------------------------------------------------------------- mixture of experts

MOE = r"""
import os, sys, time
import numpy as np
path, layers, experts, k, seed, tokens = sys.argv[1], *map(int, sys.argv[2:7])
w = np.memmap(path, np.float16, "r")
d = int(round((w.size // (layers * experts)) ** 0.5))
w = w.reshape(layers, experts, d, d)
prior = np.random.default_rng(0).dirichlet(np.full(experts, 0.4), layers)  # the router's bias: every input
g = np.random.default_rng(seed)
pref = g.dirichlet(np.full(experts, 0.4), layers)  # this prompt's
x = g.standard_normal(d).astype(np.float32)
log = open(os.environ["PAGECAST_BENCH_PASSES"], "a", buffering=1)
for t in range(tokens):
    t0 = time.perf_counter()
    for l in range(layers):
        p = 0.5 * prior[l] + 0.5 * pref[l]
        y = np.zeros(d, np.float32)
        for e in g.choice(experts, k, replace=False, p=p):
            y += np.asarray(w[l, e], np.float32) @ x
        x = np.tanh(y / np.linalg.norm(y) * 8)
    log.write(f"pass {time.perf_counter() - t0}\n")
log.write(f"result {float(x.sum()):.6e}\n")
"""


def moe_weights(cache: Path, layers: int, experts: int, d: int) -> Path:
    import numpy as np

    def make(tmp: Path) -> None:
        m = np.memmap(tmp, np.float16, "w+", shape=(layers, experts, d, d))
        g = np.random.default_rng(0)
        for i in range(layers):
            m[i] = (g.standard_normal((experts, d, d), np.float32) / np.sqrt(d)).astype(np.float16)
        m.flush()
        del m

    return _write_atomic(cache / f"moe_{layers}x{experts}x{d}.bin", make)


def moe_case(cache: Path, quick: bool) -> LimitCase:
    layers, experts, d, k, tokens = (4, 4, 1024, 2, 6) if quick else (8, 16, 1024, 4, 8)
    f = moe_weights(cache, layers, experts, d)
    argv = [PY, "-c", MOE, str(f), str(layers), str(experts), str(k)]
    inp = lambda s: Input(f"prompt {s}", [*argv, str(s), str(tokens)])  # noqa: E731
    return LimitCase(
        "moe",
        f"mixture-of-experts reader (numpy over an mmap'd {f.stat().st_size >> 20} MiB file): {layers} layers of "
        f"{experts} experts of {d * d * 2 >> 20} MiB, {k} per layer and token, {tokens} tokens",
        "token",
        [inp(s) for s in TRAIN_SEEDS],
        inp(HELDOUT_SEED),
        [f],
        [f],
    )


# --------------------------------------------------------------------------- numeric

POWER = r"""
import os, sys, time
import numpy as np
path, n, seed, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
a = np.memmap(path, np.float32, "r", shape=(n, n))
x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
block = max(1, (8 << 20) // (4 * n))
log = open(os.environ["PAGECAST_BENCH_PASSES"], "a", buffering=1)
lam = 0.0
for it in range(passes):
    t0 = time.perf_counter()
    y = np.empty(n, np.float32)
    for i in range(0, n, block):
        y[i : i + block] = a[i : i + block] @ x
    lam = float(np.linalg.norm(y))
    x = y / lam
    log.write(f"pass {time.perf_counter() - t0}\n")
log.write(f"result {lam:.6e}\n")
"""


def matrix(cache: Path, n: int) -> Path:
    import numpy as np

    def make(tmp: Path) -> None:
        m = np.memmap(tmp, np.float32, "w+", shape=(n, n))
        g = np.random.default_rng(1)
        step = max(1, (32 << 20) // (4 * n))
        for i in range(0, n, step):
            m[i : i + step] = g.random((min(step, n - i), n), np.float32)
        m.flush()
        del m

    return _write_atomic(cache / f"matrix_{n}.f32", make)


def numeric_case(cache: Path, quick: bool) -> LimitCase:
    n, passes = (4096, 6) if quick else (6144, 8)
    f = matrix(cache, n)
    inp = lambda s: Input(f"start vector {s}", [PY, "-c", POWER, str(f), str(n), str(s), str(passes)])  # noqa: E731
    return LimitCase(
        "numeric",
        f"power iteration over a numpy.memmap {n}×{n} float32 matrix ({f.stat().st_size >> 20} MiB), {passes} passes",
        "pass",
        [inp(s) for s in TRAIN_SEEDS],
        inp(HELDOUT_SEED),
        [f],
        [f],
    )


# --------------------------------------------------------------------------- SQLite

SQLITE = r"""
import os, random, sqlite3, sys, time
db, seed, rounds, points = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
c.execute("PRAGMA mmap_size=4294967296")
c.execute("PRAGMA cache_size=-2000")
rows = c.execute("SELECT value FROM meta WHERE name = 'rows'").fetchone()[0]
rng = random.Random(seed)
log = open(os.environ["PAGECAST_BENCH_PASSES"], "a", buffering=1)
total = 0
for r in range(rounds):
    t0 = time.perf_counter()
    total += c.execute("SELECT count(*), sum(length(v)) FROM t WHERE length(v) > 0").fetchone()[1]
    for _ in range(points):
        k = int(rows * rng.random() ** 3)  # a power-law head every input shares
        total += c.execute("SELECT length(v) FROM t WHERE k = ?", (k,)).fetchone()[0]
    log.write(f"pass {time.perf_counter() - t0}\n")
log.write(f"result {total}\n")
"""


def sqlite_db(cache: Path, rows: int) -> Path:
    return sqlite_table(cache / f"oversub_sqlite_{rows}.db", rows)


def sqlite_case(cache: Path, quick: bool) -> LimitCase:
    rows, rounds, points = (100_000, 6, 100) if quick else (300_000, 7, 200)
    db = sqlite_db(cache, rows)
    inp = lambda s: Input(f"seed {s}", [PY, "-c", SQLITE, str(db), str(s), str(rounds), str(points)])  # noqa: E731
    return LimitCase(
        "sqlite",
        f"SQLite {sqlite3.sqlite_version} (Python sqlite3, mmap I/O): per round a full scan and {points} indexed "
        f"point queries, {rounds} rounds, over a {db.stat().st_size >> 20} MiB database",
        "round",
        [inp(s) for s in TRAIN_SEEDS],
        inp(HELDOUT_SEED),
        [db],
        [db],
    )


# --------------------------------------------------------------------------- llama.cpp

GGUF_WRITER = r"""
import sys
import numpy as np
import gguf
path, layers, width, ff, vocab = sys.argv[1], *map(int, sys.argv[2:6])
heads = max(1, width // 64)
w = gguf.GGUFWriter(path, "llama")
w.add_context_length(2048)
w.add_embedding_length(width)
w.add_block_count(layers)
w.add_feed_forward_length(ff)
w.add_head_count(heads)
w.add_head_count_kv(heads)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(width // heads)
w.add_file_type(1)  # mostly f16
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
tokens += [f"\u2581w{i}" for i in range(vocab - len(tokens))]
types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
w.add_tokenizer_model("llama")
w.add_token_list(tokens)
w.add_token_scores([0.0] * 259 + [-float(i) for i in range(vocab - 259)])
w.add_token_types(types)
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
g = np.random.default_rng(0)
rnd = lambda *shape: (g.standard_normal(shape, np.float32) * 0.02).astype(np.float16)
w.add_tensor("token_embd.weight", rnd(vocab, width))
for i in range(layers):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", np.ones(width, np.float32))
    for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(p + n + ".weight", rnd(width, width))
    w.add_tensor(p + "ffn_norm.weight", np.ones(width, np.float32))
    w.add_tensor(p + "ffn_gate.weight", rnd(ff, width))
    w.add_tensor(p + "ffn_up.weight", rnd(ff, width))
    w.add_tensor(p + "ffn_down.weight", rnd(width, ff))
w.add_tensor("output_norm.weight", np.ones(width, np.float32))
w.add_tensor("output.weight", rnd(vocab, width))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
"""

LLAMA_GEN = r"""
import os, sys, time
import llama_cpp.llama_cpp as api
from llama_cpp import Llama
default_params = api.llama_model_default_params
def mapped_params():
    # on a CPU with AMX (or another repacking backend) llama.cpp copies the weights it can
    # repack into anonymous memory, which no limit can reclaim: keep them in the mapping
    p = default_params()
    p.use_extra_bufts = False
    return p
api.llama_model_default_params = mapped_params
model, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
llm = Llama(model_path=model, n_ctx=256, n_batch=64, n_threads=2, use_mmap=True, use_mlock=False, seed=0, verbose=False)
toks = llm.tokenize(prompt.encode(), add_bos=True)
log = open(os.environ["PAGECAST_BENCH_PASSES"], "a", buffering=1)
out = []
t0 = time.perf_counter()
for tok in llm.generate(toks, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0):
    t1 = time.perf_counter()
    log.write(f"pass {t1 - t0}\n")
    t0 = t1
    out.append(tok)
    if len(out) >= n:
        break
log.write("result " + " ".join(map(str, out)) + "\n")
"""

PROMPTS = {
    1: "The river ran past the old mill and the children",
    2: "In the first year of the war the harvest",
    HELDOUT_SEED: "Once upon a time a lighthouse keeper found a letter",
}


def llama_python(venv: Path, log: Callable[[str], None]) -> Path:
    """The interpreter of the cache venv holding llama-cpp-python and gguf; built on first use."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import llama_cpp, gguf; print(llama_cpp.__version__)"]
    if py.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == LLAMA_CPP_VERSION:
        return py
    log(
        f"installing llama-cpp-python {LLAMA_CPP_VERSION} (built from source, CPU only: about 10-30 minutes on "
        f"2 cores) and gguf into {venv}; once only"
    )
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF "
           "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"}  # fmt: skip
    for pkgs in (["gguf", "numpy"], [f"llama-cpp-python=={LLAMA_CPP_VERSION}"]):
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", *pkgs], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PagecastError(f"llama case: pip install {' '.join(pkgs)} failed: {proc.stderr.strip()[-300:]}")
    return py


def llama_case(cache: Path, quick: bool, log: Callable[[str], None] = print, venv: Path | None = None) -> LimitCase:
    py = llama_python(venv or cache / "llama-venv", log)
    layers, width, ff, vocab, tokens = (4, 512, 1024, 2000, 6) if quick else (24, 1024, 2048, 32000, 6)
    gguf_path = cache / f"llama_random_{layers}x{width}x{ff}x{vocab}.gguf"

    def make(tmp: Path) -> None:
        argv = [str(py), "-c", GGUF_WRITER, str(tmp), str(layers), str(width), str(ff), str(vocab)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PagecastError(f"llama case: writing the GGUF failed: {proc.stderr.strip()[-300:]}")

    _write_atomic(gguf_path, make)
    inp = lambda s: Input(f"prompt {s}", [str(py), "-c", LLAMA_GEN, str(gguf_path), PROMPTS[s], str(tokens)])  # noqa: E731
    return LimitCase(
        "llama",
        f"llama.cpp (llama-cpp-python {LLAMA_CPP_VERSION}, CPU, mmap) generating {tokens} tokens greedily from a "
        f"random-weight llama GGUF ({layers} layers, width {width}, f16, {gguf_path.stat().st_size >> 20} MiB)",
        "token",
        [inp(s) for s in TRAIN_SEEDS],
        inp(HELDOUT_SEED),
        [gguf_path],
        [gguf_path],
    )


# --------------------------------------------------------------------------- BowerAccess llm


def bower_llm(cache: Path, quick: bool, rounds: int, cgroup: Callable[[int], Any]) -> dict[str, Any]:
    """BowerAccess's ``llm`` (a sorted random 10 % of a weights file's pages, the same each
    pass) with a 1 MiB budget under the userfaultfd pager, against the kernel in a small
    memory cgroup (16 MiB) and with no limit; cold file every run. Time per pass: the
    program's own total over its passes (it reports no per-pass times)."""
    import statistics

    import numpy as np

    from pagecast.pager.runtime import llm_path, pager_env
    from pagecast.util.pagecache import make_cold

    npages, passes = (4096, 4) if quick else (16384, 8)
    f = _write_atomic(cache / f"bower_{npages}.bin", lambda t: np.zeros(npages * 4096, np.uint8).tofile(t))
    make_cold([f], sync=True)
    argv = [str(llm_path()), "-n", str(npages), "-g", f"{HELDOUT_SEED}:100", "-r", str(passes), "-m", "read", "-q"]
    argv.append(str(f))
    spec = [(str(f), 1 << 20)]
    small = 16 << 20  # a small cgroup: at 4 and 8 MiB the 64 MiB case was OOM-killed under reclaim
    rows: dict[str, list[float]] = {}
    sums: set[str] = set()
    killed: set[str] = set()

    def once(name: str, cmd: list[str], env: dict[str, str]) -> None:
        make_cold([f])
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        line = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            rows.setdefault(name, []).append(json.loads(line)["ns"] / 1e9 / passes)
        except (ValueError, KeyError):
            sums.add(line)  # llm -q without -t prints only its checksum
            return

    configs: list[tuple[str, Callable[[], tuple[list[str], dict[str, str]]]]] = [
        ("kernel mmap, no limit", lambda: ([*argv, "-t"], dict(os.environ))),
        ("pager 1 MiB, CLOCK alone (policy none)", lambda: ([*argv, "-t"], pager_env(spec, "none"))),
        ("pager 1 MiB, nextline:16", lambda: ([*argv, "-t"], pager_env(spec, "nextline:16"))),
        ("pager 1 MiB, sparse:16", lambda: ([*argv, "-t"], pager_env(spec, "sparse:16"))),
    ]
    for rnd in range(rounds):
        for name, make in configs:
            cmd, env = make()
            once(name, cmd, env)
        name = f"kernel mmap in a {small >> 20} MiB memory cgroup"
        with cgroup(small) as cg:
            try:
                once(name, cg.wrap([*argv, "-t"]), dict(os.environ))
            except subprocess.CalledProcessError as e:
                killed.add(f"{name}: the program ended with status {e.returncode} (OOM-killed under reclaim)")
    return {
        "title": f"BowerAccess llm: {npages} pages ({npages * 4096 >> 20} MiB), a sorted random 10 % of them each "
        f"pass, {passes} passes, 1 MiB budget, cold file",
        "rows": {k: statistics.median(v) for k, v in rows.items()},
        "notes": sorted(killed),
    }


def format_bower(b: dict[str, Any]) -> str:
    base = b["rows"].get("kernel mmap, no limit")
    lines = [f"### {b['title']}", "", "| configuration | s per pass (median) | vs kernel, no limit |", "|---|---|---|"]
    for k, v in b["rows"].items():
        lines.append(f"| {k} | {v:.4f} | {base / v:.2f}× |" if base else f"| {k} | {v:.4f} | — |")
    return "\n".join([*lines, *b.get("notes", [])])


CASES: dict[str, Callable[..., LimitCase]] = {
    "llama": llama_case,
    "moe": moe_case,
    "numeric": numeric_case,
    "sqlite": sqlite_case,
}


# --------------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def default_cgroup() -> Callable[[int], Any]:
    from pagecast.util.memcg import MemoryCgroup

    return MemoryCgroup


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--quick", action="store_true", help="small data, one round, 75 %% only: a smoke test")
    ap.add_argument("--rounds", type=int, default=None, help="runs of each strategy per limit (default 2; quick 1)")
    ap.add_argument("--fractions", default=None, help="limits as shares of the data read (default 0.75,0.5)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="pagecast run --backend values to measure")
    ap.add_argument(
        "--measure-rounds",
        type=int,
        default=None,
        help="plan --memory --measure rounds on the "
        "training inputs: the plan kept only where it beats the kernel alone (default 2; quick 1; 0: off)",
    )
    ap.add_argument("--work-dir", type=Path, default=None, help="recordings and plans (default: under the cache)")
    ap.add_argument("--llama-venv", type=Path, default=None, help="venv with llama-cpp-python and gguf (default: "
                    "under the cache; made there on first use)")  # fmt: skip
    ap.add_argument("--no-bower", action="store_true", help="leave out the BowerAccess llm row")
    ap.add_argument(
        "--no-oracle", action="store_true", help="leave out the oracle (a plan from the held-out input's own recording)"
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--save", type=Path, default=None, help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    names = [c for c in a.cases.split(",") if c]
    bad = [c for c in names if c not in CASES]
    if bad:
        print(f"oversubscribed.py: unknown case {bad[0]!r} (cases: {', '.join(CASES)})", file=sys.stderr)
        return 2
    cache = cache_dir() / "oversub"
    cache.mkdir(parents=True, exist_ok=True)
    fractions = tuple(float(x) for x in (a.fractions or ("0.75" if a.quick else "0.75,0.5")).split(","))
    say = lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        cfg = Config(
            work_dir=a.work_dir or cache / "work",
            cgroup=default_cgroup(),
            fractions=fractions,
            rounds=a.rounds or (1 if a.quick else 2),
            backends=tuple(b for b in a.backends.split(",") if b),
            measure_rounds=a.measure_rounds if a.measure_rounds is not None else (1 if a.quick else 2),
            oracle=not a.no_oracle,
        )
        results = []
        for name in names:
            case = llama_case(cache, a.quick, say, a.llama_venv) if name == "llama" else CASES[name](cache, a.quick)
            say(f"{case.name}: {case.title}")
            results.append(run_case(case, cfg, say))
        bower = None if a.no_bower else bower_llm(cache, a.quick, cfg.rounds + 2, cfg.cgroup)
    except PagecastError as e:
        print(f"oversubscribed.py: {e}", file=sys.stderr)
        return 1
    summ = summary(results)
    doc = {"machine": machine(), "argv": sys.argv[1:], "cases": results, "summary": summ, "bower_llm": bower}
    if a.save:
        atomic_write_text(a.save, json.dumps(doc, indent=1))
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"machine: {machine()}\n")
    for r in results:
        shown = " ".join("SCRIPT" if "\n" in x else x for x in r["command"])
        print(f"### {r['case']}: {r['title']}\n\ncommand: {shown}\nbytes read: {r['bytes_read_source']}\n")
        for lim in r["limits"]:
            print(format_limit(r, lim) + "\n")
    print(format_summary(summ))
    if bower:
        print("\n" + format_bower(bower))
    return 0


if __name__ == "__main__":
    sys.exit(main())
