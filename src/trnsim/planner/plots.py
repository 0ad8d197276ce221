"""Pictures of plans (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

from trnsim.errors import ConfigError
from trnsim.system.pictures import save

GIB = 2**30


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def breakdowns(result, path: str) -> None:
    """Memory per rank and step time of one training plan, as two stacked bars."""
    plt = _pyplot()
    figure, (mem, step) = plt.subplots(1, 2, figsize=(9, 4))
    panels = ((mem, result.memory, GIB, "GiB per rank"), (step, result.step, 1, "seconds"))
    for axis, parts, scale, unit in panels:
        bottom = 0.0
        for name, value in parts.items():
            axis.bar([0], [value / scale], bottom=bottom, label=name)
            bottom += value / scale
        axis.set_ylabel(unit)
        axis.set_xticks([])
        axis.legend(fontsize=7)
    mem.axhline(result.capacity / GIB, color="black", linestyle="--", linewidth=1)
    title = f"{result.model} on {result.nodes} x {result.instance}: {result.plan.label()}"
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    try:
        save(figure, path)
    finally:
        plt.close(figure)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (time, cost), by time."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    front, best_cost = [], float("inf")
    for index in order:
        if points[index][1] < best_cost:
            front.append(index)
            best_cost = points[index][1]
    return front


def pareto(found, path: str) -> None:
    """Cost per step against step time of every plan of a search, its Pareto front joined."""
    if any(r.usd_per_step is None for r in found.plans):
        raise ConfigError(f"the Pareto plot needs {found.instance}'s price, which the catalog lacks",
                          hint="give --price DOLLARS_PER_HOUR")
    plt = _pyplot()
    points = [(r.step_s, r.usd_per_step) for r in found.plans]
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.scatter([p[0] for p in points], [p[1] for p in points], s=6, alpha=0.5)
    front = [points[i] for i in pareto_front(points)]
    axis.plot([p[0] for p in front], [p[1] for p in front], color="red", marker="o", markersize=3)
    axis.set_xlabel("step time (s)")
    axis.set_ylabel("$ per step")
    axis.set_title(f"{found.model} on {found.nodes} x {found.instance}", fontsize=9)
    figure.tight_layout()
    try:
        save(figure, path)
    finally:
        plt.close(figure)
