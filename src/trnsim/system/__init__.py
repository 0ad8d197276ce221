"""More than one NeuronCore: the machine hierarchy (rank -> chip -> node -> system -> cluster),
the chip networks from trnsim.hardware, and how long collectives take on them.

    >>> from trnsim import system
    >>> t = system.collective_time("all_reduce", 16 << 20, 16, instance="trn2.48xlarge")
    >>> t.algorithm, round(t.seconds * 1e6) > 0
    ('rdh', True)
"""

from trnsim.system.collectives import OPS, CollectiveTime, collective_time, operation
from trnsim.system.launch import launch, launch_distributed
from trnsim.system.topology import Machine, RankPlace, fabric

__all__ = ["OPS", "CollectiveTime", "Machine", "RankPlace", "collective_time", "fabric", "launch",
           "launch_distributed", "operation"]
