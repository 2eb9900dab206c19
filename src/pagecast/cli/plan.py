"""``pagecast plan``: learn from recordings what to prefetch before a program runs, per file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pagecast.cli._common import add_json_flag, format_table, print_json, progress, warn_missing_reads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="learn a per-file prefetch plan from recordings, for `pagecast run --plan`",
        description="Read recordings of the same program on different inputs (pagecast record) and write a plan: "
        "for every file the runs used, one candidate, chosen by predicted I/O time: nothing, "
        "nothing with read-ahead off (random advice, mapped files), warm the pages at least k runs "
        "used (every k is a candidate: hot pages; default or random advice for the rest), warm the "
        "whole file, or stream it. Each candidate is priced by an I/O cost model driven by the "
        "device's calibration (pagecast calibrate; a conservative built-in model otherwise) and its "
        "read_ahead_kb, and validated leave-one-run-out (plan on all runs but one, predict the one "
        "left out, average). A file gets 'nothing' unless the best candidate is predicted --margin "
        "faster. Then, run-wide: prefetching hidden behind the program's CPU time (--overlap) may "
        "upgrade files, and the small files the runs used may be warmed whole as a group when "
        "leave-one-run-out over the group says new inputs reuse them. Each file's identity "
        "(size, mtime, ctime, inode, device) is stored so a file changed since is skipped with a warning.",
        epilog="example: pagecast plan run1.parquet run2.parquet run3.parquet -o prog.plan --explain && "
        "pagecast run --plan prog.plan -- ./prog args",
    )
    p.add_argument("traces", nargs="*", help="recordings (.parquet) of the program")
    p.add_argument("-o", "--output", help="plan file to write")
    p.add_argument("--show", metavar="PLAN", help="print an existing plan instead (table; --json: the JSON view)")
    _add_pricing_args(p)
    _add_measure_args(p)
    p.add_argument(
        "--explain",
        action="store_true",
        help="print per file the candidates' predicted times, the choice and why (stderr)",
    )
    _add_memory_args(p)
    add_json_flag(p)
    p.set_defaults(func=run)


def _add_pricing_args(p: argparse.ArgumentParser) -> None:
    """How each file's candidates are priced and chosen."""
    p.add_argument(
        "--min-runs",
        type=int,
        default=None,
        help="warm only pages used by at least this many recordings (default: every threshold is a "
        "candidate, chosen per file by leave-one-run-out)",
    )
    p.add_argument("--depth", type=int, default=2, help="reader threads = requests in flight while warming (default 2)")
    p.add_argument("--chunk-kib", type=int, default=1024, help="largest single read request in KiB (default 1024)")
    p.add_argument(
        "--margin",
        type=float,
        default=0.10,
        help="a candidate must be predicted this fraction faster than nothing to be chosen (default 0.10)",
    )
    p.add_argument(
        "--overlap",
        type=float,
        default=0.5,
        help="share of the program's CPU time (measured from the recordings: their span less the "
        "modelled I/O) that prefetching may hide behind, one budget for the whole run (default 0.5; "
        "0: no credit, every file priced as if the program only waited on it)",
    )
    p.add_argument(
        "--max-regret",
        type=float,
        default=0.2,
        help="a file upgraded on the strength of the CPU overlap must cost, priced with no overlap at "
        "all, at most this fraction more than without the upgrade (default 0.2): the bound on "
        "what a wrong CPU estimate can cost",
    )
    p.add_argument(
        "--small-kib",
        type=int,
        default=1024,
        help="files up to this size form the group that may be warmed whole (default 1024)",
    )
    p.add_argument(
        "--live-startup-ms",
        type=float,
        default=500.0,
        help="what starting pagecast's Python live machinery costs a run, charged once when the plan "
        "uses a page pack or a per-fault policy the native launcher cannot run (default 500)",
    )
    p.add_argument(
        "--startup-ms",
        type=float,
        default=2.0,
        help="what starting a planned run costs (the native `pagecast` front and launcher; default 2). "
        "A plan whose predicted gain over no plan is not above this plus --noise is written as "
        "nothing for every file",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=0.05,
        help="run-to-run spread of a cold run, as a share of its predicted I/O (default 0.05): the "
        "least gain, beyond --startup-ms, a plan must promise",
    )
    p.add_argument(
        "--no-fit",
        action="store_true",
        help="price with the device model as calibrated; by default its times are scaled down where "
        "it prices a recording's reads above the recording's own span (the median over the "
        "recordings of span / modelled I/O, never up)",
    )
    p.add_argument(
        "--device-model",
        metavar="FILE|DIR",
        help="device model to price with (pagecast calibrate's JSON, or a calibrated directory); "
        "default: the stored model of each file's device, else a conservative built-in one",
    )


