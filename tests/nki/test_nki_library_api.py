"""What nki-library (aws-neuron/nki-library, src/) imports and calls, each exercised by a small
kernel written here: the import paths, `nki.typing`, `nl.shared_constant` of a .npy file, unary
ALU operators, packed MX scales, NKI classes (`nl.NKIObject`) and the released `nki.jit` options."""

import subprocess
import sys
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ArgumentError, ConfigError, KernelError, UnsupportedError
from trnsim.nki import compat

RNG = np.random.default_rng(12)


# --- import paths ------------------------------------------------------------------------------
@pytest.mark.parametrize("first", ["", "import nki.isa.constants", "from nki.isa.constants import dge_mode"])
def test_from_nki_isa_import_constants_in_any_import_order(first):
    """`from nki.isa import constants` (find_nonzero_indices.py) failed unless `nki.isa.constants`
    had been imported before; a fresh interpreter shows the import order."""
    script = (f"import trnsim.nki.compat as c; c.enable()\n{first}\nfrom nki.isa import constants\n"
              f"import nki.isa as nisa\nassert constants.dge_mode is nisa.dge_mode\n"
              f"assert constants.oob_mode.skip is nisa.oob_mode.skip\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_nki_typing_names():
    with compat.enabled():
        import nki.typing as nt  # noqa: PLC0415

        def kernel(x: nt.tensor[128, 512], out: nt.mutable_tensor, n: nt.scalar):
            return x
    assert kernel.__annotations__["out"] is nt.mutable_tensor


def test_language_names_nki_library_uses_beyond_the_reference():
    assert nl.bool is nl.bool_
    assert list(nl.range(2, 5)) == [2, 3, 4]


# --- nl.shared_constant of a .npy file ---------------------------------------------------------
def test_shared_constant_reads_a_npy_file(tmp_path):
    """rotational_topk.py saves its constants with np.save and passes the file's path."""
    path = tmp_path / "rotation.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(3, 4))

    def kernel():
        return nl.shared_constant(str(path)), nl.shared_constant(path, dtype=nl.int32)
    as_saved, as_int = nki.simulate(kernel, target="trn2")()
    np.testing.assert_array_equal(as_saved, np.arange(12).reshape(3, 4))
    assert as_int.dtype == np.int32


def test_shared_constant_of_a_missing_file_names_the_kernel_line(tmp_path):
    def kernel():
        return nl.shared_constant(str(tmp_path / "missing.npy"))
    with pytest.raises(ArgumentError, match=r"test_nki_library_api\.py:\d+ in kernel: .*missing\.npy"):
        nki.simulate(kernel, target="trn2")()


# --- unary ALU operators as op0 ----------------------------------------------------------------
def _abs_max_kernel(op0, operand0):
    def kernel(x):
        data = on_chip(x)
        magnitudes = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.sbuf)
        peak = nl.ndarray((data.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=magnitudes, data=data, op0=op0, operand0=operand0,
                                  reduce_op=nl.maximum, reduce_res=peak)
        return to_hbm(magnitudes), to_hbm(peak)
    return kernel


@pytest.mark.parametrize("operand0", [0.0, None])
def test_abs_as_op0_of_tensor_scalar_reduce(operand0):
    """rmsnorm_quant.py and the MLP quantization find |x|max per row this way."""
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    magnitudes, peak = nki.simulate(_abs_max_kernel(nl.abs, operand0), target="trn2")(x)
    np.testing.assert_array_equal(magnitudes, np.abs(x))
    np.testing.assert_array_equal(peak[:, 0], np.abs(x).max(axis=1))


@pytest.mark.parametrize("op, reference", [(nl.rsqrt, lambda x: 1 / np.sqrt(x)), (nl.square, np.square)])
def test_unary_op0_of_tensor_scalar_then_a_binary_op1(op, reference):
    x = RNG.uniform(0.5, 4.0, (8, 16)).astype(np.float32)

    def kernel(a):
        data = on_chip(a)
        out = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=out, data=data, op0=op, operand0=None, op1=nl.add, operand1=1.0)
        return to_hbm(out)
    np.testing.assert_allclose(nki.simulate(kernel, target="trn3")(x), reference(x) + 1, rtol=1e-6)


def test_unary_op0_refusals_name_the_kernel_line():
    x = np.ones((8, 16), np.float32)
    with pytest.raises(ArgumentError, match=r"test_nki_library_api\.py:\d+ in kernel: .*op0=abs is unary"):
        nki.simulate(_abs_max_kernel(nl.abs, 2.0), target="trn2")(x)
    with pytest.raises(UnsupportedError, match=r"op0=square needs NeuronCore generation 4"):
        nki.simulate(_abs_max_kernel(nl.square, 0.0), target="trn2")(x)
    with pytest.raises(ArgumentError, match=r"operand0=None; op0=maximum needs an operand"):
        nki.simulate(_abs_max_kernel(nl.maximum, None), target="trn2")(x)


