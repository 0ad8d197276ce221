"""`trnsim plan train|serve|compare|search`: time, memory and dollars of a training or serving job.

    trnsim plan train --model llama-3.1-8b --instance trn2.48xlarge --nodes 4 --tp 8
    trnsim plan serve --model llama-3.3-70b --tpot-ms 50          # inf2, trn1, trn2 side by side
    trnsim plan compare --model llama-3.1-8b --train-tokens 1e12
    trnsim plan search --model llama-3.1-70b --instance trn2.48xlarge --nodes 32 --top 10

Per-op times come from trnsim.cost, collectives from trnsim.system; prices from the catalog with
their sources (unknown prices stay unknown: give --price). See docs/planner.md.
"""

from __future__ import annotations

import argparse
import json

from rich.progress import Progress
from rich.table import Table

from trnsim.cli import amount, count
from trnsim.cli.specs import console
from trnsim.errors import TrnsimError
from trnsim.planner import economics, memory, model, plots, serving, training
from trnsim.planner.search import RANKINGS, search

GIB = 2**30
SERVE_INSTANCES = ("inf2.48xlarge", "trn1.32xlarge", "trn2.48xlarge")


def _money(value: float | None) -> str:
    return "unknown (--price)" if value is None else f"${value:,.2f}"


def _fill_in_price(args, instance: str) -> float | None:
    """--price for an instance the catalog has no price for; a catalog price stays."""
    return args.price if training.machine(instance).spec.usd_per_hour is None else None


def _train_plan(args) -> training.TrainPlan:
    return training.TrainPlan(tp=args.tp, pp=args.pp, dp=args.dp or 0, ep=args.ep,
                              microbatch=args.microbatch, global_batch=args.global_batch, seq=args.seq,
                              zero=args.zero, recompute=args.recompute, precision=args.precision,
                              interleave=args.interleave)


