"""nki.language functions against numpy."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.language as nl
from trnsim.errors import ShapeError, UnsupportedError

RNG = np.random.default_rng(2)
A = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
B = RNG.uniform(-2, 2, (128, 64)).astype(np.float32)
POS = RNG.uniform(0.2, 3, (128, 64)).astype(np.float32)


def run(fn, *arrays, out_dtype=None, target=None):
    """Load each input, apply `fn` to the tiles, store the result."""
    def kernel(*hbm):
        tiles = [nl.load(a) for a in hbm]
        result = fn(*tiles)
        staged = result if nl.is_sbuf(result.buffer) else nl.copy(result)
        out = nl.ndarray(staged.shape, dtype=out_dtype or staged.dtype, buffer=nl.shared_hbm)
        nl.store(out, staged)
        return out
    return nki.simulate(kernel, target=target)(*arrays)


BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "greater", "less", "equal",
          "logical_and", "logical_or", "logical_xor", "not_equal", "greater_equal", "less_equal"]


@pytest.mark.parametrize("name", BINARY)
def test_binary(name):
    reference = {"logical_and": lambda a, b: (a != 0) & (b != 0),
                 "logical_or": lambda a, b: (a != 0) | (b != 0),
                 "logical_xor": lambda a, b: (a != 0) ^ (b != 0)}.get(name, getattr(np, name))
    np.testing.assert_allclose(run(getattr(nl, name), A, B), reference(A, B).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "negative",
                                  "square", "reciprocal", "silu", "floor", "ceil", "trunc", "sign", "sin",
                                  "cos", "arctan", "softplus", "gelu_apprx_tanh"])
def test_unary(name):
    references = {"rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
                  "relu": lambda x: np.maximum(x, 0), "reciprocal": lambda x: 1 / x,
                  "silu": lambda x: x / (1 + np.exp(-x)), "softplus": lambda x: np.log1p(np.exp(x)),
                  "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))}
    reference = references.get(name, getattr(np, name, None))
    data = POS if name in ("log", "sqrt", "rsqrt", "reciprocal") else A
    np.testing.assert_allclose(run(getattr(nl, name), data), reference(data.astype(np.float64)),
                               rtol=2e-5, atol=2e-6)


def test_scalar_operands_and_column_broadcast():
    np.testing.assert_allclose(run(lambda a: nl.multiply(a, 3.0), A), A * 3)
    np.testing.assert_allclose(run(lambda a: nl.subtract(1.0, a), A), 1 - A)
    column = A[:, :1].copy()
    np.testing.assert_allclose(run(lambda a, c: nl.add(a, c), A, column), A + column)


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean),
                                      ("prod", np.prod), ("var", np.var)])
def test_reductions(name, ref):
    data = POS[:, :8] if name == "prod" else A
    result = run(lambda a: getattr(nl, name)(a, axis=1, keepdims=True), data)
    np.testing.assert_allclose(result, ref(data, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    partition = run(lambda a: nl.sum(a, axis=0), A)
    np.testing.assert_allclose(partition.reshape(-1), A.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "mean", "all"])
@pytest.mark.parametrize("axis", [2, 3, -3, (1, 2)])
def test_reductions_refuse_an_axis_outside_the_tile(name, axis):
    """nl.sum(t, axis=2) on a 2-D tile summed across partitions (the axis was wrapped, axis % 2);
    nl.mean raised a raw IndexError."""
    with pytest.raises(ShapeError, match="is outside 2 dims"):
        run(lambda a: getattr(nl, name)(a, axis=axis), A)


def test_softmax_rms_norm_where_transpose_matmul():
    e = np.exp(A - A.max(1, keepdims=True))
    expected_softmax = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(run(lambda a: nl.softmax(a, axis=1), A), expected_softmax, rtol=1e-5)
    w = RNG.uniform(0.5, 1.5, (1, 64)).astype(np.float32)
    expected = A / np.sqrt((A * A).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(run(lambda a, g: nl.rms_norm(a, g, axis=1), A, w), expected, rtol=1e-5)
    np.testing.assert_allclose(run(lambda c, a, b: nl.where(c, a, b), (A > 0).astype(np.float32), A, B),
                               np.where(A > 0, A, B))
    np.testing.assert_array_equal(run(nl.transpose, A), A.T)
    x, y = A[:, :32].copy(), B[:, :48].copy()
    np.testing.assert_allclose(run(lambda p, q: nl.matmul(p, q, transpose_x=True), x, y), x.T @ y, rtol=1e-5)
    square_a, square_b = A[:64].copy(), B[:64].copy()
    np.testing.assert_allclose(run(nl.matmul, square_a, square_b), square_a @ square_b, rtol=1e-5, atol=1e-5)


def test_creation_and_broadcast_helpers():
    np.testing.assert_array_equal(run(lambda a: nl.full((4, 3), 2.5, nl.float32), A), np.full((4, 3), 2.5))
    np.testing.assert_array_equal(run(lambda a: nl.zeros_like(a), A), np.zeros_like(A))
    np.testing.assert_array_equal(run(lambda a: nl.ones((2, 2), nl.int32), A), np.ones((2, 2)))
    np.testing.assert_array_equal(run(lambda a: nl.broadcast_to(a[0:1, :], (8, 64)), A),
                                  np.broadcast_to(A[0:1], (8, 64)))
    np.testing.assert_array_equal(run(lambda a: nl.shared_identity_matrix(16, nl.float32), A), np.eye(16))
    np.testing.assert_array_equal(run(lambda a: nl.invert(a), np.arange(6, dtype=np.int32).reshape(2, 3)),
                                  ~np.arange(6, dtype=np.int32).reshape(2, 3))


def test_tile_size_follows_the_target():
    seen = {}

    def kernel(a):
        seen[nl.tile_size.pmax] = (nl.tile_size.sbuf_fmax_bytes, nl.tile_size.psum_num_banks,
                                   nl.tile_size.gemm_moving_fmax, nl.tile_size.psum_bank_fmax)
        return a
    for target in ("trn1", "trn2", "trn3"):
        nki.simulate(kernel, target=target)(A)
        assert seen[128][0] == {"trn1": 192, "trn2": 224, "trn3": 256}[target] * 1024
    assert seen[128][1:] == (8, 512, 512)


def test_gather_flattened_matches_take_along_axis():
    data = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    index = RNG.integers(0, 6, (4, 5)).astype(np.uint32)
    expected = np.take_along_axis(data.reshape(4, -1), index.astype(np.int64), axis=1)
    np.testing.assert_array_equal(run(nl.gather_flattened, data, index), expected)


@pytest.mark.parametrize("name,reference", [
    ("divide", np.divide), ("power", lambda a, b: np.power(np.abs(a), b)), ("fmod", np.fmod), ("mod", np.mod),
    ("abs_max", lambda a, b: np.where(np.abs(a) > np.abs(b), a, b)),  # the signed operand, b on a tie
    ("abs_min", lambda a, b: np.where(np.abs(a) < np.abs(b), a, b)),
])
def test_more_binary_math(name, reference):
    a = np.abs(A) if name == "power" else A
    b = -POS if name.startswith("abs_") else POS  # signs that the magnitude alone would lose
    target = "trn3" if name.startswith("abs_") else None  # NeuronCore-v4's operators
    result = run(getattr(nl, name), a, b, target=target)
    np.testing.assert_allclose(result, reference(a, b), rtol=1e-5, atol=1e-6)


def test_abs_max_keeps_the_sign_and_is_trn3_only():
    """abs_max(-5, 3) is -5 and abs_max(1, -1) is -1 (nki.language.abs_max's examples); trnsim gave
    the magnitude (5) and ran it on trn1/trn2, which lack the operator."""
    x, y = np.array([[-5.0, 1.0, 2.0]], np.float32), np.array([[3.0, -1.0, -4.0]], np.float32)
    np.testing.assert_array_equal(run(nl.abs_max, x, y, target="trn3"), [[-5.0, -1.0, -4.0]])
    np.testing.assert_array_equal(run(nl.abs_min, x, y, target="trn3"), [[3.0, -1.0, 2.0]])
    with pytest.raises(UnsupportedError, match="needs NeuronCore generation 4"):
        run(nl.abs_max, x, y, target="trn2")


def test_integer_bitwise_and_logical_not():
    x = np.arange(-8, 8, dtype=np.int32).reshape(2, 8)
    y = np.full((2, 8), 3, np.int32)
    for name, reference in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                            ("bitwise_xor", np.bitwise_xor), ("left_shift", np.left_shift)):
        np.testing.assert_array_equal(run(getattr(nl, name), x, y), reference(x, y))
    np.testing.assert_array_equal(run(nl.logical_not, A), (A == 0).astype(np.float32))
    np.testing.assert_array_equal(run(lambda a: nl.all(a, axis=1), (A > -5).astype(np.float32)).ravel(),
                                  np.ones(128))


def test_creation_loads_and_helpers():
    constant = np.arange(6, dtype=np.float32).reshape(2, 3)

    def kernel(x):
        with nl.no_reorder():
            table = nl.shared_constant(constant)
            tile = nl.load_transpose2d(table)
            like = nl.full_like(tile, 2.0)
            nl.random_seed(nl.full((1, 1), 7, nl.int32))
            noise = nl.rand((2, 3), nl.float32)
            expanded = nl.expand_dims(tile, 1)
        assert nl.is_on_chip(tile.buffer) and nl.is_hbm(table.buffer) and expanded.shape == (3, 1, 2)
        assert list(nl.static_range(3)) == [0, 1, 2] and nl.empty_like(tile).shape == (3, 2)
        assert ((noise.array() >= 0) & (noise.array() < 1)).all()
        out = nl.ndarray((3, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(tile, like))
        return out
    np.testing.assert_array_equal(nki.simulate(kernel)(A), constant.T * 2)


def test_nl_dropout_rate():
    kept = run(lambda a: nl.dropout(a, 0.5), np.ones((128, 64), np.float32))
    assert set(np.unique(kept)) <= {0.0, 1.0} and 0.4 < (kept == 0).mean() < 0.6


def test_a_column_first_operand_is_a_per_partition_scalar_too():
    """nl.subtract(col, tile) was refused (the result took the column's shape) while
    nl.subtract(tile, col) worked."""
    col = B[:, :1].copy()
    np.testing.assert_array_equal(run(nl.subtract, col, A), col - A)
    np.testing.assert_array_equal(run(nl.add, col, A), run(nl.add, A, col))


def test_rms_norm_over_another_axis_is_refused_not_ignored():
    """axis=0 gave the last-axis RMSNorm."""
    with pytest.raises(UnsupportedError, match="only the last axis is emulated"):
        run(lambda a, w: nl.rms_norm(a, w, axis=0), A, B[:1])


def test_a_read_only_input_can_be_written_by_the_kernel():
    """Writing an input that is a read-only array failed as 'a trnsim bug' (ValueError inside a
    DMA); the kernel's HBM copy takes the writes and the caller's array is left as it is."""
    def double_in_place(a):
        tile = nl.load(a)
        nl.store(a, nl.multiply(tile, 2.0))
        return a
    x = A.copy()
    x.setflags(write=False)
    np.testing.assert_array_equal(nki.simulate(double_in_place)(x), A * 2)
    np.testing.assert_array_equal(x, A)


@pytest.mark.parametrize("first, second, result", [
    ("bfloat16", "float32", np.float32), ("int32", "float32", np.float32),
    ("float16", "bfloat16", np.float32)])
def test_a_binary_ops_dtype_does_not_depend_on_argument_order(first, second, result):
    """The first tile's dtype won: nl.add(bf16, fp32) was bf16 and nl.multiply(int32, fp32) rounded
    to int32, the other order fp32. The tiles now promote by the SDK's NKI type promotion."""
    import ml_dtypes
    as_numpy = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "int32": np.int32,
                "float16": np.float16}
    x, y = (np.ones((128, 64), as_numpy[name]) * 3 for name in (first, second))
    for pair in ((x, y), (y, x)):
        got = run(nl.multiply, *pair)
        assert got.dtype == result and np.all(got == 9)
    keep = (A > 0).astype(np.float32)
    assert run(lambda c, t: nl.where(c, 2.0, t), keep, x).dtype == x.dtype  # a number takes the tile's dtype


def test_a_repeated_reduction_axis_is_refused_and_bool_fills_work():
    """nl.sum(x, axis=(1, 1)) was accepted (numpy refuses it); nl.full(shape, True, nl.bool_) was
    refused ("must be a number fp32 holds")."""
    with pytest.raises(ShapeError, match=r"axis=\(1, 1\) names a dim twice"):
        run(lambda t: nl.sum(t, axis=(1, 1)), A)

    @nki.jit
    def filled(a):
        out = nl.ndarray((2, 3), dtype=nl.bool_, buffer=nl.shared_hbm)
        nl.store(out, nl.full((2, 3), True, nl.bool_))
        return out
    assert np.array_equal(np.asarray(nki.simulate(filled)(A)).astype(bool), np.ones((2, 3), bool))