def test_unary_operators_stay_illegal_where_the_isa_takes_two_operands():
    def kernel(x):
        data = on_chip(x)
        nisa.tensor_tensor(dst=data, data1=data, data2=data, op=nl.abs)
    with pytest.raises(ArgumentError, match="op='abs'; it must be an ALU operator"):
        nki.simulate(kernel, target="trn2")(np.ones((8, 16), np.float32))


# --- packed MX scales --------------------------------------------------------------------------
M, N = 32, 64


def _exact_mx_inputs(columns):
    """Values from {+-0.5, +-1, +-2} with a 4 in each group: every group quantises exactly."""
    values = RNG.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size=(128, 4 * columns))
    values[::8, ::4] = 4.0
    return values.astype(ml_dtypes.bfloat16)


def _contraction_major(x, columns):
    return x.astype(np.float32).reshape(128, columns, 4).transpose(0, 2, 1).reshape(512, columns)


@pytest.mark.parametrize("offset", [4, 8, 12])
def test_mx_scales_packed_at_a_quadrant_offset(offset):
    """Two quantize_mx calls share one scale tile, the second at partitions offset..offset+3 of each
    quadrant (the NKI MXFP guide's packed scales), and nc_matmul_mx reads them back."""
    def kernel(a, b):
        qa = nl.ndarray((128, M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        qb = nl.ndarray((128, N), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        scales = nl.zeros((128, N), dtype=nl.uint8)
        scale_a, scale_b = scales[0:, :M], scales[offset:, :]
        nisa.quantize_mx(dst=qa, src=on_chip(a), dst_scale=scale_a)
        nisa.quantize_mx(dst=qb, src=on_chip(b), dst_scale=scale_b)
        product = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=product, stationary=qa, moving=qb, stationary_scale=scale_a,
                          moving_scale=scale_b)
        return to_hbm(nl.copy(product)), to_hbm(scales)

    a, b = _exact_mx_inputs(M), _exact_mx_inputs(N)
    product, scales = nki.simulate(kernel, target="trn3")(a, b)
    np.testing.assert_allclose(product, _contraction_major(a, M).T @ _contraction_major(b, N), rtol=1e-6)
    quadrant_rows = np.array([32 * q + g for q in range(4) for g in range(4)])
    # groups whose max is 4: 2^(2 - 7) for e4m3fn (E8M0 122), 2^(2 - 14) for e5m2 (E8M0 115)
    assert (scales[quadrant_rows, :M] == 122).all()
    assert (scales[quadrant_rows + offset, :N] == 115).all()


def test_mx_scales_elsewhere_in_the_quadrant_are_refused():
    def kernel(a):
        q = nl.ndarray((128, M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scales = nl.zeros((128, M), dtype=nl.uint8)
        nisa.quantize_mx(dst=q, src=on_chip(a), dst_scale=scales[2:, :])
    with pytest.raises(KernelError, match=r"test_nki_library_api\.py:\d+ in kernel: .*offset 0, 4, 8 or 12"):
        nki.simulate(kernel, target="trn3")(_exact_mx_inputs(M))


# --- a scalar_offset tile with oob_mode=skip -----------------------------------------------------
CACHE = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)


@nki.jit
def write_cache_row(cache, position, row):
    """attention_block_tkg.py's KV-cache update: an invalid position (uint32 max) writes nothing."""
    where = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=where, src=position)
    nisa.dma_copy(dst=cache.ap([[16, 1], [1, 16]], scalar_offset=where, indirect_dim=0), src=on_chip(row),
                  oob_mode=nisa.oob_mode.skip)
    return cache


@pytest.mark.parametrize("position", [3, 8, 2**32 - 1])
def test_a_scalar_offset_tile_out_of_bounds_skips_the_dma(position):
    cache, row = CACHE.copy(), np.full((1, 16), -1.0, np.float32)
    nki.simulate(write_cache_row, target="trn2")(cache, np.array([[position]], np.uint32), row)
    expected = CACHE.copy()
    if position < 8:
        expected[position] = -1.0
    np.testing.assert_array_equal(cache, expected)


def test_a_scalar_offset_tile_out_of_bounds_reads_nothing_with_skip_and_fails_without():
    def read(cache, position, skip):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=position)
        row = nl.zeros((1, 16), dtype=nl.float32)
        nisa.dma_copy(dst=row, src=cache.ap([[16, 1], [1, 16]], scalar_offset=where, indirect_dim=0),
                      oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
        return to_hbm(row)
    skipped = nki.simulate(read, target="trn2")(CACHE, np.array([[-1]], np.int32), True)
    np.testing.assert_array_equal(skipped, 0)
    with pytest.raises(KernelError, match=r"test_nki_library_api\.py:\d+ in read: nisa.dma_copy: .*reaches"):
        nki.simulate(read, target="trn2")(CACHE, np.array([[9]], np.int32), False)


def test_a_scalar_offset_tile_traces_without_values():
    cache = nki.TensorSpec((8, 16), "float32")
    trace = nki.trace(write_cache_row, cache, nki.TensorSpec((1, 1), "uint32"), nki.TensorSpec((1, 16)),
                      target="trn2")
    assert len(trace) == 3  # position and row into SBUF, row into the cache: no value was needed


def test_dma_transpose_of_a_runtime_offset_is_refused():
    def kernel(cache, position):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=position)
        out = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=out, src=cache.ap([[16, 1], [1, 16]], scalar_offset=where, indirect_dim=0))
    with pytest.raises(UnsupportedError, match=r"test_nki_library_api\.py:\d+ in kernel: .*dma_transpose"):
        nki.simulate(kernel, target="trn2")(CACHE, np.array([[1]], np.int32))


