"""What a training or serving job takes on Trainium, Inferentia or GPUs: time, memory, dollars.

    >>> from trnsim import planner
    >>> planner.model("llama-3.1-8b").params() // 10**9
    8

Per-op times come from trnsim.cost, collective times from trnsim.system; see docs/planner.md.
"""

from trnsim.planner.machines import Machine, machine
from trnsim.planner.models import Model, from_config, model, presets
from trnsim.planner.serving import ServePlan, ServeResult, serve
from trnsim.planner.training import TrainPlan, TrainResult, train

__all__ = ["Machine", "Model", "ServePlan", "ServeResult", "TrainPlan", "TrainResult", "from_config",
           "machine", "model", "presets", "serve", "train"]
