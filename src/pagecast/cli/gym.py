"""``pagecast gym``: generate trace pairs, train a PPO placement agent, evaluate policies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pagecast.cli._common import add_json_flag, format_table, print_json
from pagecast.cli._options import add_deprecated_alias
from pagecast.errors import PagecastError

POLICIES = ["all-slow", "all-fast", "random", "hottest-last", "oracle-next"]


def _baseline_name(text: str) -> str:
    """A baseline of ``POLICIES`` or ``evict:SPEC`` (the spec is checked when it is built)."""
    if text in POLICIES or (text.startswith("evict:") and len(text) > len("evict:")):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(POLICIES)} or evict:SPEC)")


ARCHS = ["chunkwise", "mlp"]  # the PPO agent's network (gym train --arch)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gym",
        help="tiered-memory placement environment: gen, train, eval, play",
        description=(
            "The Gymnasium environment pagecast/TieredPlacement-v0 plays a trace window by window; an "
            "agent chooses which chunks of the data sit in a small fast tier, scored by the "
            "differential-tracing estimator minus migration cost. A TRACE argument is SLOW.parquet,FAST.parquet "
            "(a trace pair), one trace (latency cost model), or a directory of *.slow.parquet/*.fast.parquet pairs."
        ),
    )
    gs = p.add_subparsers(dest="gym_command", metavar="SUBCOMMAND")

    _register_gen(gs)
    _register_train(gs)
    _register_eval(gs)
    _register_play(gs)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _register_gen(gs: argparse._SubParsersAction) -> None:
    """gym gen: synthetic traces."""
    g = gs.add_parser(
        "gen",
        help="write slow/fast trace pairs of a program whose hot set moves (cost model)",
        description="Write NAME-SEED.slow.parquet / NAME-SEED.fast.parquet pairs. There is no two-tier "
        "machine here: the pair comes from one access sequence timed with each tier's latency.",
    )
    g.add_argument("out_dir", type=Path)
    g.add_argument("--seeds", default="0-7", help="seed list, e.g. 0-7 or 1,5,9 (default 0-7)")
    g.add_argument("--name", default="hotset")
    g.add_argument("--pages", type=int, default=4096)
    g.add_argument("--accesses", type=int, default=400_000)
    g.add_argument("--hot-fraction", type=float, default=0.125)
    g.add_argument("--hot-share", type=float, default=0.9)
    g.add_argument("--phase-accesses", type=int, default=40_000, help="accesses between hot set moves")
    g.add_argument(
        "--drift",
        type=float,
        default=0.0,
        help="pages per access the hot set slides within a phase (default 0: it only jumps)",
    )
    g.add_argument("--slow-ns", type=float, default=120.0)
    g.add_argument("--fast-ns", type=float, default=40.0)
    add_json_flag(g)
    g.set_defaults(func=run_gen)


def _register_train(gs: argparse._SubParsersAction) -> None:
    """gym train: an agent."""
    t = gs.add_parser(
        "train",
        help="train a PPO agent (stable-baselines3) on traces",
        description="Train PPO on the given traces (one trace per episode, picked at random) and "
        "write the agent directory; --eval scores it on held-out traces afterwards.",
    )
    t.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="SLOW.parquet,FAST.parquet pair, one trace (cost model), or a directory of *.slow/*.fast.parquet pairs",
    )
    t.add_argument("-o", "--out", type=Path, required=True, help="agent directory to write (ppo.zip + config.json)")
    _env_args(t)
    t.add_argument("--timesteps", type=int, default=100_000, help="PPO environment steps (default 100000)")
    t.add_argument(
        "--arch",
        choices=ARCHS,
        default="chunkwise",
        help="the agent's network: chunkwise, a shared per-chunk network (default); mlp, SB3's MlpPolicy",
    )
    add_deprecated_alias(t, "--policy", "--arch", "arch", choices=ARCHS)
    t.add_argument("--n-envs", type=int, default=4, help="environment copies stepped per rollout (4)")
    t.add_argument("--seed", type=int, default=0, help="seed of PPO and of the environments (0)")
    t.add_argument("--eval", nargs="*", default=None, metavar="TRACE", help="evaluate on these traces afterwards")
    add_json_flag(t)
    t.set_defaults(func=run_train)


def _register_eval(gs: argparse._SubParsersAction) -> None:
    """gym eval: agents against baselines."""
    e = gs.add_parser(
        "eval",
        help="score baselines (and a trained agent) on traces; prints a table",
        description="Play every trace with each baseline (and --agent) and print estimated time "
        "incl. migrations, speedup over all-slow and the share of the next-window "
        "oracle's saving; the mean over traces unless --per-trace.",
    )
    e.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="SLOW.parquet,FAST.parquet pair, one trace (cost model), or a directory of *.slow/*.fast.parquet pairs",
    )
    e.add_argument("--agent", type=Path, default=None, help="trained agent directory (its env settings are used)")
    e.add_argument(
        "--baselines",
        default=",".join(POLICIES),
        help=f"baselines to run, comma-separated (default {','.join(POLICIES)}); also evict:SPEC, "
        "a keyed eviction as a placement (evict:reuse:trace=T.parquet, evict:learned:model=ev.pt)",
    )
    add_deprecated_alias(e, "--policies", "--baselines", "baselines")
    e.add_argument("--per-trace", action="store_true", help="one row per trace and policy, not the mean")
    _env_args(e)
    add_json_flag(e)
    e.set_defaults(func=run_eval)


def _register_play(gs: argparse._SubParsersAction) -> None:
    """gym play: one episode, step by step."""
    pl = gs.add_parser("play", help="play one trace with one policy and render every window")
    pl.add_argument("trace", metavar="TRACE", help="SLOW.parquet,FAST.parquet pair or one trace")
    pl.add_argument(
        "--baseline",
        default="hottest-last",
        type=_baseline_name,
        metavar="NAME",
        help=f"the placement baseline to play: {', '.join(POLICIES)} or evict:SPEC, a keyed eviction "
        "(evict:learned:model=ev.pt, evict:reuse:trace=T.parquet, evict:min, evict:lru) (default %(default)s)",
    )
    add_deprecated_alias(pl, "--policy", "--baseline", "baseline", type=_baseline_name)
    pl.add_argument("--every", type=int, default=1, help="render every N-th window")
    _env_args(pl)
    pl.set_defaults(func=run_play)


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunks", type=int, default=32, help="chunks the touched pages are grouped into (32)")
    p.add_argument("--history", type=int, default=2, help="past windows in the observation (2)")
    p.add_argument("--capacity", type=float, default=0.125, help="fast tier size, fraction of touched pages (0.125)")
    p.add_argument("--window", type=int, default=10_000, help="demand rows per window (10000)")
    p.add_argument(
        "--window-mode",
        choices=["accesses", "phases"],
        default="accesses",
        help="windows of --window demand rows (default), or one window per phase/kernel",
    )
    p.add_argument("--migrate-ns-per-byte", type=float, default=0.1, help="migration cost, ns per byte (0.1 = 10 GB/s)")
    p.add_argument(
        "--action-mode",
        choices=["target", "delta"],
        default="target",
        help="target: MultiBinary wanted set (default); delta: keep/promote/demote per chunk",
    )
    p.add_argument("--slow-ns", type=float, default=100.0, help="single traces: slow tier ns per access")
    p.add_argument("--fast-ns", type=float, default=30.0, help="single traces: fast tier ns per access")


def _env_config(args: argparse.Namespace):
    from pagecast.gym.env import EnvConfig
    from pagecast.gym.estimator import CostModel, WindowConfig

    return EnvConfig(
        n_chunks=args.chunks,
        history=args.history,
        capacity=args.capacity,
        migrate_ns_per_byte=args.migrate_ns_per_byte,
        action_mode=args.action_mode,
        window=WindowConfig(args.window_mode, args.window),
        cost=CostModel(args.slow_ns, args.fast_ns),
    )


def parse_trace_specs(items: list[str]) -> list[Any]:
    specs: list[Any] = []
    for item in items:
        if "," in item:
            a, b = item.split(",", 1)
            for x in (a, b):
                if not Path(x).is_file():
                    raise PagecastError("no such trace file", path=x)
            specs.append((a, b))
        elif Path(item).is_dir():
            slows = sorted(Path(item).glob("*.slow.parquet"))
            if not slows:
                raise PagecastError("directory holds no *.slow.parquet traces", path=item)
            for s in slows:
                f = s.with_name(s.name.removesuffix(".slow.parquet") + ".fast.parquet")
                if not f.exists():
                    raise PagecastError(f"no matching fast trace {f.name}", path=s)
                specs.append((str(s), str(f)))
        elif Path(item).is_file():
            specs.append(item)
        else:
            raise PagecastError("no such trace file or directory", path=item)
    return specs


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise PagecastError(f"bad seed list {text!r} (e.g. 0-7 or 1,5,9)") from None
    return out


def run_gen(args: argparse.Namespace) -> int:
    from pagecast.cli._common import config_from_args, progress
    from pagecast.gym.tracegen import HotsetConfig, write_pair

    seeds = _seeds(args.seeds)
    written = []
    with progress(len(seeds), "traces", "pair") as bar:
        for s in seeds:
            cfg = config_from_args(HotsetConfig, args, seed=s)
            a, b = write_pair(
                cfg, args.out_dir / f"{args.name}-{s}.slow.parquet", args.out_dir / f"{args.name}-{s}.fast.parquet"
            )
            written.append({"seed": s, "slow": str(a), "fast": str(b)})
            bar.update(1)
    if args.json:
        print_json(written)
    else:
        print(f"wrote {len(written)} trace pairs to {args.out_dir}")
    return 0


def _print_rows(rows: list[dict[str, Any]], per_trace: bool, as_json: bool) -> None:
    from pagecast.gym.agent import summarise

    if as_json:
        print_json({"per_trace": rows, "mean": summarise(rows)})
        return
    print(format_table(rows if per_trace else summarise(rows)))


def run_train(args: argparse.Namespace) -> int:
    from pagecast.gym.agent import PPOConfig, evaluate, load_agent, train

    specs = parse_trace_specs(args.traces)
    cfg = _env_config(args)
    print(f"training PPO for {args.timesteps:,} steps on {len(specs)} traces ...", file=sys.stderr)
    ppo = PPOConfig(timesteps=args.timesteps, n_envs=args.n_envs, seed=args.seed, policy=args.arch)
    out = train(specs, args.out, cfg, ppo, progress=True)
    print(f"agent written to {out}", file=sys.stderr)
    if args.eval:
        model, cfg = load_agent(out)
        _print_rows(evaluate(parse_trace_specs(args.eval), cfg, model=model), False, args.json)
    elif args.json:
        print_json({"agent": str(out)})
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from pagecast.gym.agent import evaluate, load_agent
    from pagecast.gym.baselines import split_baselines

    policies = split_baselines(args.baselines)
    bad = [p for p in policies if p not in POLICIES and not p.startswith("evict:")]
    if bad:
        raise PagecastError(f"unknown policies {bad} (valid: {', '.join(POLICIES)})")
    model = None
    cfg = _env_config(args)
    if args.agent is not None:
        model, cfg = load_agent(args.agent)
    rows = evaluate(parse_trace_specs(args.traces), cfg, model=model, policies=policies)
    _print_rows(rows, args.per_trace, args.json)
    return 0


def run_play(args: argparse.Namespace) -> int:
    from pagecast.gym.baselines import make_baseline, to_action
    from pagecast.gym.env import TieredPlacementEnv

    policy = make_baseline(args.baseline)
    env = TieredPlacementEnv(parse_trace_specs([args.trace]), _env_config(args), render_mode="ansi")
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        obs, _, done, _, _ = env.step(to_action(env, policy(env, obs)))
        if env.t % max(args.every, 1) == 0 or done:
            print(env.render())
    return 0
