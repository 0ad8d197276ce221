"""The API other parts of trnsim code against: names, meanings and values of the core specs."""

import pytest

from trnsim import SpecError, hardware

EXPECTED_SBUF = {"trn1": 192 * 1024, "inf2": 192 * 1024, "trn2": 224 * 1024, "trn3": 256 * 1024}


@pytest.mark.parametrize("target", hardware.TARGETS)
def test_every_target_names_a_complete_core(target):
    core = hardware.core(target)
    assert core.partial is False
    assert core.partitions == 128
    assert core.sbuf_bytes_per_partition == EXPECTED_SBUF[target]
    assert core.psum_banks * core.psum_bank_bytes == core.psum_bytes_per_partition == 16384
    assert (core.matmul_max_contraction, core.matmul_max_stationary_free) == (128, 128)
    assert core.matmul_max_moving_free == 512 == core.bn_stats_max_free
    assert core.dma_queues == 16
    assert set(core.engines) == {"tensor", "vector", "scalar", "gpsimd"}
    for engine in core.engines.values():
        assert engine.clock_hz > 1e8 and engine.width("bf16") >= engine.width("default") > 0
    assert core.costs.matmul_min_ii_cycles == 64 and core.costs.min_ii_cycles == 64


@pytest.mark.parametrize(("name", "generation"), [
    ("trn1", 2), ("inf2", 2), ("TRN2", 3), ("trn3", 4), ("gen2", 2), ("Gen3", 3), ("gen4", 4),
    ("v2", 2), ("v3", 3), ("v4", 4), ("NeuronCore-v3", 3), ("neuroncore v4", 4), ("inf1", 1)])
def test_core_names_are_forgiving(name, generation):
    core = hardware.core(name)
    assert core.generation == generation
    assert core.name == f"NeuronCore-v{generation}"


def test_generation_differences_come_from_the_data():
    trn1, trn2, trn3 = (hardware.core(t) for t in ("trn1", "trn2", "trn3"))
    assert trn1.engines["tensor"].clock_hz == 2.8e9 and trn2.engines["tensor"].clock_hz == 2.4e9
    assert [c.dma_bytes_per_s_per_queue for c in (trn1, trn2, trn3)] == [17e9, 23e9, 33e9]
    assert trn1.dma_fixed_latency_s == pytest.approx(1.3e-6)
    assert trn2.dma_dge_instruction_s == pytest.approx(600e-9)
    assert trn3.matmul_max_moving_free_bf16_dst == 8192 and trn2.matmul_max_moving_free_bf16_dst == 512
    assert trn3.matmul_max_moving_free_fp32_dst == 4096 and trn2.matmul_max_moving_free_fp32_dst == 512
    assert "float8_e4m3fn" in trn3.dtypes and "float8_e4m3fn" not in trn2.dtypes
    assert "float4_e2m1fn_x4" in trn3.dtypes and "float4_e2m1fn_x4" not in trn1.dtypes
    assert {"bfloat16", "float32", "float8_e5m2"} <= trn1.dtypes
    assert trn2.engines["vector"].width("bf16") == 512 and trn2.engines["vector"].width("fp32") == 256
    assert trn2.peak_flops["fp8"] == 2 * trn2.peak_flops["bf16"]


def test_instruction_costs_follow_the_published_table():
    costs = hardware.core("trn2").costs.instructions
    cycles = {name: max(c.floor_cycles, c.fixed_cycles + c.cycles_per_element * 1024)
              for name, c in costs.items()}
    assert cycles["activation"] == 1024 and cycles["activation_reduce"] == 1088
    assert cycles["tensor_tensor"] == 2048 and cycles["reciprocal"] == 8192
    assert cycles["iota"] == 1174 and cycles["bn_aggr"] == pytest.approx(13 * 1024 / 3)
    assert costs["activation"].engine == "scalar" and costs["iota"].engine == "gpsimd"
    small = costs["tensor_copy_dynamic"]
    assert max(small.floor_cycles, small.cycles_per_element * 8) == 600


def test_sources_are_retrievable_for_fields_and_mapping_keys():
    core = hardware.core("trn2")
    sbuf = hardware.source_of(core, "sbuf_bytes_per_partition")
    assert sbuf.value == core.sbuf_bytes_per_partition and sbuf.source == "[S10]"
    assert sbuf.written == "224 KiB"
    assert hardware.source_of(core, "peak_flops.fp8").value == core.peak_flops["fp8"]
    assert core.engines["tensor"].source_of("clock_hz").written == "2.4 GHz"
    with pytest.raises(SpecError, match="no sourced field 'colour'"):
        hardware.source_of(core, "colour")


def test_unknown_core_lists_the_names():
    with pytest.raises(SpecError) as info:
        hardware.core("trn9")
    message = str(info.value)
    assert "unknown core 'trn9'" in message and "NeuronCore-v3" in message


def test_the_first_generation_is_partial_not_invented():
    core = hardware.core("inf1")
    assert core.partial and core.partitions is None and core.sbuf_bytes_per_partition is None
    assert core.engines == {} and core.costs is None
    assert core.peak_flops["fp16"] == 16e12
    assert "inf1" not in hardware.TARGETS


def test_chip_and_instance_lookup_resolve_their_parts():
    trn2 = hardware.chip("Trainium2")
    assert hardware.chip("trn2") is trn2 and trn2.core is hardware.core("trn2")
    instance = hardware.instance("trn2.48xlarge")
    assert instance.chip is trn2 and instance.accelerators == 16
    assert {c.name for c in hardware.chips()} >= {"Inferentia", "Inferentia2", "Trainium",
                                                    "Trainium2", "Trainium3", "Trainium4"}
    assert len(hardware.instances()) >= 19


def test_the_package_docstring_example_runs():
    import doctest

    result = doctest.testmod(hardware, verbose=False)
    assert result.attempted >= 3 and result.failed == 0


def test_a_name_that_is_not_text_is_a_spec_error():
    with pytest.raises(SpecError, match="must be text"):
        hardware.find(None)