def _add_measure_args(p: argparse.ArgumentParser) -> None:
    """--measure: choosing by measured time."""
    p.add_argument(
        "--measure",
        action="store_true",
        help="then choose by measured time: RUNS EVERY RECORDED COMMAND AGAIN, --rounds x candidates times "
        "per recording (use it only for commands that are safe to repeat: read-only, no side effects), each "
        "from a cold page cache (posix_fadvise DONTNEED on the files the recordings used), through the "
        "native launcher, in the recording's working directory, with this command's environment. "
        "Candidates: plans doing exactly what the kernel's strategies do (default, random and sequential "
        "read-ahead advice, WILLNEED of every file before the program starts, and the same WILLNEED beside "
        "it) and the predicted plan in four forms (as planned; issued before the program starts; with "
        "WILLNEED for the files it leaves alone; with every file read whole beside the program), each timed "
        "on a recording it was not planned from when there are 3 or more. The plan written is, of the "
        "candidates that beat default by more than the measured noise, the simplest within a standard error "
        "of the fastest; else the fastest kernel plan. A predicted plan so chosen is timed again against the "
        "fastest kernel plan, the two alone for --rounds more rounds, and kept only if it is faster again by "
        "more than a standard error. With --memory: the program alone under the limit against the plan, "
        "its keep set alone and half of it (each also through the userfaultfd pager), and where the plan "
        "cannot follow what it streams the plan rebuilt in coarser chunks that it can (follow), and the keep "
        "set for files advised sequential (seq; seq1 with less room), through pagecast run --memory, a "
        "variant 3x slower than the kernel alone stopped; of those that beat the kernel by more than the noise and tie with the fastest, "
        "the one reading least from the device (then the simplest), confirmed in fresh rounds, else backend kernel",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="with --measure: cold runs of every (recording, candidate) pair, interleaved (default 3)",
    )
    p.add_argument(
        "--candidates",
        metavar="NAMES",
        default=None,
        help="with --measure: comma-separated candidates to time (default all: default, random, sequential, "
        "willneed, willneed-beside, predicted, predicted-before, predicted+willneed, predicted+stream); "
        "default is always timed, as the others are judged against it. Fewer candidates, fewer runs",
    )


def _add_memory_args(p: argparse.ArgumentParser) -> None:
    """--memory: a plan for a run under a memory limit."""
    p.add_argument(
        "--memory",
        metavar="LIMIT",
        help="plan for a run under a memory limit instead (pagecast run --memory LIMIT --plan): from "
        "recordings made under the limit (pagecast record --memory), simulate each run at the limit's "
        "capacity with LRU (the kernel) and MIN (the floor) and write what to keep for the whole run, "
        "what to evict right after use and what to prefetch ahead (docs/oversubscription.md). With --measure: "
        "the plan, its keep set alone and half of it, each applied by the kernel's page cache and by the "
        "userfaultfd pager, timed against the kernel alone under the limit; the variant kept also sets who "
        "applies it (backend kernel-advice or pager)",
    )
    p.add_argument(
        "--chunk",
        metavar="SIZE",
        default=None,
        help="--memory: the unit of keep/evict/prefetch decisions (default: of 2M, 512K, 128K and 32K, the "
        "one whose plan reads least, leave-one-run-out)",
    )
    p.add_argument(
        "--reserve",
        metavar="SIZE",
        help="--memory: memory set aside for what is not the files (default: the recorded anonymous pages "
        "plus max(6 MiB, limit/16), at most half the limit)",
    )
    p.add_argument(
        "--stream-room",
        metavar="SIZE",
        help="--memory: memory the keep set leaves unlocked for what streams through (default: twice the "
        "read-ahead window of the device of the most used file, plus two chunks)",
    )
    p.add_argument(
        "--prefetch-chunks",
        type=int,
        help="--memory: chunks prefetched ahead of the program (default: from the device model)",
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        help="--memory: for files read in order (model weights): lock MIN's keep set cut only for what "
        "streams (two read-ahead windows) and advise the files it keeps sequential (--measure times this "
        "as the variant 'seq', and 'seq1' with one window of room, beside the others anyway)",
    )


