"""The Hugging Face toolchain on neuron: save_pretrained / from_pretrained (device_map= too), the
Trainer, and the ops generate() and data pipelines reach (CPU index tensors, isin)."""

import warnings

import pytest
import torch

import trnsim.torch  # noqa: F401
from trnsim import config

transformers = pytest.importorskip("transformers")


def test_save_pretrained_then_from_pretrained_round_trips_bitwise(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).to("neuron")
    model.save_pretrained(tmp_path)  # safetensors: reads storages and data pointers
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).to("neuron")
    saved, back = model.state_dict(), loaded.state_dict()
    assert saved.keys() == back.keys()
    assert all(torch.equal(saved[k].cpu(), back[k].cpu()) for k in saved)


def test_from_pretrained_with_device_map_neuron_loads_onto_the_device(tmp_path):
    pytest.importorskip("accelerate")  # device_map= needs it
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    model.save_pretrained(tmp_path)
    for device_map in ("neuron", {"": "neuron:0"}):
        loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, device_map=device_map)
        assert {p.device for p in loaded.parameters()} == {torch.device("neuron", 0)}
        saved, back = model.state_dict(), loaded.state_dict()
        assert all(torch.equal(back[name].cpu(), saved[name]) for name in saved)


def test_a_device_map_mixing_neuron_and_cpu_keeps_tied_weights_apart(tmp_path):
    """accelerate keys tied parameters by data_ptr(): a neuron tensor's was 0, as an offloaded
    (meta) parameter's is, so the final norm got the tied embedding matrix."""
    pytest.importorskip("accelerate")
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(tmp_path)
    on_neuron = ("transformer.wte", "transformer.wpe", "transformer.drop", "transformer.h.0", "lm_head")
    device_map = {**dict.fromkeys(on_neuron, "neuron"), "transformer.h.1": "cpu", "transformer.ln_f": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, device_map=device_map).eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        assert torch.equal(mixed(input_ids=ids.to("neuron")).logits.cpu(), model(input_ids=ids).logits)


def test_cpu_offload_onto_neuron_runs_every_forward():
    """accelerate rebuilds an offloaded parameter as `type(param)(value, requires_grad=...)`, and
    moves meta parameters onto the execution device for each forward."""
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    x = torch.randn(2, 4)
    expected = model(x)
    accelerate.cpu_offload(model, execution_device=torch.device("neuron"))
    for _ in range(3):
        assert torch.equal(model(x.to("neuron")).cpu(), expected)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())


def test_generate_with_a_device_map_mixing_neuron_and_cpu_matches_cpu(tmp_path):
    """Every forward after the first raised TypeError (see the cpu_offload test above)."""
    pytest.importorskip("accelerate")
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(tmp_path)
    device_map = {"transformer.wte": "neuron", "transformer.wpe": "neuron", "transformer.drop": "neuron",
                  "transformer.h.0": "cpu", "transformer.h.1": "neuron", "transformer.ln_f": "neuron",
                  "lm_head": "neuron"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, device_map=device_map).eval()
        ids = torch.randint(0, 64, (2, 6))
        expected = model.generate(ids, max_new_tokens=4, do_sample=False)
        got = mixed.generate(ids.to("neuron"), max_new_tokens=4, do_sample=False)
    assert torch.equal(got.cpu(), expected)


def test_a_neuron_tensor_takes_cpu_index_tensors_as_cuda_does():
    values = torch.arange(6.0).reshape(3, 2)
    on_device, rows = values.to("neuron"), torch.tensor([2, 0])
    assert torch.equal(on_device[rows].cpu(), values[rows]) and on_device[rows].device.type == "neuron"
    on_device[rows] = 7.0
    values[rows] = 7.0
    assert torch.equal(on_device.cpu(), values)
    with pytest.raises(trnsim.torch.DeviceMismatchError):
        on_device + values  # other ops still refuse a full CPU tensor


def test_isin_runs_on_the_device():
    elements, test = torch.arange(6), torch.tensor([1, 4])
    with config.override(strict=True), warnings.catch_warnings():
        warnings.simplefilter("error")
        found = torch.isin(elements.to("neuron"), test.to("neuron"))
    assert torch.equal(found.cpu(), torch.isin(elements, test))


class _Tokens(torch.utils.data.Dataset):
    """16 fixed random sequences of 16 tokens, as a causal-LM dataset."""

    def __len__(self):
        return 16

    def __getitem__(self, index):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def _train_with_the_trainer(output_dir):
    """Three Trainer steps of a tiny GPT-2; returns the trained model and its TrainingArguments."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # accelerate keeps its device per process
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    args = transformers.TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=4,
                                          max_steps=3, report_to=[], save_strategy="no")
    transformers.Trainer(model=model, args=args, train_dataset=_Tokens()).train()
    AcceleratorState._reset_state(reset_partial_state=True)
    return model, args


def test_the_trainer_trains_on_neuron_when_accelerate_is_told_to(monkeypatch, tmp_path):
    """accelerate detects a Neuron device through AWS's torch_neuronx, which is not here, so by
    default the Trainer picks CPU; ACCELERATE_TORCH_DEVICE=neuron (accelerate's switch for a device
    it does not detect) puts it on neuron, where it trains to the CPU run's weights, bit for bit."""
    pytest.importorskip("accelerate")
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE", raising=False)
    on_cpu, cpu_args = _train_with_the_trainer(tmp_path / "cpu")
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        on_neuron, neuron_args = _train_with_the_trainer(tmp_path / "neuron")
    assert cpu_args.device.type == "cpu" and neuron_args.device.type == "neuron"
    assert {p.device.type for p in on_neuron.parameters()} == {"neuron"}
    assert prof.report().matmul_s > 0  # the steps ran as device ops (GPT-2 layers are addmm)
    trained, reference = on_neuron.state_dict(), on_cpu.state_dict()
    assert all(torch.equal(trained[name].cpu(), reference[name]) for name in reference)


def _mixtral_step(device: str) -> list:
    """Logits, loss and gradients of one step of a tiny Mixtral with its default grouped_mm experts."""
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(cfg).to(device)
    ids = torch.randint(0, 64, (2, 8)).to(device)
    with config.override(strict=True):  # aten._grouped_mm, the experts' matmul, runs on the device
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
    return [out.logits.detach().cpu(), out.loss.detach().cpu(), *(p.grad.cpu() for p in model.parameters())]


def test_a_mixture_of_experts_model_counts_tokens_per_expert_as_on_cuda():
    """Off CPU, transformers counts tokens per expert with histc of an int tensor, which CUDA has
    and CPU's kernel refuses ("histogram_cpu" not implemented for 'Int')."""
    for got, expected in zip(_mixtral_step("neuron"), _mixtral_step("cpu"), strict=True):
        assert torch.equal(got, expected)


def test_bf16_training_arguments_need_the_documented_switch(monkeypatch, tmp_path):
    """transformers asks torch.neuron about bf16 only when AWS's torch_neuronx is installed, so
    bf16=True is refused; docs/torch.md gives the switch, which puts bf16 training on neuron."""
    pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "neuron")
    AcceleratorState._reset_state(reset_partial_state=True)
    kwargs = {"output_dir": str(tmp_path), "bf16": True, "report_to": []}
    with pytest.raises(ValueError, match="doesn't support bf16"):
        transformers.TrainingArguments(**kwargs)
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    assert transformers.TrainingArguments(**kwargs).device.type == "neuron"
    AcceleratorState._reset_state(reset_partial_state=True)
