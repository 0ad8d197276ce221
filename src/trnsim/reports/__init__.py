"""Pictures and reports built on the layers above: kernel profiles (timeline, summary, exports).

    >>> from trnsim.reports import profile
    >>> result = profile(kernel, TensorSpec((4096, 8192), "bfloat16"), ..., targets=["trn1", "trn2"])
    >>> result.latency_s("trn2"); result.write("out/")
"""

from trnsim.reports.kernel import KernelProfile, profile

__all__ = ["KernelProfile", "profile"]