def show(path: str, as_json: bool) -> int:
    from pagecast.plan.format import read_plan
    from pagecast.plan.memory_format import is_memory_plan

    if is_memory_plan(path):
        return _show_memory(path, as_json)

    doc = read_plan(path)
    if as_json:
        print_json({"plan": path, **doc.to_dict()})
        return 0
    rows = [
        {
            "file": f.path,
            "strategy": f.strategy,
            "advice": f.advice,
            "pages": f.pages,
            "ranges": len(f.ranges),
            "depth": f.depth,
            "arg": f.arg or "-",
            "reason": f.reason,
        }
        for f in doc.files
    ]
    print(format_table(rows) if rows else f"{path}: a plan with no files")
    print(f"issue: {doc.issue} ({'before the program starts' if doc.issue == 'before' else 'beside the program'})")
    if doc.note:
        print(f"note: {doc.note}")
    return 0


def _device(spec: str | None) -> "DeviceCosts | None":  # noqa: F821 - imported lazily (CLI start-up)
    """--device-model: a calibration to price every file with, instead of each file's device's."""
    if spec is None:
        return None
    import os

    from pagecast.plan.cost_model import from_model
    from pagecast.util.device_model import find_model, read_ahead_kb_of

    m = find_model(spec)
    maj, mi = (int(x) for x in m.device.split(":"))
    return from_model(m, read_ahead_kb_of(os.makedev(maj, mi)), f"{spec} ({m.device})")


def explain(choices) -> None:
    from pagecast.plan.planner import CANDIDATES

    extra = sorted({k for c in choices for k in c.predicted_s if k not in CANDIDATES})
    rows = []
    for c in choices:
        row = {"file": c.path, "choice": c.chosen}
        for k in [*CANDIDATES, *extra]:
            row[k] = f"{c.predicted_s[k] * 1e3:.1f}" if k in c.predicted_s else "-"
        rows.append(row)
    print("predicted I/O ms per held-out run:", file=sys.stderr)
    print(format_table(rows) if rows else "(no files)", file=sys.stderr)
    for c in choices:
        print(f"{c.path}: {c.chosen}: {c.why}", file=sys.stderr)
        if c.predicted_s:
            print(
                f"  {c.validation}; device: {c.device}, read_ahead_kb {c.read_ahead_kb}; {c.runs_using} runs used "
                f"it, {c.mean_pages_used:.0f} of {c.file_pages} pages on average",
                file=sys.stderr,
            )
        if c.objects:
            print(f"  {c.objects}", file=sys.stderr)
        for k, why in c.skipped.items():
            print(f"  {k} not priced: {why}", file=sys.stderr)


# the kernel's `random` plan turns read-ahead off for every file, which the model prices only for
# mapped files: not the same plan, so it is not compared
MODEL_KINDS = {"default": "no plan", "predicted": "the predicted plan"}


