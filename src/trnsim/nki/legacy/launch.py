"""Entry points of the old API: `nki.jit(mode=...)`, `simulate_kernel`, `baremetal`, `benchmark`.

There is no hardware, so every mode runs the kernel with values on the emulated core (the 0.6
front end's `run`); `benchmark` also times the trace with trnsim's timing model and keeps the
result where the tutorials read it (`kernel.benchmark_result.nc_latency`).
"""

from __future__ import annotations

import functools

from trnsim.core.isa import Memory
from trnsim.core.trace import NEURONX_CC
from trnsim.errors import ArgumentError, ConfigError, SourceLoc, TrnsimError
from trnsim.nki.jit import COMPILER_OPTIONS, Kernel, TensorSpec, _launch_grid, resolve_target, run
from trnsim.nki.jit import trace as trace06
from trnsim.nki.legacy.tile import Tile, unwrap
from trnsim.nki.tensor import NkiTensor

MODES = ("auto", "simulation", "baremetal", "benchmark", "trace", "torchxla", "jax")
"""nki.jit modes of SDK 2.26; all run on the emulated core (benchmark also reports latency)."""

OPTIONS = COMPILER_OPTIONS | {"save_neff_name", "save_trace_name", "artifacts_dir", "warmup", "iters",
                              "working_directory", "overwrite", "profile_nth", "num_execs"}
"""Options of the SDK 2.26 launchers (nki/api/nki/__init__.py: nki.baremetal, benchmark, profile;
`num_execs` and the compiler options as public kernels pass them); they concern NEFF and profile
files on hardware and change nothing here. Any other name is refused."""


class LegacyKernel(Kernel):
    """An old-API kernel: arguments become Tiles, results are handed back as arrays."""

    compiler = NEURONX_CC

    def __init__(self, fn, grid=(), options=None):
        super().__init__(fn, grid, options)
        self.fn = _as_tiles(fn)
        self.benchmark_result: BenchmarkResult | None = None

    def __getitem__(self, grid) -> LegacyKernel:
        """`kernel[2, 3]` or `kernel[nl.spmd_dim(nl.nc(2), 2), 2]` (programs run one after another,
        so how they map onto logical cores changes no value)."""
        try:
            sizes = _launch_grid(grid if isinstance(grid, tuple) else (grid,))
        except TrnsimError as error:
            error.locate(SourceLoc.of_caller(), "kernel[...]")
            raise
        launched = LegacyKernel(self.__wrapped__, sizes, self.options)
        launched.benchmark_result = self.benchmark_result
        return launched

    def __call__(self, *args, **kwargs):
        target = self.options.get("platform_target")
        if any(isinstance(a, TensorSpec) for a in (*args, *kwargs.values())):  # nt.tensor[...]: no values
            result = run(self, args, kwargs, target=target, with_values=False)
        else:
            result = super().__call__(*args, target=target, **kwargs)
        if self.options.get("mode") == "benchmark":
            self._benchmark()
        return result

    def _benchmark(self) -> None:
        from trnsim.timing.schedule import latency_s
        seconds = latency_s(self.last_trace, resolve_target(self.options.get("platform_target")))
        self.benchmark_result = BenchmarkResult(seconds * 1e6)
        print(f"trnsim benchmark of {self.__name__}: predicted latency {seconds * 1e6:.2f} us "
              f"(timing model, no hardware)")


def _as_tiles(fn):
    """The kernel body with HBM arguments as Tiles and its Tile results as the tensors under them."""
    @functools.wraps(fn)
    def body(*args, **kwargs):
        args = [Tile(a) if isinstance(a, NkiTensor) else a for a in args]
        kwargs = {k: Tile(v) if isinstance(v, NkiTensor) else v for k, v in kwargs.items()}
        return _in_hbm(unwrap(fn(*args, **kwargs)))
    return body


def _in_hbm(result):
    """Results as HBM tensors: the old simulator handed back a returned SBUF/PSUM tile's values,
    so such a tile is stored into a new shared HBM tensor (the DMA a kernel would write)."""
    if isinstance(result, tuple | list):
        return type(result)(_in_hbm(r) for r in result)
    if isinstance(result, NkiTensor) and result.storage.memory is not Memory.HBM:
        from trnsim.nki.legacy import language
        out = language.ndarray(result.shape, result.dtype, buffer=language.shared_hbm)
        language.store(out, Tile(result))
        return out.base
    return result


class Latency:
    """`benchmark_result.nc_latency`: the predicted latency in microseconds (one value: the
    timing model is deterministic, so every percentile is the same)."""

    def __init__(self, microseconds: float):
        self.microseconds = microseconds

    def get_latency_percentile(self, percentile: int = 50) -> float:
        return self.microseconds

    def __repr__(self) -> str:
        return f"Latency({self.microseconds:.2f} us, predicted)"


class BenchmarkResult:
    def __init__(self, microseconds: float):
        self.nc_latency = Latency(microseconds)


def jit(func=None, mode: str = "auto", platform_target=None, **options):
    """`@nki.jit` / `@nki.jit(mode="simulation", platform_target="trn2")`."""
    if mode not in MODES:
        raise ConfigError(f"nki.jit(mode={mode!r}) is not a mode of the old API", where=SourceLoc.of_caller(),
                          hint=f"use one of {', '.join(MODES)}")
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ArgumentError(f"nki.jit: unknown option(s) {', '.join(unknown)}", where=SourceLoc.of_caller(),
                            hint=f"the SDK's options: mode, platform_target, {', '.join(sorted(OPTIONS))}")
    settings = {**options, "mode": mode, "platform_target": platform_target}
    if func is None:
        return lambda fn: LegacyKernel(_function(fn), options=settings)
    return LegacyKernel(_function(func), options=settings)


def _function(kernel):
    """The kernel function under a kernel that is decorated again (`nki.benchmark(...)(jitted)`)."""
    return kernel.__wrapped__ if isinstance(kernel, Kernel) else kernel


def baremetal(kernel=None, **options):
    """Runs on hardware under the SDK; here it runs on the emulated core with values."""
    return jit(kernel, mode="baremetal", **options)


def benchmark(kernel=None, **options):
    """Runs once and reports the timing model's latency (warmup and iters change nothing: the
    model is deterministic)."""
    return jit(kernel, mode="benchmark", **options)


def profile(kernel=None, **options):
    return jit(kernel, mode="benchmark", **options)


def simulate_kernel(kernel, *args, **kwargs):
    """Run a kernel (jit-decorated or a plain function) with values; numpy in, numpy out."""
    launched = kernel if isinstance(kernel, LegacyKernel) else LegacyKernel(_function(kernel))
    return launched(*args, **kwargs)


def trace(func=None, **options):
    """`nki.trace`: the old API's decorator for kernels run later by `simulate_kernel`."""
    return jit(func, mode="trace", **options)


def instruction_trace(kernel, *args, **kwargs):
    """trnsim's instruction trace of a run without values (no values are computed)."""
    launched = kernel if isinstance(kernel, LegacyKernel) else LegacyKernel(kernel)
    return trace06(launched, *args, target=launched.options.get("platform_target"), **kwargs)


__all__ = ["BenchmarkResult", "LegacyKernel", "baremetal", "benchmark", "instruction_trace", "jit", "profile",
           "simulate_kernel", "trace"]