# --- NKI classes -------------------------------------------------------------------------------
class Dims(nl.NKIObject):
    """As nki-library's MoE DimensionSizes: annotations only, built with some fields by keyword."""
    rows: int
    cols: int
    tiles: int

    def derive(self):
        self.tiles = self.rows // 4


@dataclass
class Config(nl.NKIObject):
    scale: float
    negate: bool = False
    label: str = None


@dataclass(frozen=True)
class Frozen(nl.NKIObject):
    eps: float = 1e-6
    twice: float = None

    def __post_init__(self):
        object.__setattr__(self, "twice", 2 * self.eps)


@dataclass
class Plain(nl.NKIObject):
    """As attention_cte's SectionParams: fields as plain class values, no annotations."""
    index = None
    offset = 0

    def end(self):
        return self.offset + 1


class Written(nl.NKIObject):
    skip: bool = False

    def __init__(self, skip: bool = False):
        self.skip = not skip


def test_nki_classes_get_the_documented_keyword_initializer():
    dims = Dims(cols=8, rows=16)
    assert (dims.rows, dims.cols, dims.tiles) == (16, 8, None)
    config = Config(2.0)
    assert (config.scale, config.negate, config.label) == (2.0, False, None)
    assert Config().scale is None and Config(label="x").label == "x"
    assert Frozen().twice == 2e-6 and Frozen(0.5).twice == 1.0
    assert Written(True).skip is False  # a class's own __init__ is kept
    plain = Plain(index=3)
    assert (plain.index, plain.offset, plain.end()) == (3, 0, 1)


def test_nki_classes_inside_a_kernel():
    def kernel(x, config):
        dims = Dims(rows=x.shape[0], cols=x.shape[1])
        dims.derive()
        data = on_chip(x)
        out = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=out, data=data, op0=nl.multiply, operand0=config.scale * dims.tiles)
        return to_hbm(out)
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(kernel, target="trn2")(x, Config(scale=0.5)), x)


def test_nki_class_refusals_name_the_line():
    with pytest.raises(ArgumentError, match=r"test_nki_library_api\.py:\d+ in .*Dims\(\.\.\.\): .*"
                                            r"\['rows', 'cols', 'tiles'\]"):
        Dims(rows=1, depth=2)
    with pytest.raises(KernelError, match=r"test_nki_library_api\.py:\d+ in .*class Mixed inherits from "
                                          r"dict; an NKI class inherits from NKIObject and no other"):
        class Mixed(nl.NKIObject, dict):
            pass


# --- nki.jit options as released -----------------------------------------------------------------
def test_jit_mode_is_deprecated_and_ignored():
    """nki-library decorates its MoE sub-kernels with @nki.jit(mode="trace")."""
    with pytest.warns(DeprecationWarning, match=r"mode='trace'.*deprecated and ignored") as record:
        @nki.jit(mode="trace")
        def copy_kernel(x):
            return to_hbm(on_chip(x))
    assert record[0].filename == __file__
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(copy_kernel, target="trn2")(x), x)


def test_jit_platform_target_says_what_to_do_at_the_decorator_line():
    expected = (r"^test_nki_library_api\.py:\d+ in .*platform_target='trn2'\) is an error since NKI 0\.3\.0 "
                r"— remove it and set NEURON_PLATFORM_TARGET_OVERRIDE=trn2")
    with pytest.raises(ConfigError, match=expected):
        @nki.jit(platform_target="trn2")
        def kernel(x):
            return x


def test_compiler_options_are_ignored_and_unknown_jit_options_refused_by_name():
    """nki-library's qkv passes debug_kernel, show_compiler_tb and experimental_flags."""
    kernel = nki.jit(lambda x: x, debug_kernel=True, show_compiler_tb=True, experimental_flags="x",
                     additional_compile_opt="--flag")
    assert kernel.options == {}
    with pytest.raises(ConfigError, match=r"nki.jit\(debug_kernal=\.\.\.\) is not an option"):
        nki.jit(lambda x: x, debug_kernal=True)