def model_dict(model, traces: list[str], measured) -> dict:
    """Per recording held out: predicted wall s (CPU + predicted I/O) and, where --measure
    ran, the measured median, for no plan, read-ahead off and the predicted plan."""
    med = measured.medians() if measured is not None else {}
    rows = []
    for kind in MODEL_KINDS:
        for t, pred in zip(traces, model.wall(kind)):
            m = med.get(kind, {}).get(t)
            rows.append(
                {
                    "candidate": kind,
                    "recording": t,
                    "predicted_s": round(pred, 6),
                    "measured_s": round(m, 6) if m is not None else None,
                }
            )
    errs = [abs(r["predicted_s"] - r["measured_s"]) / r["measured_s"] for r in rows if r["measured_s"]]
    return {
        "scale": round(model.scale, 4),
        "spans_s": [round(x, 6) for x in model.spans_s],
        "cpu_s": [round(x, 6) for x in model.cpu_s],
        "io_s": [round(x, 6) for x in model.io_s],
        "runs": rows,
        "median_abs_error": round(float(sorted(errs)[len(errs) // 2]), 4) if errs else None,
    }


def explain_runs(model, traces: list[str], measured) -> None:
    d = model_dict(model, traces, measured)
    print(
        f"run model: I/O times x {d['scale']:.2f} (fitted to the recordings' spans); per recording held out, "
        "predicted wall ms = CPU (the least over the recordings of span less I/O) + the files' I/O"
        + (", measured ms (--measure)" if measured else ""),
        file=sys.stderr,
    )
    for r in d["runs"]:
        meas = f", measured {r['measured_s'] * 1e3:.1f}" if r["measured_s"] is not None else ""
        print(
            f"  {r['candidate']} ({MODEL_KINDS[r['candidate']]}), {Path(r['recording']).name}: predicted "
            f"{r['predicted_s'] * 1e3:.1f}{meas}",
            file=sys.stderr,
        )
    if d["median_abs_error"] is not None:
        print(f"  median absolute error: {d['median_abs_error']:.0%} of the measured time", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.plan.format import write_plan
    from pagecast.plan.planner import PlannerConfig, plan_with_model

    if args.show:
        if args.traces or args.output:
            raise PagecastError("--show PLAN takes no recordings and no -o")
        return show(args.show, args.json)
    if not args.traces or not args.output:
        raise PagecastError("give recordings and -o PLAN (or --show PLAN)")
    if args.memory:
        return _memory_plan(args)

    if args.rounds is not None and (not args.measure or args.rounds < 1):
        raise PagecastError("--rounds goes with --measure and must be at least 1")
    args.rounds = args.rounds or 3
    args.candidates = _candidate_names(args.candidates, args.measure)
    warn_missing_reads("plan", args.traces)
    recordings = _recordings_to_measure(args.traces) if args.measure else None

    from pagecast.pager.pack import build_pack

    cfg = PlannerConfig(
        min_runs=args.min_runs,
        depth=args.depth,
        chunk_kib=args.chunk_kib,
        margin=args.margin,
        overlap=args.overlap,
        small_kib=args.small_kib,
        max_regret=args.max_regret,
        live_startup_s=args.live_startup_ms / 1e3,
        startup_s=args.startup_ms / 1e3,
        noise=args.noise,
        fit=not args.no_fit,
        pack_dir=Path(args.output).resolve().parent,
        pack_prefix=Path(args.output).name + ".",
        pack_writer=build_pack,
        device=_device(args.device_model),
    )
    with progress(desc="rows", unit="row") as bar:
        doc, choices, model = plan_with_model(args.traces, cfg, on_rows=bar.update)
    measured = None
    if recordings is not None:
        doc, measured = _measure(args, doc, recordings, cfg)
    write_plan(args.output, doc)
    if args.explain:
        explain(choices)
        explain_runs(model, args.traces, measured)
        if measured is not None:
            print(measured.note(), file=sys.stderr)
    if args.json:
        out = {"plan": args.output, **doc.to_dict(), "choices": [c.to_dict() for c in choices]}
        out["model"] = model_dict(model, args.traces, measured)
        if measured is not None:
            out["measured"] = measured.to_dict()
        print_json(out)
    elif measured is not None:
        print("\n".join([*measured.table(), measured.cold_note]))
        print(f"{args.output}: {len(doc.files)} files, the {measured.chosen} plan: {measured.why}")
    else:
        counts: dict[str, int] = {}
        for c in choices:
            counts[c.chosen] = counts.get(c.chosen, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        print(f"{args.output}: {len(doc.files)} files ({summary or 'none'})")
    if not args.json and doc.note.startswith("recurrence"):
        print(doc.note.splitlines()[0])
    if measured is None and not args.json and _rerunnable(args.traces):
        print(
            "chosen by predicted time only: --measure times this plan against the kernel's strategies and a "
            "whole-file stream by running the recorded commands again (only for commands safe to repeat)"
        )
    return 0


def _rerunnable(traces: list[str]) -> bool:
    """Whether every recording stores a command ``--measure`` could run again."""
    from pagecast.errors import PagecastError
    from pagecast.trace import open_trace

    try:
        return all(isinstance(open_trace(t).meta.get("command"), list) for t in traces)
    except (PagecastError, OSError):  # gone since the planner read it: a hint is not worth an error
        return False


def _candidate_names(spec: str | None, measuring: bool) -> set[str] | None:
    """``--candidates`` as a set of names (with ``default``), checked; None: every candidate."""
    from pagecast.errors import PagecastError
    from pagecast.plan.kernel_plans import KERNEL_CANDIDATES
    from pagecast.plan.measure import PREDICTED_VARIANTS

    if spec is None:
        return None
    if not measuring:
        raise PagecastError("--candidates goes with --measure")
    names = {n.strip() for n in spec.split(",") if n.strip()}
    valid = (*KERNEL_CANDIDATES, *PREDICTED_VARIANTS)
    unknown = sorted(names - set(valid))
    if unknown or not names:
        raise PagecastError(f"--candidates: unknown {', '.join(unknown) or 'empty list'} (valid: {', '.join(valid)})")
    return names | {"default"}


def _recordings_to_measure(traces: list[str]) -> "list[Recording]":  # noqa: F821 - imported lazily
    """Each recording's command and working directory, checked before any planning is done."""
    import os

    from pagecast.plan.measure import recordings_of

    recs = recordings_of(traces)
    old = [r for r in recs if not r.cwd_recorded]
    if old:
        print(
            f"pagecast plan: {len(old)} of {len(recs)} recordings store no working directory (recorded by an "
            f"older pagecast): their commands run in the current one, {os.getcwd()}",
            file=sys.stderr,
        )
    return recs


def _predicted_variants(predicted, willneed) -> dict:
    """The predicted plan as measured: beside the program, issued before it, with the
    kernel's WILLNEED for the files it leaves alone, and with every file it does not pack
    read whole beside the program."""
    import dataclasses

    from pagecast.plan.kernel_plans import with_stream, with_willneed
    from pagecast.plan.measure import PREDICTED, PREDICTED_BEFORE, PREDICTED_STREAM, PREDICTED_WILLNEED

    return {
        PREDICTED: predicted,
        PREDICTED_BEFORE: dataclasses.replace(predicted, issue="before", files=list(predicted.files)),
        PREDICTED_WILLNEED: with_willneed(predicted, willneed),
        PREDICTED_STREAM: with_stream(predicted),
    }


def _held_out_plans(args: argparse.Namespace, cfg, recordings, willneed, scratch: Path) -> dict[str, dict]:
    """Per recording, the predicted variants planned from the other recordings only: a plan
    timed on a run it learned from would be measured on its own pages. Page packs of these
    plans go to ``scratch``. ``willneed``: the kernel plan of all the recordings (a file's entry
    depends on the file alone, so it serves every fold without reading the traces again)."""
    import dataclasses

    from pagecast.plan.planner import plan_by_predicted_time

    out: dict[str, dict] = {}
    for i, rec in enumerate(recordings):
        others = [t for j, t in enumerate(args.traces) if j != i]
        c = dataclasses.replace(cfg, pack_dir=scratch / f"fold{i}")
        c.pack_dir.mkdir(parents=True, exist_ok=True)
        doc, _ = plan_by_predicted_time(others, c)
        for name, variant in _predicted_variants(doc, willneed).items():
            out.setdefault(name, {})[rec.trace] = variant
    return out


def _measure(args: argparse.Namespace, predicted, recordings, cfg) -> tuple:
    """Time the predicted plan (its variants, each planned without the recording it is timed
    on) and the kernel-equivalent plans; return the plan to write and the measurement."""
    import shutil
    import tempfile

    from pagecast.launch.binary import launcher_path
    from pagecast.launch.command import launcher_argv
    from pagecast.plan.cold_set import cold_set
    from pagecast.plan.kernel_plans import kernel_plans
    from pagecast.plan.measure import PREDICTED_VARIANTS, MeasureConfig, measure, runs_needed

    kernel = kernel_plans(args.traces)
    final = _predicted_variants(predicted, kernel["willneed"])
    scratch = Path(tempfile.mkdtemp(prefix="pagecast-plan-folds-"))
    try:
        if args.candidates is not None and not args.candidates & set(PREDICTED_VARIANTS):
            held_out, how = {}, "kernel candidates only (--candidates)"
        elif len(recordings) >= 3:
            held_out = _held_out_plans(args, cfg, recordings, kernel["willneed"], scratch)
            how = "each predicted variant planned from the other recordings (leave-one-run-out)"
        else:
            held_out = final
            how = "2 recordings: the predicted variants were timed on the runs they were planned from (optimistic)"
        candidates = {
            c: p for c, p in {**kernel, **held_out}.items() if args.candidates is None or c in args.candidates
        }
        launcher = launcher_path()
        cold = cold_set(recordings, [f.path for f in kernel["default"].files])
        total = runs_needed(candidates, recordings, args.rounds)
        with progress(total=total, desc="measured runs", unit="run") as bar:
            mcfg = MeasureConfig(
                lambda plan, prog: launcher_argv(launcher, plan, False, None, prog),
                args.rounds,
                on_run=lambda _c: bar.update(1),
                on_extra=lambda n: _grow(bar, n),
            )
            try:
                measured = measure(candidates, recordings, cold.files, mcfg)
            except BaseException:
                _remove_packs(predicted)
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    measured.cold, measured.cold_note = cold.to_dict(), cold.note()
    chosen = final.get(measured.chosen) or kernel[measured.chosen]
    if not any(f.strategy == "pack" for f in chosen.files):
        _remove_packs(predicted)
    chosen.note = "\n".join(
        [f"pagecast plan --measure over {len(recordings)} recordings ({how}): " + measured.note()]
        + ([f"predicted plan: {predicted.note}"] if predicted.note and measured.chosen in final else [])
    )
    return chosen, measured


def _grow(bar, runs: int) -> None:
    """The confirmation's runs join the progress bar's total when it starts."""
    if bar.total is not None:
        bar.total += runs
        bar.refresh()


def _remove_packs(doc) -> None:
    """Page packs the planner wrote for a plan that is not kept."""
    for f in doc.files:
        if f.strategy == "pack" and f.arg:
            Path(f.arg).unlink(missing_ok=True)


def _memory_plan(args: argparse.Namespace) -> int:
    from pagecast.errors import PagecastError
    from pagecast.plan.memory import (
        MemoryPlanConfig,
        explain_rows,
        follow_plan,
        mapped_share,
        pager_plan,
        plan_for_limit,
        read_runs,
        sequential_variants,
    )
    from pagecast.plan.memory_format import write_memory_plan
    from pagecast.util.memcg import parse_limit
    from pagecast.util.sizes import parse_size

    if args.rounds is not None and (not args.measure or args.rounds < 1):
        raise PagecastError("--rounds goes with --measure and must be at least 1")
    recordings = _recordings_to_measure(args.traces) if args.measure else None
    dev_bps, dev_lat = _memory_device(args.device_model, args.traces)
    cfg = MemoryPlanConfig(
        parse_limit(args.memory),
        parse_size(args.chunk, "--chunk") if args.chunk else None,
        parse_size(args.reserve, "--reserve") if args.reserve else None,
        args.prefetch_chunks,
        dev_bps,
        dev_lat,
        parse_size(args.stream_room, "--stream-room") if args.stream_room else None,
    )
    plan = plan_for_limit(args.traces, cfg)
    measured = None
    # --measure times it among the variants whether asked for or not
    read = read_runs(args.traces) if args.sequential or recordings is not None else None
    # --sequential alone writes ``seq``: the others are built only to be measured
    names = None if recordings is not None else ("seq",)
    seqs = sequential_variants(args.traces, cfg, plan, read, names) if read is not None else {}
    sequential = seqs.get("seq")
    if args.sequential and sequential is None:
        print(
            "pagecast plan: --sequential: nothing to advise (no keep set to lock for this limit, or the files it "
            "keeps are read with read(), which the advice does not reach); the plan as built",
            file=sys.stderr,
        )
    if recordings is not None and plan.backend != "kernel":
        follow = follow_plan(args.traces, cfg, plan)
        for_pager = pager_plan(args.traces, cfg, plan)
        mapped = mapped_share(args.traces, plan, read) >= PAGER_SHARE
        plan, measured = _measure_memory(plan, recordings, args.rounds or 3, follow, for_pager, seqs, mapped)
        plan.validation["measured"] = measured.to_dict()
    elif args.sequential and sequential is not None:
        plan = sequential
    write_memory_plan(plan, args.output)
    unseen = _no_reuse_recorded(args.traces, plan)
    if unseen:
        print(f"pagecast plan: warning: {unseen}", file=sys.stderr)
    if measured is not None and (args.explain or not args.json):
        print("\n".join([*measured.table(), f"chosen: {measured.chosen}: {measured.why}"]), file=sys.stderr)
    rows = explain_rows(plan)
    if args.explain:
        print(format_table(rows) if rows else "no file pages in the recordings", file=sys.stderr)
        v = plan.validation
        if v.get("plan_bytes") is not None:
            print(
                f"leave-one-run-out over {v['runs']} runs: LRU reads {v['lru_bytes'] >> 20} MiB, MIN "
                f"{v['min_bytes'] >> 20} MiB, the plan {v['plan_bytes'] >> 20} MiB",
                file=sys.stderr,
            )
    if args.json:
        print_json({"plan": args.output, **plan.to_dict(), "explain": rows, "warnings": [unseen] if unseen else []})
    else:
        print(f"{args.output}: {_memory_summary(plan)}")
    return 0


def _no_reuse_recorded(traces: list[str], plan) -> str | None:
    """One line where the recordings show no page read again and none was made under a limit:
    without one a page read again is still in memory, so the recording never sees the second
    read, and the plan has no pass to keep anything for."""
    from pagecast.trace import open_trace

    lru = sum(f.predicted.get("lru", 0) for f in plan.files)
    if lru > sum(f.predicted.get("min", 0) for f in plan.files) or lru <= plan.limit_bytes - plan.reserve_bytes:
        return None  # pages read again were seen; or what it reads fits beside its own memory
    try:
        if any(open_trace(t).meta.get("memory_limit") for t in traces):
            return None
    except Exception:  # noqa: BLE001 - an unreadable recording was reported while planning
        return None
    return (
        "the recordings show no page read again, and none was made under a memory limit (without one, a page "
        "read again is still in memory and leaves no trace): nothing to keep; record the program under the "
        f"limit (pagecast record --memory {plan.limit_bytes >> 20}M ...) for a plan that keeps and evicts"
    )


def _memory_summary(plan) -> str:
    """One line: what the plan keeps, follows from outside and leaves, and who applies it."""
    followed = plan.followed_bytes()
    stream = (
        f"evict after use and prefetch {followed >> 20} MiB in {plan.chunk_bytes >> 10} KiB chunks, "
        f"{plan.prefetch_chunks} ahead, "
        if followed
        else ""
    )
    rest = {
        "pager": "the rest to the userfaultfd pager's CLOCK in its budget (backend pager)",
        "kernel": "the kernel alone (backend kernel)",
    }.get(plan.backend, "the rest to the kernel (backend kernel-advice)")
    note = f": {plan.note}" if plan.note else ""
    if plan.backend == "kernel":
        return f"memory plan for {plan.limit_bytes >> 20} MiB: {rest}{note}"
    objects = "".join(f"{Path(f.path).name} read as objects of {f.objects[0] * 4} KiB, " for f in plan.object_files())
    objects += "".join(f"{Path(f.path).name} advised {f.advice}, " for f in plan.files if f.advice)
    return f"memory plan for {plan.limit_bytes >> 20} MiB: keep {plan.keep_bytes() >> 20} MiB, {stream}{objects}{rest}{note}"


# the pager variants are timed where at least this share of what a plan keeps or streams is in
# files the program maps (the rest it reads with read(), which only the kernel serves)
PAGER_SHARE = 0.25


def _measure_memory(
    plan, recordings, rounds: int, follow=None, for_pager=None, sequential=None, mapped: bool = True
) -> tuple:
    """Time the memory plan's variants (and ``follow``, the plan in chunks the controller can
    follow, if one was built; the pager's variants from ``for_pager``, the plan rebuilt for
    the pager, if one was; ``sequential``, the keep sets for files advised sequential by
    variant name, if any were) against the kernel alone under the limit. ``mapped``: whether
    the program maps enough of what the plan keeps for the pager to serve (``PAGER_SHARE``)."""
    from pagecast.errors import PagecastError
    from pagecast.pager.runtime import probe
    from pagecast.plan.measure import MeasureConfig
    from pagecast.plan.memory_measure import STOP_SLOWER, measure_memory_plan, variants

    def argv(plan_path: str | None, prog: list[str]) -> list[str]:
        with_plan = ["--plan", plan_path] if plan_path else []
        return [sys.executable, "-m", "pagecast", "run", "--memory", str(plan.limit_bytes), *with_plan, "--", *prog]

    try:
        probe()
        no_pager = "" if mapped else "most of what the plan keeps is read with read(), which the pager does not serve"
    except PagecastError as e:
        no_pager = str(e)
    if no_pager:
        print(f"pagecast plan: the pager variants are not measured ({no_pager})", file=sys.stderr)
    kinds = len(variants(plan, not no_pager, follow, for_pager, sequential))  # what measure_memory_plan times
    total = kinds * len(recordings) * rounds
    with progress(total=total, desc="measured runs under the limit", unit="run") as bar:
        cfg = MeasureConfig(
            argv, rounds, on_run=lambda _c: bar.update(1), on_extra=lambda n: _grow(bar, n), stop_slower=STOP_SLOWER
        )
        return measure_memory_plan(
            plan, recordings, cfg, pager=not no_pager, follow=follow, for_pager=for_pager, sequential=sequential
        )


def _show_memory(path: str, as_json: bool) -> int:
    from pagecast.plan.memory import explain_rows
    from pagecast.plan.memory_format import read_memory_plan

    plan = read_memory_plan(path)
    if as_json:
        print_json({"plan": path, **plan.to_dict()})
        return 0
    rows = explain_rows(plan)
    print(format_table(rows) if rows else f"{path}: a memory plan with no files")
    print(
        f"limit {plan.limit_bytes >> 20} MiB, chunks of {plan.chunk_bytes >> 10} KiB, {plan.prefetch_chunks} "
        f"prefetched ahead, reserve {plan.reserve_bytes >> 20} MiB, backend {plan.backend}"
    )
    for f in plan.files:
        if f.advice:
            where = "the program's opens and mappings of it"
            if f.advice_span:
                a, n = f.advice_span
                where = f"its mappings' chunks {a}-{a + n - 1}, the rest random; its opens"
            print(f"{f.path}: advised {f.advice} ({where})")
    return 0


def _memory_device(spec: str | None, traces: list[str]) -> tuple[float, float]:
    """(bytes/s, latency s) for the prefetch distance: --device-model, else the stored
    calibration of the device of the largest file the recordings used, else a conservative disk."""
    from pagecast.util.device_model import find_model, load_model, model_path

    if spec:
        m = find_model(spec)
        return m.seq_read_bytes_per_s, m.read_latency_ns / 1e9
    from pagecast.errors import PagecastError
    from pagecast.trace import open_trace

    sizes: dict[str, int] = {}
    for t in traces:
        try:
            for r in open_trace(t).regions:
                if r.kind == "file" and r.path:
                    sizes[r.path] = max(sizes.get(r.path, 0), r.length)
        except (PagecastError, OSError):
            continue
    for path in sorted(sizes, key=lambda p: -sizes[p]):
        try:
            stored = model_path(path)
            if stored.exists():
                m = load_model(stored)
                return m.seq_read_bytes_per_s, m.read_latency_ns / 1e9
            return 200e6, 0.002
        except (PagecastError, OSError):
            continue
    return 200e6, 0.002