def run_train(args) -> int:
    plan = _train_plan(args)
    if not plan.dp:
        mach = training.machine(args.instance)
        dp = max(1, args.nodes * mach.ranks // (plan.tp * plan.pp))
        plan = training.TrainPlan(**{**plan.__dict__, "dp": dp})
    result = training.train(args.model, args.instance, args.nodes, plan, price=args.price)
    if args.plot:
        plots.breakdowns(result, args.plot)
    budget = _token_budget(args.train_tokens, result) if args.train_tokens else None
    if args.json:
        found = result.as_dict()
        if budget is not None:
            found["train_tokens"] = {"tokens": args.train_tokens, "days": budget[0], "usd": budget[1]}
        print(json.dumps(found, indent=2, default=str))
        return 0
    out = console()
    out.print(f"{result.model} on {result.nodes} x {result.instance}: {result.plan.label()}")
    table = Table()
    table.add_column("Memory per rank")
    table.add_column("GiB", justify="right")
    for kind, value in result.memory.items():
        table.add_row(kind, f"{value / GIB:.2f}")
    verdict = "fits" if result.fits else "DOES NOT FIT"
    total = sum(result.memory.values())
    table.add_row(f"total ({verdict})", f"{total / GIB:.2f} of {result.capacity / GIB:.1f}")
    out.print(table)
    steps = Table(title="Step time", title_justify="left")
    steps.add_column("Part")
    steps.add_column("s", justify="right")
    for part, seconds in result.step.items():
        steps.add_row(part, f"{seconds:.3f}")
    steps.add_row("step", f"{result.step_s:.3f}")
    out.print(steps)
    out.print(f"{result.sequences_per_s:,.1f} sequences/s, {result.tokens_per_s:,.0f} tokens/s, "
              f"MFU {100 * result.mfu:.1f}%, HFU {100 * result.hfu:.1f}%")
    out.print(f"{_money(result.usd_per_hour)}/h, {_money(result.usd_per_step)}/step, "
              f"{_money(result.usd_per_million_tokens())} per million tokens; price: {result.price_source}")
    if budget is not None:
        out.print(f"{args.train_tokens:.3g} tokens: {budget[0]:,.1f} days, {_money(budget[1])}")
    return 0


def _token_budget(tokens: float, result: training.TrainResult) -> tuple[float, float | None]:
    """(days, dollars) to train on `tokens` at the plan's rate (dollars None without a price)."""
    days = tokens / result.tokens_per_s / 86400
    return days, None if result.usd_per_hour is None else result.usd_per_hour * days * 24


def _serve_candidates(args, instance: str) -> list[serving.ServePlan]:
    """The plans tried on one instance: the given tp and batch, or the whole instance and a few batches."""
    ranks = training.machine(instance).ranks
    tps = [args.tp] if args.tp else [ranks]
    # a --concurrency above --batch is the plan's to refuse; without --batch, batches that hold it
    batches = [args.batch] if args.batch else sorted({max(b, args.concurrency or 1) for b in (1, 8, 32)})
    weights = [args.weights] if args.weights else ["bf16", "int8"]
    return [serving.ServePlan(tp=tp, concurrency=args.concurrency or batch, compiled_batch=batch,
                              seq_in=args.seq_in, seq_out=args.seq_out, weights=w)
            for tp in tps for batch in batches for w in weights]


def _best_serving(args, instance: str, progress) -> tuple[serving.ServeResult | None, str]:
    """The cheapest plan per million tokens that fits and meets --tpot-ms."""
    found = []
    for plan in _serve_candidates(args, instance):
        try:
            result = serving.serve(args.model, instance, plan, price=_fill_in_price(args, instance))
        except TrnsimError as error:
            return None, str(error).splitlines()[0]
        progress()
        if result.fits and (not args.tpot_ms or result.tpot_s * 1e3 <= args.tpot_ms):
            found.append(result)
    if not found:
        return None, f"no plan fits in memory{' at that latency' if args.tpot_ms else ''}"
    found.sort(key=lambda r: (r.usd_per_million_tokens() or 0, -r.tokens_per_s_per_instance))
    return found[0], ""


def run_serve(args) -> int:
    """Exit code 1 when no instance has a plan (each row says why)."""
    instances = args.instance or list(SERVE_INSTANCES)
    for instance in instances:
        training.machine(instance)  # an unknown name is the command's error, not a row of its table
    serving.check_model(model(args.model), args.seq_in + args.seq_out)  # so is a model it cannot serve
    rows = []
    with Progress(console=console(stderr=True), transient=True, disable=args.json) as bar:
        task = bar.add_task("plans", total=sum(len(_serve_candidates(args, i)) for i in instances))
        for instance in instances:
            rows.append((instance, *_best_serving(args, instance, lambda: bar.advance(task))))
    planned = 0 if any(result is not None for _, result, _ in rows) else 1
    if args.json:
        found = [{"instance": i, "result": r.as_dict() if r else None, "note": n} for i, r, n in rows]
        print(json.dumps(found, indent=2, default=str))
        return planned
    latency = f" at TPOT <= {args.tpot_ms} ms" if args.tpot_ms else ""
    table = Table(title=f"Serving {args.model}, {args.seq_in} in / {args.seq_out} out{latency}",
                  title_justify="left")
    texts = ("Instance", "Plan", "Price source")
    for column in ("Instance", "Plan", "TTFT ms", "TPOT ms", "tok/s/instance", "$/M tokens", "Price source"):
        table.add_column(column, justify="left" if column in texts else "right")
    for instance, result, note in rows:
        if result is None:
            table.add_row(instance, note, "", "", "", "", "")
            continue
        table.add_row(instance, result.plan.label(), f"{result.ttft_s * 1e3:.1f}",
                      f"{result.tpot_s * 1e3:.2f}", f"{result.tokens_per_s_per_instance:,.0f}",
                      _money(result.usd_per_million_tokens()),
                      result.price_source)
    console().print(table)
    return planned


def run_compare(args) -> int:
    instances = args.instance or list(economics.COMPARE_TRAIN)
    jobs = []
    with Progress(console=console(stderr=True), transient=True, disable=args.json) as bar:
        for instance in instances:
            task = bar.add_task(instance, total=None)
            nodes = args.nodes or max(1, args.chips // training.machine(instance).spec.accelerators)
            def progress(done, total, task=task):
                bar.update(task, completed=done, total=total)
            jobs.append(economics.training_job(
                args.model, instance, nodes, args.train_tokens, global_batch=args.global_batch, seq=args.seq,
                price=_fill_in_price(args, instance), progress=progress))
    moves = _break_evens(jobs, args) if args.monthly_spend else []
    planned = 0 if any(job.days is not None for job in jobs) else 1  # exit code 1: no instance has a plan
    if args.json:
        found = [job.__dict__ for job in jobs]
        print(json.dumps({"jobs": found, "break_even": moves} if args.monthly_spend else found, indent=2,
                         default=str))
        return planned
    table = Table(title=f"Training {args.model} on {args.train_tokens:.3g} tokens (fastest plan that fits)",
                  title_justify="left")
    for column in ("Instance", "Nodes", "Plan", "tokens/s", "MFU", "Days", "$/h", "Total $", "Price source"):
        table.add_column(column)
    for job in jobs:
        if job.days is None:  # no plan fits: the row says why
            table.add_row(job.instance, str(job.nodes), job.note, *["-"] * 5, "")
            continue
        table.add_row(job.instance, str(job.nodes), job.plan, f"{job.tokens_per_s:,.0f}",
                      f"{100 * job.mfu:.1f}%", f"{job.days:,.1f}", _money(job.usd_per_hour), _money(job.usd),
                      job.price_source)
    out = console()
    out.print(table)
    for move in moves:
        out.print(_said(move, args))
    return planned


def _break_evens(jobs, args) -> list[dict]:
    """Moving --monthly-spend from the first job's instance to each other one: the share saved and
    the months to pay back --engineering-cost (None where a price is missing or nothing is saved)."""
    current, moves = jobs[0], []
    for job in jobs[1:]:
        saved = economics.savings(current.usd, job.usd)
        months = (economics.break_even_months(args.monthly_spend, saved, args.engineering_cost)
                  if saved is not None and saved > 0 else None)
        moves.append({"from": current.instance, "to": job.instance, "saved_fraction": saved,
                      "saved_usd_per_month": None if saved is None else args.monthly_spend * saved,
                      "break_even_months": months,
                      "unplanned": [j.instance for j in (current, job) if j.days is None],
                      "unpriced": [j.instance for j in (current, job)
                                   if j.days is not None and j.usd is None]})
    return moves


def _said(move: dict, args) -> str:
    head, saved = f"{move['from']} -> {move['to']}", move["saved_fraction"]
    if move["unplanned"]:
        return f"{head}: no plan fits on {' and '.join(move['unplanned'])}, no break-even"
    if saved is None:
        return f"{head}: no price for {' and '.join(move['unpriced'])}, no break-even"
    if saved == 0:
        return f"{head}: the same cost; nothing to pay back"
    if saved < 0:
        return f"{head}: costs {-100 * saved:.0f}% more; never pays back"
    return (f"{head}: saves {100 * saved:.0f}% (${move['saved_usd_per_month']:,.0f}/month); pays back "
            f"${args.engineering_cost:,.0f} in {move['break_even_months']:,.1f} months")


def run_search(args) -> int:
    with Progress(console=console(stderr=True), transient=True, disable=args.json) as bar:
        task = bar.add_task("timing plans that fit", total=None)
        found = search(args.model, args.instance, args.nodes, global_batch=args.global_batch, seq=args.seq,
                       precision=args.precision, rank_by=args.rank_by, price=args.price,
                       progress=lambda done, total: bar.update(task, completed=done, total=total))
    if args.plot:
        plots.pareto(found, args.plot)
    if args.json:
        print(json.dumps({"enumerated": found.enumerated, "infeasible": found.infeasible,
                          "seconds": found.seconds, "notes": found.notes,
                          "plans": [r.as_dict() for r in found.plans[:args.top]]}, indent=2, default=str))
        return 0
    out = console()
    out.print(f"{found.enumerated} layouts, {found.infeasible} over memory, {len(found.plans)} timed "
              f"in {found.seconds:.1f} s ({found.plans_per_s:,.0f} plans/s)")
    for note in found.notes:
        out.print(note)
    table = Table(title=f"{found.model} on {found.nodes} x {found.instance}, best by {args.rank_by}",
                  title_justify="left")
    for column in ("Plan", "Step s", "tokens/s", "MFU", "GiB/rank", "$/step"):
        table.add_column(column, justify="left" if column == "Plan" else "right")
    for result in found.plans[:args.top]:
        table.add_row(result.plan.label(), f"{result.step_s:.2f}", f"{result.tokens_per_s:,.0f}",
                      f"{100 * result.mfu:.1f}%", f"{sum(result.memory.values()) / GIB:.1f}",
                      _money(result.usd_per_step))
    out.print(table)
    return 0


def _common(parser, instance_nargs=None) -> None:
    parser.add_argument("--model", required=True, help="a preset (llama-3.1-8b) or a config.json path")
    if instance_nargs:
        parser.add_argument("--instance", nargs=instance_nargs,
                            help="instance names (default: a comparison set)")
    else:
        parser.add_argument("--instance", default="trn2.48xlarge")
    if instance_nargs:
        parser.add_argument("--price", type=amount(), help="$ per instance-hour for instances the catalog "
                            "has no price for")
    else:
        parser.add_argument("--price", type=amount(), help="$ per instance-hour (instead of the catalog's "
                            "on-demand price)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _training_options(parser) -> None:
    parser.add_argument("--nodes", type=count(), default=1)
    parser.add_argument("--global-batch", type=count(), default=1024, help="sequences per step")
    parser.add_argument("--seq", type=count(0), default=0, help="sequence length (default: the model's)")
    parser.add_argument("--precision", default="bf16+fp32opt", choices=list(memory.RECIPES))


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="time, memory and dollars of training and serving jobs",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="plan_command", metavar="train|serve|compare|search", required=True)
    train = commands.add_parser("train", help="one training plan: memory, step time, MFU, dollars")
    _common(train)
    _training_options(train)
    for name, default in (("tp", 1), ("pp", 1), ("dp", 0), ("ep", 1), ("microbatch", 1), ("interleave", 1)):
        train.add_argument(f"--{name}", type=count(default), default=default)  # dp 0: all ranks left
    train.add_argument("--zero", default="zero1", choices=memory.ZERO)
    train.add_argument("--recompute", default="selective", choices=memory.RECOMPUTE)
    train.add_argument("--train-tokens", type=amount(), help="also print time and $ for this many tokens")
    train.add_argument("--plot", help="write memory and step-time breakdowns to this image file")
    train.set_defaults(run=run_train)
    serve = commands.add_parser("serve", help="TTFT, TPOT and $ per million tokens per instance")
    _common(serve, instance_nargs="+")
    for name, default in (("tp", 0), ("batch", 0), ("concurrency", 0), ("seq-in", 128), ("seq-out", 128)):
        serve.add_argument(f"--{name}", type=count(min(default, 1)), default=default)  # 0: tried in turn
    serve.add_argument("--weights", choices=list(serving.WEIGHTS))
    serve.add_argument("--tpot-ms", type=amount(), help="latency target: time per output token, ms")
    serve.set_defaults(run=run_serve)
    compare = commands.add_parser("compare", help="the same training job on Trn1/Trn2/Trn3/GPU")
    _common(compare, instance_nargs="+")
    _training_options(compare)
    compare.add_argument("--chips", type=count(), default=64,
                         help="accelerators per instance kind: as many whole instances as hold at most "
                              "this many, at least one (sets --nodes; the table's Nodes column shows it)")
    compare.set_defaults(nodes=0)
    compare.add_argument("--train-tokens", type=amount(), required=True)
    compare.add_argument("--monthly-spend", type=amount(), help="$ per month now spent on the first instance")
    compare.add_argument("--engineering-cost", type=amount(zero=True), default=0.0,
                         help="one-off $ cost of moving")
    compare.set_defaults(run=run_compare)
    find = commands.add_parser("search", help="every plan that fits, ranked")
    _common(find)
    _training_options(find)
    find.add_argument("--rank-by", default="time", choices=list(RANKINGS))
    find.add_argument("--top", type=count(), default=10)
    find.add_argument("--plot", help="write the cost-vs-time Pareto front to this image file")
    find.set_defaults(run=run_search)
