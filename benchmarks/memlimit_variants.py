"""One memory plan, applied several ways, on a real program's held-out input under its limit.

What ``plan --memory --measure`` chooses among, timed on the input the plan was not made
from: the kernel alone under the limit (the baseline), and any of the plan's variants
(``pagecast.plan.memory_measure.variants``): ``half`` and ``keep`` (the keep set, halved or
whole, locked; nothing followed from outside), ``plan`` (as built) and each of them applied by
the userfaultfd pager (``+pager``), ``follow`` (with ``--follow PLAN``: a plan rebuilt in
coarser chunks the controller can follow, as ``plan --memory --measure`` builds one; with
``--for-pager PLAN`` the ``+pager`` variants come from that plan, rebuilt for the pager),
``seq`` and ``seq1`` (with ``--traces``, the recordings the plan was made from: its keep set
rebuilt for files advised sequential, leaving two read-ahead windows of room or one,
``pagecast.plan.memory.sequential_variants``; ``seq@MIB``: the same leaving MIB MiB of room), plus
``as-planned`` (the plan file as it is, with the backend it names). Every run starts cold, variants interleaved round by round. Printed: per
variant the median time per pass (token, round) after the first over every round, MiB read
by the run, and the ratio to the kernel alone.

    python benchmarks/memlimit_variants.py --case sqlite --limit 59M \\
        --plan ~/.cache/pagecast/oversub/work/sqlite/limit-59M/train.plan \\
        --variants kernel,keep,keep+pager,as-planned --rounds 3

The cases and their held-out inputs are ``benchmarks/oversubscribed.py``'s; the plan is
usually the one that benchmark (or ``pagecast plan --memory``) wrote for that limit. Needs
root (memory cgroups).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import oversubscribed as ob  # noqa: E402
from pagecast.bench.oversub import Config, Launch, ReadCounter, pagecast, run_once  # noqa: E402
from pagecast.bench.sparse_weights import cache_dir  # noqa: E402
from pagecast.errors import PagecastError  # noqa: E402
from pagecast.plan.memory import MemoryPlanConfig, sequential_plan, sequential_variants  # noqa: E402
from pagecast.plan.memory_format import MemoryPlan, read_memory_plan, write_memory_plan  # noqa: E402
from pagecast.plan.memory_measure import variants  # noqa: E402
from pagecast.util.memcg import parse_limit  # noqa: E402

AS_PLANNED = "as-planned"
SEQ_ROOM = "seq@"


def launches(
    plan_path: Path,
    limit: int,
    names: list[str],
    tmp: Path,
    argv: list[str],
    follow: Path | None = None,
    for_pager: Path | None = None,
    traces: list[Path] | None = None,
) -> dict[str, Launch]:
    plan = read_memory_plan(plan_path)
    sequential: dict[str, MemoryPlan] = {}
    if traces:
        cfg = MemoryPlanConfig(plan.limit_bytes, plan.chunk_bytes)
        sequential = sequential_variants([str(t) for t in traces], cfg, plan)
        for name in names:
            if name.startswith(SEQ_ROOM):  # seq@MIB: the sequential variant leaving MIB of room
                room = int(name[len(SEQ_ROOM) :]) << 20
                p = sequential_plan([str(t) for t in traces], dataclasses.replace(cfg, stream_room_bytes=room), plan)
                if p is None:
                    raise PagecastError(f"{name}: no sequential variant keeps anything with that room")
                sequential[name] = p
    by_name = variants(
        plan,
        follow=read_memory_plan(follow) if follow else None,
        for_pager=read_memory_plan(for_pager) if for_pager else None,
        sequential=sequential,
    )
    out: dict[str, Launch] = {}
    for name in names:
        if name == AS_PLANNED:
            path: Path | None = plan_path
        elif name not in by_name:
            raise PagecastError(f"unknown variant {name!r} (of: {', '.join([*by_name, AS_PLANNED])})")
        elif by_name[name] is None:
            path = None
        else:
            path = tmp / f"{name}.plan"
            write_memory_plan(by_name[name], path)
        with_plan = ["--plan", str(path)] if path else []
        cmd = pagecast("run", "--memory", str(limit), *with_plan, "--json", "--", *argv)
        out[name] = Launch(cmd, pagecast_json=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True, choices=sorted(ob.CASES), help="a case of benchmarks/oversubscribed.py")
    ap.add_argument("--limit", required=True, help="memory limit (e.g. 59M)")
    ap.add_argument("--plan", type=Path, required=True, help="memory plan for that limit (pagecast plan --memory)")
    ap.add_argument("--variants", default="kernel,keep,plan,as-planned", help="comma-separated (kernel first)")
    ap.add_argument("--follow", type=Path, help="the plan in coarser chunks, for the variant 'follow'")
    ap.add_argument("--for-pager", type=Path, help="the plan rebuilt for the pager, for the '+pager' variants")
    ap.add_argument(
        "--traces", type=Path, nargs="+", help="the recordings the plan was made from, for 'seq', 'seq1' and 'seq@MIB'"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    names = [v for v in a.variants.split(",") if v]
    if names[:1] != ["kernel"]:
        names = ["kernel", *[n for n in names if n != "kernel"]]
    try:
        limit = parse_limit(a.limit)
        cache = cache_dir() / "oversub"
        case = ob.llama_case(cache, False, print) if a.case == "llama" else ob.CASES[a.case](cache, False)
        cfg = Config(work_dir=Path(tempfile.gettempdir()), cgroup=ob.default_cgroup())
        counter = ReadCounter(Path(case.files[0]))
        per_pass: dict[str, list[float]] = {n: [] for n in names}
        read: dict[str, list[int]] = {n: [] for n in names}
        results: set[str] = set()
        try:
            with tempfile.TemporaryDirectory(prefix="pc-variants-") as td:
                runs = launches(a.plan, limit, names, Path(td), case.heldout.argv, a.follow, a.for_pager, a.traces)
                for rnd in range(a.rounds):
                    order = names[rnd % len(names) :] + names[: rnd % len(names)]
                    for name in order:
                        _, times, result, nbytes, _ = run_once(case, case.heldout, runs[name], cfg, counter, case.files)
                        per_pass[name].extend(times[1:])
                        read[name].append(nbytes)
                        results.add(result)
                        print(f"round {rnd + 1} {name}: {statistics.median(times[1:]):.3f} s a pass", file=sys.stderr)
        finally:
            counter.close()  # its blkio cgroup (one a killed run leaves is removed by the next)
    except PagecastError as e:
        print(f"memlimit_variants.py: {e}", file=sys.stderr)
        return 1
    base = statistics.median(per_pass["kernel"])
    rows = [
        {
            "variant": n,
            "s_per_pass": statistics.median(per_pass[n]),
            "mib_read": statistics.median(read[n]) / 2**20,
            "vs_kernel": base / statistics.median(per_pass[n]),
        }
        for n in names
    ]
    doc = {
        "case": a.case,
        "limit": a.limit,
        "plan": str(a.plan),
        "rounds": a.rounds,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "same_result": len(results) == 1,
        "rows": rows,
    }
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(
        f"{a.case} under {a.limit}, plan {a.plan}, {a.rounds} rounds, {doc['date']}; same output: {doc['same_result']}"
    )
    print("| variant | s per pass after the first (median) | MiB read (median run) | vs the kernel alone |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['s_per_pass']:.3f} | {r['mib_read']:.0f} | {r['vs_kernel']:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
