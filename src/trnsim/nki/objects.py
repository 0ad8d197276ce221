"""`nl.NKIObject`: the base of classes used in kernels (the NKI language guide, "Class Support").

NKI treats every such class as a data class, with or without `@dataclass`: unless the class
writes its own `__init__`, the compiler gives it one whose parameters are the fields in order (a
base class's first; annotated names and plain class values alike), each defaulting to its class
value or to None, and which calls `__post_init__` when there is one. So `Dims(T=4, H=8)` is legal
for a class with more fields; the rest are None. `@dataclass` keeps an `__init__` the class
already has, so it changes nothing here. NKI refuses a class that inherits from anything but
NKIObject (and its subclasses).
"""

from __future__ import annotations

import dataclasses
import inspect

from trnsim.errors import ArgumentError, KernelError, SourceLoc


class NKIObject:
    """Base class for the data classes and configuration objects of a kernel."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        others = [base.__name__ for base in cls.__bases__ if not issubclass(base, NKIObject)]
        if others:
            raise KernelError(f"class {cls.__name__} inherits from {', '.join(others)}; an NKI class "
                              f"inherits from NKIObject and no other classes", where=SourceLoc.of_caller(),
                              hint="keep the other class's data in a field instead")
        inherited = cls.__init__  # object's, a generated one, or one a base class wrote
        generated = inherited is object.__init__ or hasattr(inherited, "generated")
        if "__init__" not in cls.__dict__ and generated:
            fields = _fields(cls)
            for name, default in fields.items():  # @dataclass then sees a default for every field
                if not isinstance(cls.__dict__.get(name), dataclasses.Field):
                    setattr(cls, name, default)
            cls.__init__ = _initializer(cls, fields)


def _fields(cls) -> dict:
    """The fields of the class and its bases, base fields first, each with its default: the annotated
    names, then the other data attributes of the class body (nki-library's attention_cte builds
    `SectionParams(section_idx=...)` from a class of plain `section_idx = None` lines)."""
    fields: dict = {}
    for klass in reversed(cls.__mro__):
        body = klass.__dict__
        names = list(body.get("__annotations__", {})) + [name for name, value in body.items()
                                                           if _is_data(name, value)]
        for name in names:
            fields[name] = _default(body.get(name))
    return fields


def _is_data(name: str, value) -> bool:
    """A class attribute that is a value, not a method, property or dunder."""
    return not name.startswith("__") and not callable(value) and not isinstance(
        value, staticmethod | classmethod | property)


def _default(value):
    """A field's class value; a `dataclasses.field(...)` gives its default (None when it has none)."""
    if isinstance(value, dataclasses.Field):
        return None if value.default is dataclasses.MISSING else value.default
    return value


def _initializer(cls, fields: dict):
    """NKI's generated `__init__(self, field=default, ...)`, then `__post_init__()`."""
    factories = {name: value.default_factory for name, value in cls.__dict__.items()
                 if isinstance(value, dataclasses.Field) and value.default_factory is not dataclasses.MISSING}
    signature = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                     default=default) for name, default in fields.items()])

    def __init__(self, *args, **kwargs):  # noqa: N807 - installed as the class's __init__
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise ArgumentError(f"{cls.__name__}(...): {error}; its fields are {list(fields) or 'none'}") \
                from None
        given = bound.arguments
        for name, default in fields.items():
            value = given[name] if name in given else factories[name]() if name in factories else default
            object.__setattr__(self, name, value)  # also for @dataclass(frozen=True) classes
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    __init__.generated = True
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__signature__ = signature.replace(parameters=[
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *signature.parameters.values()])
    return __init__
