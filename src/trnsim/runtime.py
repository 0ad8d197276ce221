"""The emulator's process-wide state on one object: `current()` is the process's `Runtime`.

It holds what trnsim keeps between kernel launches to make the next one faster: the memory pool
for tile values (at most 256 MiB), cached kernel lines, and the torch device's fallback counts
and op-time caches. `current().reset()` returns the process to its fresh state: it frees the
pool, forgets the caches and zeroes the counters.
"""

from trnsim.core.runtime import Runtime, current

__all__ = ["Runtime", "current"]
