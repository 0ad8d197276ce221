"""Models as the planner sees them: shapes only (widths, layers, heads, experts), from a named
preset (data/models.toml, each with its source) or a Hugging Face config.json on disk."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path

from trnsim.errors import ConfigError, SpecError
from trnsim.hardware.loader import read_toml

PRESETS_FILE = Path(__file__).with_name("data") / "models.toml"
KINDS = ("decoder", "encoder", "vision")


@dataclass(frozen=True, kw_only=True)
class Model:
    """The shapes of a transformer. `ffn` is the dense FFN width; an MoE layer has `experts` of
    `expert_ffn` each, `top_k` of them per token, plus `shared_experts` that every token uses."""

    name: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int = 0
    head_dim: int = 0
    gated: bool = True
    tied: bool = False
    kind: str = "decoder"
    seq: int = 2048
    context: int = 0  # positions the model has (max_position_embeddings); 0: not recorded
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    moe_every: int = 1
    source: str = ""

    def __post_init__(self):
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // max(self.heads, 1))
        _check(self)

    def check_length(self, tokens: int, what: str) -> None:
        """ConfigError for a sequence longer than the model's positions (when recorded)."""
        if self.context and tokens > self.context:
            raise ConfigError(f"{what} {tokens:,} is longer than {self.name}'s {self.context:,} positions "
                              f"(max_position_embeddings, {self.source})",
                              hint=f"at most {self.context:,} tokens")

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_every if self.moe else 0

    @property
    def causal(self) -> bool:
        return self.kind == "decoder"

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.gated else 2

    def attention_params(self, tp: int = 1) -> int:
        """One layer's attention weights, or one tensor-parallel rank's share of them: a rank
        holds whole heads, so with more ranks than (KV) heads each holds one, padded or copied."""
        q_out = -(-self.heads // tp) * self.head_dim  # ceiling division, for ints and the search's arrays
        kv_out = 2 * -(-self.kv_heads // tp) * self.head_dim
        return self.hidden * (q_out + kv_out) + q_out * self.hidden

    def dense_ffn_params(self) -> int:
        return self.ffn_matrices * self.hidden * self.ffn

    def expert_params(self) -> int:
        """One expert's FFN."""
        return self.ffn_matrices * self.hidden * self.expert_ffn

    def moe_ffn_params(self, active: bool = False) -> int:
        routed = self.top_k if active else self.experts
        return (routed + self.shared_experts) * self.expert_params() + self.hidden * self.experts

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def params(self, active: bool = False) -> int:
        """All weights (or those one token uses, `active`): layers, norms and embeddings."""
        dense_layers = self.layers - self.moe_layers
        ffn = dense_layers * self.dense_ffn_params() + self.moe_layers * self.moe_ffn_params(active)
        return self.layers * (self.attention_params() + 2 * self.hidden) + ffn + self.embedding_params()

    def kv_bytes_per_token(self, bytes_per_element: float = 2) -> float:
        """KV cache of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


def _check(model: Model) -> None:
    for field in ("hidden", "layers", "heads", "ffn", "vocab", "kv_heads", "head_dim", "seq"):
        value = getattr(model, field)
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"model {model.name}: {field} must be a positive integer, got {value!r}")
    if not isinstance(model.context, int) or model.context < 0:
        raise ConfigError(f"model {model.name}: context must be a whole number of positions, "
                          f"got {model.context!r}")
    if model.heads % model.kv_heads:
        raise ConfigError(f"model {model.name}: heads ({model.heads}) must be a multiple of "
                          f"kv_heads ({model.kv_heads})")
    if model.kind not in KINDS:
        raise ConfigError(f"model {model.name}: kind {model.kind!r} is unknown",
                          hint=f"one of {', '.join(KINDS)}")
    if model.experts and not (0 < model.top_k <= model.experts and model.expert_ffn > 0):
        raise ConfigError(f"model {model.name}: an MoE needs 0 < top_k <= experts and expert_ffn > 0")


@cache
def _presets() -> dict[str, Model]:
    raw = read_toml(PRESETS_FILE)
    found = {}
    for name, entry in raw.items():
        entry = dict(entry)
        aliases = entry.pop("aliases", [])
        model = Model(name=name, **entry)
        for key in (name, *aliases):
            found[key] = replace(model, name=key) if key != name else model
    return found


def presets() -> tuple[str, ...]:
    """The preset names (aliases included)."""
    return tuple(_presets())


def model(name_or_path: str | Path | Model) -> Model:
    """A preset by name ("llama-3.1-70b", any case) or a config.json path; a Model passes through."""
    if isinstance(name_or_path, Model):
        return name_or_path
    text = str(name_or_path)
    if text.endswith(".json") or Path(text).is_file():
        return from_config(text)
    key = text.lower()
    found = _presets().get(key)
    if found is None:
        close = difflib.get_close_matches(key, _presets(), n=3, cutoff=0.5)
        raise SpecError(f"no model preset named {text!r}",
                        hint=f"did you mean {', '.join(close)}?" if close else
                        f"presets: {', '.join(presets())}; or give a config.json path")
    return found


_CONFIG_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "ffn": ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim"),
    "vocab": ("vocab_size",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "experts_per_token", "moe_topk"),
    "expert_ffn": ("moe_intermediate_size", "intermediate_size"),
    "shared_experts": ("n_shared_experts",),
    "moe_every": ("interleave_moe_layer_step",),
    "seq": ("max_position_embeddings", "n_positions"),
}
_UNGATED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "quick_gelu")


def from_config(path: str | Path) -> Model:
    """A Model from a Hugging Face config.json (a local file; nothing is downloaded)."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read model config {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path} is not JSON: {error.msg} (line {error.lineno})") from None
    raw = {**raw, **raw.get("text_config", {})}
    values = {field: _first(raw, keys) for field, keys in _CONFIG_KEYS.items()}
    values = {field: value for field, value in values.items() if value is not None}
    missing = [field for field in ("hidden", "layers", "heads", "vocab") if field not in values]
    if missing:
        raise ConfigError(f"{path}: no {', '.join(missing)} found",
                          hint="a Hugging Face config.json names hidden_size, num_hidden_layers, "
                               "num_attention_heads and vocab_size")
    values.setdefault("ffn", 4 * values["hidden"])
    if not values.get("experts"):
        for field in ("experts", "top_k", "expert_ffn", "shared_experts", "moe_every"):
            values.pop(field, None)
    if isinstance(values.get("seq"), int):
        values["context"] = values["seq"]
    values["seq"] = min(values.get("seq", 2048), 8192)
    activation = raw.get("hidden_act") or raw.get("activation_function") or "silu"
    model_type = raw.get("model_type", "")
    kind = "encoder" if model_type in ("bert", "roberta") else "vision" if model_type == "vit" else "decoder"
    known = {f.name for f in fields(Model)}
    return Model(name=Path(path).parent.name or Path(path).stem, kind=kind,
                 gated=activation not in _UNGATED_ACTIVATIONS or "gpt_oss" in model_type,
                 tied=bool(raw.get("tie_word_embeddings", kind != "decoder")),
                 source=str(path), **{k: v for k, v in values.items() if k in known})


def _first(raw: dict, keys: tuple[str, ...]):
    for key in keys:
        if raw.get(key) is not None:
            return raw[key]
    return None
