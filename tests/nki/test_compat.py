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
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nki")


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
