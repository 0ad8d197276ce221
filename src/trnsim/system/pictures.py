"""Pictures of the multi-chip model (matplotlib, written to a file): bus bandwidth against size for
several rank counts, and a system's chip network."""

from __future__ import annotations

import io
from pathlib import Path

from trnsim.errors import ConfigError
from trnsim.hardware.specs import FabricSpec
from trnsim.system.topology import Machine, chip_group
from trnsim.system.topology import fabric as fabric_named
from trnsim.timing.perfetto import write_atomic


def _pyplot():
    """pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure, path: str | Path, dpi: int | None = None) -> Path:
    """Write a matplotlib figure in the format its file name ends in (an unknown or missing one is
    refused) and all at once (`write_atomic`): a failure leaves no half-written picture."""
    path = Path(path)
    formats = figure.canvas.get_supported_filetypes()
    suffix = path.suffix.lstrip(".").lower()
    if suffix not in formats:
        raise ConfigError(f"cannot write a picture to {str(path)!r}: its name must end in one of "
                          f".{', .'.join(sorted(formats))}")
    image = io.BytesIO()
    figure.savefig(image, dpi=dpi, format=suffix)
    return write_atomic(path, image.getvalue())


def busbw_plot(series: dict[str, list[tuple[int, float]]], title: str, path: str | Path) -> Path:
    """Predicted busbw (GB/s) against size, one line per labelled series of (size, busbw) points,
    saved to `path`. The caller computes the points (nccom draws its table's rows), so the picture
    shows exactly what was computed."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        axes.plot([size for size, _ in points], [busbw for _, busbw in points], marker="o", markersize=3,
                  label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("size (bytes)")
    axes.set_ylabel("busbw (GB/s), predicted")
    axes.set_title(title, fontsize=9)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    try:
        return save(figure, path, dpi=120)
    finally:
        plt.close(figure)


def _rate(bytes_per_s: float) -> str:
    """A bandwidth in GB/s, rounded to 3 significant figures (51.5396... -> 51.5)."""
    return f"{float(f'{bytes_per_s / 1e9:.3g}'):g} GB/s"


def topology_picture(system: str | FabricSpec, path: str | Path) -> Path:
    """One node's chips with their links (a torus drawn with wrap-around arcs, or a switch),
    annotated with the per-direction link rate, the nodes of the system and EFA. `system` is a
    name in the default catalog or a FabricSpec (from an edited copy of the data)."""
    fabric = system if isinstance(system, FabricSpec) else fabric_named(system)
    machine = Machine(fabric, fabric.default_lnc)
    plt = _pyplot()
    from matplotlib.patches import FancyArrowPatch

    figure, axes = plt.subplots(figsize=(6, 6))
    chips = fabric.chips_per_node
    if fabric.layout == "torus":
        dims = fabric.torus_dims  # a ring (inf2: one dim) is drawn as a torus of one row
        rows, cols = dims if len(dims) == 2 else (1, chips)
        position = {i: (i % cols, rows - 1 - i // cols) for i in range(chips)}
        for i in range(chips):
            x, y = position[i]
            for j in {i // cols * cols + (i + 1) % cols, (i + cols) % chips} - {i}:
                u, v = position[j]
                wraps = abs(u - x) > 1 or abs(v - y) > 1
                axes.add_patch(FancyArrowPatch((x, y), (u, v), arrowstyle="-", zorder=1, alpha=0.6,
                                               connectionstyle=f"arc3,rad={0.25 if wraps else 0}",
                                               color="tab:orange" if wraps else "tab:blue"))
    else:
        position = {i: (i % 4, -(i // 4)) for i in range(chips)}
        axes.scatter([1.5], [0.8], s=2600, marker="s", color="tab:gray", zorder=2)
        axes.annotate("Neuron\nSwitch", (1.5, 0.8), ha="center", va="center", color="white", fontsize=6,
                      zorder=4)
        for x, y in position.values():
            axes.plot([x, 1.5], [y, 0.8], color="tab:blue", alpha=0.3, zorder=1)
    for i, (x, y) in position.items():
        axes.scatter([x], [y], s=700, color="tab:green", zorder=3)
        axes.annotate(f"chip {i}\n{machine.ranks_per_chip} ranks", (x, y), ha="center", va="center",
                      fontsize=6)
    group = chip_group(fabric, tuple(range(chips)), machine.ranks_per_chip)
    lines = [f"{fabric.name}: {fabric.nodes} node(s) x {chips} chips, LNC={machine.lnc}, "
             f"{machine.ranks_per_system} ranks",
             f"chip links: {fabric.links_per_chip} x {_rate(fabric.link_bytes_per_s)} per link and direction "
             f"({_rate(fabric.links_per_chip * fabric.link_bytes_per_s)} per chip); "
             f"mean {group.mean_hops:.2f} hops",
             f"EFA {fabric.network_bytes_per_s_per_node * 8 / 1e9:.4g} Gbps per node"]
    if fabric.scaleup_bytes_per_s_per_chip:
        lines.append(f"between nodes ({fabric.scaleup_layout}): "
                     f"{_rate(fabric.scaleup_bytes_per_s_per_chip)} per chip per direction")
    axes.set_title("\n".join(lines), fontsize=8)
    axes.set_axis_off()
    figure.tight_layout()
    try:
        return save(figure, path, dpi=120)
    finally:
        plt.close(figure)
