"""The opt-in `import nki` aliases and the `trnsim run` command."""

import importlib
import sys
import textwrap

import pytest

from trnsim.cli import main
from trnsim.errors import ConfigError
from trnsim.nki import compat


@pytest.fixture
def clean_aliases():
    compat.disable()
    yield
    compat.disable()


def test_aliases_are_off_by_default(clean_aliases):
    try:
        module = importlib.import_module("nki")
    except ModuleNotFoundError:
        module = None
    # Only a namespace directory called nki (such as tests/nki on sys.path) may be found, never trnsim.
    assert module is None or not hasattr(module, "jit")
    sys.modules.pop("nki", None)


def test_enabled_block_maps_new_and_old_namespaces(clean_aliases):
    import trnsim.nki
    import trnsim.nki.isa
    import trnsim.nki.language
    with compat.enabled():
        import neuronxcc.nki.language as old_nl
        import nki.isa as nisa
        import nki.language as nl

        import nki
        assert nki is trnsim.nki and nl is trnsim.nki.language and nisa is trnsim.nki.isa
        assert old_nl is trnsim.nki.language
    assert "nki" not in sys.modules and not compat.is_enabled()


def test_refuses_to_shadow_a_real_installation(clean_aliases, tmp_path, monkeypatch):
    (tmp_path / "nki").mkdir()
    (tmp_path / "nki" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="real NKI installation"):
        compat.enable()
    assert not compat.is_enabled()


def test_trnsim_run_executes_an_unmodified_script(clean_aliases, tmp_path, capsys):
    script = tmp_path / "kernel_script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import nki
        import nki.isa as nisa
        import nki.language as nl

        @nki.jit
        def add_one(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x)
            nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out, src=tile)
            return out

        print("sum", float(nki.simulate(add_one)(np.zeros((4, 8), np.float32)).sum()), sys.argv[1])
    """))
    assert main(["run", str(script), "hello"]) == 0
    assert "sum 32.0 hello" in capsys.readouterr().out


LIBRARY_STYLE = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa import engine


@nki.jit
def rms_like(x, gamma):
    """Written the way NKI-Lib kernels are: views by method, positional dst, enum engines."""
    rows, hidden = x.shape
    out = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    flat = x.reshape((rows, hidden)).slice(dim=0, start=0, end=rows)
    data = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=flat)
    g = nl.ndarray((rows, hidden), dtype=gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.broadcast(0, rows), dge_mode=0)
    square = nl.ndarray((rows, hidden), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(square[...], op=nl.square, data=data)
    total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(total[...], nl.add, square[...], axis=1, keepdims=True)
    eps = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=eps, value=1e-6, engine=engine.gpsimd)
    rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=rstd, op=nl.rsqrt, data=total, scale=1.0 / hidden, bias=eps)
    result = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=result, data=data, op0=nl.multiply, operand0=rstd, op1=nl.multiply,
                              operand1=g)
    nisa.dma_copy(dst=out.flatten_dims(start_dim=0, end_dim=1).reshape((rows, hidden)), src=result)
    return out
'''


def test_library_style_kernel_runs_unmodified(clean_aliases, tmp_path, monkeypatch):
    (tmp_path / "library_style_kernel.py").write_text(LIBRARY_STYLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import numpy as np
    with compat.enabled():
        module = importlib.import_module("library_style_kernel")
        x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
        gamma = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
        result = module.nki.simulate(module.rms_like)(x, gamma)
    expected = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    sys.modules.pop("library_style_kernel", None)
