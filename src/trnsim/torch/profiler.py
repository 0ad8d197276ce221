"""placeholder"""
import contextvars

ACTIVE = contextvars.ContextVar("trnsim_torch_profile", default=None)
