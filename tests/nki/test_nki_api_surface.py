"""Every nl / nisa name of NKI 0.6 (reference nki.md §2.2-2.3) exists; the ones trnsim does not
emulate raise UnsupportedError naming themselves and are listed in docs/nki.md."""

import pathlib

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import KernelError, UnsupportedError

NISA = """
dma_copy dma_transpose dma_compute tensor_copy tensor_copy_predicated memset nc_n_gather
local_gather nc_stream_shuffle sendrecv core_barrier register_alloc register_move register_load
register_store nc_matmul nc_matmul_mx nc_transpose activation activation_reduce activate2
tensor_tensor tensor_scalar scalar_tensor_tensor tensor_reduce tensor_scalar_reduce
tensor_scalar_cumulative tensor_tensor_scan bn_stats bn_aggr reciprocal exponential max8
nc_find_index8 nc_match_replace8 range_select select_reduce quantize_mx rng rand2 set_rng_seed
rand_set_state rand_get_state dropout iota affine_select tensor_partition_reduce sequence_bounds
nonzero_with_count topk get_nc_version get_nc_sub_version VirtualRegister engine reduce_cmd dge_mode
oob_mode matmul_perf_mode nc_version dma_engine NkiValidationError
""".split()

NL = """
ndarray zeros ones full zeros_like empty_like rand random_seed shared_constant
shared_identity_matrix load store load_transpose2d copy matmul transpose gather_flattened where
broadcast_to expand_dims ds add subtract multiply divide maximum minimum abs_max abs_min abs square
power negative sign reciprocal exp log sqrt rsqrt sin cos tan arctan ceil floor trunc fmod mod relu
sigmoid tanh gelu gelu_dx gelu_apprx_sigmoid gelu_apprx_sigmoid_dx gelu_apprx_tanh silu silu_dx
softplus mish erf erf_dx softmax dropout rms_norm prelu bypass average sum max min mean prod var all
equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor logical_not
bitwise_and bitwise_or bitwise_xor invert left_shift right_shift affine_range sequential_range
static_range dynamic_range fori_loop while_loop sbuf psum hbm private_hbm shared_hbm is_psum is_sbuf
is_hbm is_on_chip program_id num_programs program_ndim device_print no_reorder bool_ int8 int16
int32 uint8 uint16 uint32 float16 float32 bfloat16 tfloat32 float8_e4m3 float8_e5m2 float8_e4m3fn
float8_e8m0fnu float8_e5m2_x4 float8_e4m3fn_x4 float4_e2m1fn_x4 tile_size NKIObject
""".split()

DOCS = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "nki.md").read_text()


def test_every_documented_name_exists():
    assert [n for n in NISA if not hasattr(nisa, n)] == []
    assert [n for n in NL if not hasattr(nl, n)] == []


def _not_supported_section() -> str:
    return DOCS.split("## Not supported yet", 1)[1].split("\n## ", 1)[0]


LONG_TAIL = {  # once stand-ins that only raised UnsupportedError
    "local_gather": lambda x: nisa.local_gather(dst=x, src_buffer=x, index=x),
    "rand_set_state": lambda x: nisa.rand_set_state(src_seeds=x),
    "rand_get_state": lambda x: nisa.rand_get_state(dst=x),
    "sequence_bounds": lambda x: nisa.sequence_bounds(dst=x, segment_ids=x),
    "nonzero_with_count": lambda x: nisa.nonzero_with_count(dst=x, src=x),
}


@pytest.mark.parametrize("name", sorted(LONG_TAIL))
def test_long_tail_instructions_are_emulated_and_no_longer_listed(name):
    """Called with an HBM operand, the instruction's real checks answer (not a stand-in)."""
    with pytest.raises(KernelError, match="HBM") as caught:
        nki.simulate(LONG_TAIL[name], target="trn3")(np.zeros((2, 2), np.float32))
    assert f"nisa.{name}" in str(caught.value)
    assert f"`nisa.{name}`" not in _not_supported_section()
    assert f"`{name}`" in DOCS.split("## Not supported yet", 1)[0]


def test_nl_functions_are_operator_names():
    assert nisa.op_name(nl.add) == "add" and nisa.op_name(nl.exp) == "exp"
    assert nisa.op_name(np.maximum) == "maximum" and nisa.op_name("multiply") == "multiply"


def test_collectives_outside_a_rank_launch_raise():
    from trnsim.nki import collectives
    assert set(collectives.NAMES) <= set(dir(collectives))
    with pytest.raises(UnsupportedError, match="nki.collectives.rank_id.*system.launch"):
        collectives.rank_id()
    assert "`nki.collectives`" in DOCS


def test_alignment_constants_without_a_source_raise():
    for name in ("psum_min_align", "sbuf_min_align"):
        with pytest.raises(UnsupportedError, match=name):
            getattr(nl.tile_size, name)
        assert f"`nl.tile_size.{name}`" in DOCS


def test_old_api_names_say_which_api_they_belong_to():
    with pytest.raises(UnsupportedError, match="old neuronxcc.nki API") as caught:
        nl.arange(128)
    assert "nl.ds" in str(caught.value)
    missing = "no_such_function"
    with pytest.raises(AttributeError):
        getattr(nl, missing)
