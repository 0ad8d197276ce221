"""`NkiTensor`: an HBM, SBUF or PSUM tensor and the views on it (no view ever copies data).

Every view method returns a new `NkiTensor` on the same buffer with another shape, strides and
offset (in elements), as NKI's own views compose a hardware access pattern. Dim 0 of an on-chip
tensor is the partition dim; integer indexing there keeps the dim with size 1, as NKI does.

`identity`, `zeros` and `arange` are NKI's trace-time constants (`nki.tensor.*`) for
`nl.shared_constant`: plain numpy arrays here.
"""

from __future__ import annotations

import numbers
import operator
import re
from math import prod

import numpy as np

from trnsim.core.isa import Memory
from trnsim.core.memory import View, check_shape, contiguous_strides
from trnsim.core.trace import Region
from trnsim.errors import HazardError, KernelError, ShapeError, SourceLoc, UnsupportedError
from trnsim.nki import dtypes


class DynSlice:
    """`nl.ds(start, size)`: a slice given by start and size (start may be a register)."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start, size: int, step: int = 1):
        self.start, self.size, self.step = start, size, step

    def __repr__(self) -> str:  # as the kernel wrote it, for error messages
        return f"nl.ds({self.start!r}, {self.size!r}{'' if self.step == 1 else f', step={self.step!r}'})"


_VIEWS_KEPT = 1024
"""Most sub-views one tensor remembers (`NkiTensor._view`); more are made afresh each time."""


class NkiTensor(View):
    """A tensor on HBM, SBUF or PSUM, or a view on one."""

    __slots__ = ("_region", "_views")

    def __init__(self, storage, shape, strides, offset, element=None):
        super().__init__(storage, shape, strides, offset, element)
        self._region = self._views = None  # made when first asked for (`region`, `_view`)

    # --- attributes -------------------------------------------------------------------------
    @property
    def dtype(self) -> str:
        """The dtype's NKI name (compares equal to nl.float32 etc. and to numpy dtypes)."""
        return self.element.name

    @property
    def buffer(self):
        """The memory region (nl.sbuf, nl.psum, nl.shared_hbm, ...)."""
        return dtypes.region_of(self.storage)

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    def __repr__(self) -> str:
        return f"NkiTensor({self.storage.memory.value}:{self.name}, shape={list(self.shape)}, {self.dtype})"

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> bool:
        return True

    def region(self) -> Region:
        """The trace's description of this operand, made once: a view never changes, and a tile
        is often the operand of many instructions. Every instruction asks for it, so this is where a
        tensor kept from an earlier launch is refused."""
        if self.storage.launch.over:
            _refuse_stale(self)
        region = self._region
        if region is None:
            region = self._region = View.region(self)
        return region

    def _derive(self, shape, strides, offset, dtype=None) -> NkiTensor:
        return NkiTensor(self.storage, tuple(shape), tuple(strides), int(offset), dtype or self.element)

    # --- indexing ---------------------------------------------------------------------------
    def __getitem__(self, key) -> NkiTensor:
        keys = key if isinstance(key, tuple) else (key,)
        view = self._plain_index(keys)
        return view if view is not None else self._index(keys)

    def _plain_index(self, keys: tuple) -> NkiTensor | None:
        """The common key, one in-bounds int or step-less slice of ints per leading dim, with the
        arithmetic of `_index` inline: it runs for almost every operand of a kernel. None hands
        any other key (Ellipsis, a register, a DynSlice, an index out of bounds) to `_index`,
        which raises the errors."""
        shape, strides = self.shape, self.strides
        if len(keys) > len(shape):
            return None
        new_shape, new_strides, offset = [], [], self.offset
        for dim, key in enumerate(keys):
            size, stride = shape[dim], strides[dim]
            if type(key) is int:
                index = key + size if key < 0 else key
                if not 0 <= index < size:
                    return None
                offset += index * stride
                if dim == 0 and self.storage.memory is not Memory.HBM:
                    new_shape.append(1)
                    new_strides.append(stride)
                continue
            if type(key) is not slice or key.step is not None:
                return None
            start, stop = key.start, key.stop
            if start is None:
                start = 0
            elif type(start) is not int or start > size:
                return None
            elif start < 0:  # from the end, clipped at 0, as slice.indices does
                start = max(start + size, 0)
            if stop is None:
                stop = size
            elif type(stop) is not int or stop > size:
                return None
            elif stop < 0:
                stop = max(stop + size, 0)
            offset += start * stride
            new_shape.append(stop - start if stop > start else 0)
            new_strides.append(stride)
        indexed = len(keys)
        if indexed < len(shape):  # dims without an index are kept whole
            new_shape += shape[indexed:]
            new_strides += strides[indexed:]
        if len(new_shape) < 2 and len(shape) >= 2 and self.storage.memory is not Memory.HBM:
            new_shape.append(1)  # on chip, the last free dim is kept (the 2-D rule in `_index`)
            new_strides.append(strides[-1])
        return self._view(tuple(new_shape), tuple(new_strides), offset)

    def _view(self, shape: tuple, strides: tuple, offset: int) -> NkiTensor:
        """The view with this window, made once per tensor (up to `_VIEWS_KEPT` of them): kernels
        cut the same tiles out of a block again and again (the K loop of a matmul), and a view
        made before has its region built already. Views never change, so sharing one is safe."""
        views = self._views
        if views is None:
            views = self._views = {}
        key = (shape, strides, offset)
        view = views.get(key)
        if view is None:
            view = self._derive(shape, strides, offset)
            if len(views) < _VIEWS_KEPT:
                views[key] = view
        return view

    def _index(self, keys: tuple) -> NkiTensor:
        """Any key: ints, slices, DynSlices and registers, with an Ellipsis anywhere."""
        ndim = len(self.shape)
        for at, k in enumerate(keys):
            if k is Ellipsis:
                keys = keys[:at] + (slice(None),) * (ndim - len(keys) + 1) + keys[at + 1:]
                break
        if len(keys) > ndim:
            raise ShapeError(f"{len(keys)} indices for a {ndim}-d tensor {self.name!r}")
        shape, strides, offset = [], [], self.offset
        for dim, k in enumerate(keys):
            stride = self.strides[dim]
            start, count, step, keep = self._resolve(k, self.shape[dim], dim)
            if dim == 0 and step != 1 and count > 1 and self.storage.memory is not Memory.HBM:
                raise UnsupportedError(
                    f"index {k!r} of {self.name!r} steps through partitions by {step}: an engine "
                    f"instruction cannot stride in the partition dim (NKI architecture guide), and "
                    f"partition-strided DMAs are not emulated", what="partition-strided view",
                    hint="step in the free dims, or reorder through HBM", where=SourceLoc.of_caller())
            offset += start * stride
            if keep:
                shape.append(count)
                strides.append(stride * step)
        # Dims without an index are kept whole, as `slice(None)` would keep them.
        indexed = len(keys)
        shape, strides = [*shape, *self.shape[indexed:]], [*strides, *self.strides[indexed:]]
        if len(shape) < 2 and ndim >= 2 and self.storage.memory is not Memory.HBM:
            # On-chip tensors stay at least 2-D: the last free dim, indexed by an integer, is kept
            # at size 1 (t[:, 0, 10] of a [64, 64, 64] tile is [64, 1]; aws-neuron-sdk
            # nki/get-started/nki-language-guide.rst, "Tensor Indexing").
            shape.append(1)
            strides.append(self.strides[-1])
        return self._derive(tuple(shape), tuple(strides), offset)

    def _resolve(self, key, size: int, dim: int) -> tuple[int, int, int, bool]:
        """(start, count, step, keep-dim) for one index, bounds-checked at both ends."""
        if isinstance(key, slice):
            key = slice(*(None if part is None else _index_int(part, key) for part in
                          (key.start, key.stop, key.step)))
            if key.step == 0:
                raise ShapeError(f"index {key!r} of {self.name!r} has step 0", hint="use a step of 1 or more")
            if (key.stop is not None and key.stop > size) or (key.start is not None and key.start > size):
                self._oob(dim, key, size)
            start, stop, step = key.indices(size)
            count = max(0, -(-(stop - start) // step))
        elif isinstance(key, DynSlice):
            start = _index_int(key.start, key)
            count, step = _index_int(key.size, key), _index_int(key.step, key)
            if count < 0 or step == 0:
                raise ShapeError(f"index {key!r} of {self.name!r} needs a size of 0 or more and a "
                                 f"step other than 0")
        else:
            start = _index_int(key, key)
            if start < 0:
                start += size
            if not 0 <= start < size:
                self._oob(dim, key, size)
            keep = dim == 0 and self.storage.memory is not Memory.HBM
            return start, 1, 1, keep
        last = start + (count - 1) * step
        if count and not (0 <= start < size and 0 <= last < size):
            self._oob(dim, key, size)
        return start, count, step, True

    def _dim(self, dim, what: str) -> int:
        return axis_index(dim, self.ndim, f"{what}({dim!r}) of {self.name!r}")

    def _oob(self, dim: int, key, size: int):
        raise HazardError(f"index {key!r} is out of bounds for dim {dim} of {self.name!r} "
                          f"(size {size})", hint="keep indices inside the tensor")

    def __setitem__(self, key, value) -> None:
        from trnsim.nki import isa
        target = self[key]
        if isinstance(value, NkiTensor):
            via_dma = Memory.HBM in (target.storage.memory, value.storage.memory)
            copy = isa.dma_copy if via_dma else isa.tensor_copy
            copy(dst=target, src=value)
        else:
            isa.memset(dst=target, value=value)

    # --- views ------------------------------------------------------------------------------
    def slice(self, dim: int, start: int = 0, end: int | None = None, step: int = 1) -> NkiTensor:
        keys = [slice(None)] * self.ndim
        keys[self._dim(dim, "slice")] = slice(start, end, step)
        return self[tuple(keys)]

    def select(self, dim: int, index: int) -> NkiTensor:
        dim = self._dim(dim, "select")
        index = _index_int(index, index)
        if not 0 <= index < self.shape[dim]:
            self._oob(dim, index, self.shape[dim])
        shape, strides = list(self.shape), list(self.strides)
        offset = self.offset + index * strides[dim]
        del shape[dim], strides[dim]
        return self._derive(shape, strides, offset)

    def permute(self, dims) -> NkiTensor:
        dims = [self._dim(d, f"permute({dims})") for d in _sequence(dims, "permute")]
        if sorted(dims) != list(range(self.ndim)):
            raise ShapeError(f"permute({dims}) is not a permutation of {self.ndim} dims")
        return self._derive([self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset)

    def transpose(self, axes=None) -> NkiTensor:
        return self.permute(axes if axes is not None else list(reversed(range(self.ndim))))

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        (size,) = _dims((size,), f"broadcast({dim}, {size!r}) of {self.name!r}")
        dim = self._dim(dim, "broadcast")
        if self.shape[dim] != 1:
            raise ShapeError(f"broadcast needs dim {dim} of size 1, {self.name!r} has {self.shape[dim]}")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return self._derive(shape, strides, self.offset)

    def broadcast_to(self, shape) -> NkiTensor:
        shape = _sequence(shape, "broadcast_to")
        if len(shape) != self.ndim:
            raise ShapeError(f"broadcast_to({list(shape)}) of the {self.ndim}-d {self.name!r} "
                             f"{list(self.shape)}: give one size per dim", hint="expand_dim first")
        view = self
        for dim, size in enumerate(shape):
            if view.shape[dim] != size:
                view = view.broadcast(dim, size)
        return view

    def expand_dim(self, dim: int) -> NkiTensor:
        shape, strides = list(self.shape), list(self.strides)
        dim = axis_index(dim, self.ndim + 1, f"expand_dim({dim!r}) of {self.name!r}")
        shape.insert(dim, 1)
        strides.insert(dim, 0)
        return self._derive(shape, strides, self.offset)

    def squeeze_dim(self, dim: int) -> NkiTensor:
        dim = self._dim(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            raise ShapeError(f"squeeze_dim({dim}) on a dim of size {self.shape[dim]}")
        shape, strides = list(self.shape), list(self.strides)
        del shape[dim], strides[dim]
        return self._derive(shape, strides, self.offset)

    def reshape(self, shape, *more) -> NkiTensor:
        what = f"reshape of {self.name!r}"
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        elif not isinstance(shape, tuple | list):
            raise ShapeError(f"{what}: shape {shape!r}; a shape is a tuple of dims (or the dims themselves)")
        shape = tuple(shape) + more
        shape = _dims(shape, what, unknown=True)
        if shape.count(-1) > 1:
            raise ShapeError(f"{what}: at most one dim may be -1")
        if -1 in shape:
            known = prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if prod(shape) != self.size:
            raise ShapeError(f"cannot reshape {list(self.shape)} ({self.size} elements) into "
                             f"{list(shape)} ({prod(shape)} elements)")
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), self.shape, self.strides)
        try:
            strides = probe.reshape(shape, copy=False).strides
        except ValueError:
            raise ShapeError(f"reshape of {self.name!r} {list(self.shape)} -> {list(shape)} needs a copy "
                             f"(the view is not contiguous enough)",
                             hint="copy into a new tile first") from None
        return self._derive(shape, strides, self.offset)

    def reshape_dim(self, dim: int, shape) -> NkiTensor:
        return self.reshape(self.shape[:dim] + tuple(shape) + self.shape[dim + 1:])

    def flatten_dims(self, start_dim: int = 0, end_dim: int = -1) -> NkiTensor:
        start_dim, end = self._dim(start_dim, "flatten_dims"), self._dim(end_dim, "flatten_dims")
        merged = prod(self.shape[start_dim:end + 1])
        return self.reshape(self.shape[:start_dim] + (merged,) + self.shape[end + 1:])

    def view(self, dtype) -> NkiTensor:
        """Reinterpret the bits as another dtype; the last dim scales by the size ratio."""
        new = dtypes.dtype(dtype)
        old_size, new_size = self.element.numpy.itemsize, new.numpy.itemsize
        if old_size == new_size:
            return self._derive(self.shape, self.strides, self.offset, new)
        if self.strides[-1] != 1 or (self.offset * old_size) % new_size:
            raise ShapeError(f"view({new.name}) needs a contiguous last dim on {self.name!r}")
        last = self.shape[-1] * old_size
        if last % new_size or any((s * old_size) % new_size for s in self.strides[:-1]):
            raise ShapeError(f"view({new.name}): {list(self.shape)} {self.dtype} does not divide into "
                             f"{new.name} elements")
        strides = [s * old_size // new_size for s in self.strides[:-1]] + [1]
        return self._derive(self.shape[:-1] + (last // new_size,), strides,
                            self.offset * old_size // new_size, new)

    def ap(self, pattern, offset: int = 0, scalar_offset=None, vector_offset=None, indirect_dim: int = 0,
           dtype=None) -> NkiTensor:
        """Raw access pattern: [[stride, count], ...] in elements (first pair = partition dim).

        A runtime offset moves along dim `indirect_dim` of this tensor, in steps of that dim's
        stride (NKI's rule), whatever strides the pattern has: `scalar_offset` shifts the whole
        pattern, `vector_offset` (an index tile) replaces the steps of pattern dim `indirect_dim`."""
        if not isinstance(pattern, tuple | list) or not all(
                isinstance(pair, tuple | list) and len(pair) == 2 for pair in pattern):
            raise ShapeError(f"ap({pattern!r}) on {self.name!r}: a pattern is a list of [stride, count] "
                             f"pairs, the first for the partition dim", hint="e.g. [[512, 128], [1, 512]]")
        shape = list(_dims([count for _, count in pattern], f"ap({pattern}) on {self.name!r}"))
        strides = [_index_int(stride, pattern) for stride, _ in pattern]
        offset = _index_int(offset, "offset")
        element = dtypes.dtype(dtype) if dtype is not None else self.element
        if scalar_offset is not None and vector_offset is not None:
            raise ShapeError("ap() takes scalar_offset or vector_offset, not both")
        if isinstance(scalar_offset, NkiTensor) and self.storage.memory is Memory.HBM:
            # a DMA reads the tile when it runs: an offset out of bounds is its oob_mode's business
            step = self._indirect_step(indirect_dim, element)
            return IndirectTensor(self.storage, tuple(shape), tuple(strides), self.offset + int(offset),
                                  element, _offset_tile(scalar_offset), None, step)
        if scalar_offset is not None:
            offset += _scalar(scalar_offset) * self._indirect_step(indirect_dim, element)
        if vector_offset is not None:
            _check_index(vector_offset, indirect_dim, shape)
            strides[indirect_dim] = self._indirect_step(indirect_dim, element)
            return IndirectTensor(self.storage, tuple(shape), tuple(strides), self.offset + int(offset),
                                  element, vector_offset, indirect_dim)
        view = self._derive(shape, strides, self.offset + int(offset), element)
        _check_inside(view)
        return view

    def _indirect_step(self, dim: int, element) -> int:
        """The stride of this tensor's dim `dim`, in elements of the pattern's dtype."""
        if not 0 <= dim < self.ndim:
            raise ShapeError(f"indirect_dim={dim} is not a dim of the {self.ndim}-d tensor {self.name!r}")
        return self.strides[dim] * self.element.numpy.itemsize // element.numpy.itemsize

    def rearrange(self, pattern: str, **sizes) -> NkiTensor:
        """einops-style `"a (b c) -> (a b) c"` with sizes for split groups; no copy."""
        sides = pattern.split("->") if isinstance(pattern, str) else []
        if len(sides) != 2:
            raise ShapeError(f"rearrange({pattern!r}): a pattern is 'input dims -> output dims'",
                             hint="e.g. 'p (a b) -> p a b'")
        groups_in, groups_out = _groups(sides[0].strip()), _groups(sides[1].strip())
        if len(groups_in) != self.ndim:
            raise ShapeError(f"rearrange {pattern!r}: {len(groups_in)} groups for {self.ndim} dims")
        names_in = [a for group in groups_in for a in group]
        names_out = [a for group in groups_out for a in group]
        if sorted(names_in) != sorted(names_out) or len(set(names_in)) != len(names_in):
            raise ShapeError(f"rearrange {pattern!r}: both sides must name the same dims, each once")
        axes: dict[str, int] = {}
        for group, size in zip(groups_in, self.shape, strict=True):
            unknown = [a for a in group if a not in sizes]
            known = prod(sizes[a] for a in group if a in sizes)
            for a in group:
                axes[a] = sizes[a] if a in sizes else size // known
            if len(unknown) > 1 or prod(axes[a] for a in group) != size:
                raise ShapeError(f"rearrange {pattern!r}: cannot split {size} into {group}")
        names = [a for group in groups_in for a in group]
        split = self.reshape([axes[a] for a in names])
        order = [names.index(a) for group in groups_out for a in group]
        moved = split.permute(order)
        return moved.reshape([prod(axes[a] for a in group) for group in groups_out])

    # --- queries ----------------------------------------------------------------------------
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    def is_indirect(self) -> bool:
        return False

    def get_pattern(self) -> list[list[int]]:
        return [[s, c] for s, c in zip(self.strides, self.shape, strict=True)]

    def vector_select(self, dim: int, vector_offset) -> IndirectTensor:
        """Per-partition DMA gather/scatter on an HBM tensor: row p of the view is row
        vector_offset[p] of dim 0 (an indirect view, bounds checked when the DMA runs)."""
        where = f"vector_select on {self.name!r}"
        if dim != 0:
            raise ShapeError(f"{where}: dim={dim}; only dim 0 can be selected per partition")
        if self.storage.memory is not Memory.HBM:
            raise ShapeError(f"{where}: the tensor is in {self.storage.memory.value.upper()}; vector_select "
                             f"works on HBM tensors", hint="use nisa.nc_n_gather or local_gather on chip")
        if not isinstance(vector_offset, NkiTensor) or vector_offset.storage.memory is Memory.HBM or \
                vector_offset.size != vector_offset.shape[0] or vector_offset.element.numpy.kind not in "iu":
            raise ShapeError(f"{where}: vector_offset must be an on-chip [partitions, 1] integer tile, not "
                             f"{vector_offset!r}")
        return IndirectTensor(self.storage, (vector_offset.shape[0],) + self.shape[1:], self.strides,
                              self.offset, self.element, vector_offset, 0)

    def indirect(self, index, num_elem: int | None = None) -> IndirectColumns:
        """trn3 tensor indirection on an SBUF tile: column i of the [P, num_elem] view is row element
        offset_i of each partition, the offsets read from `index` when the instruction is issued
        (their layout depends on the engine; see `IndirectColumns`)."""
        where = f"indirect on {self.name!r}"
        if self.storage.memory is not Memory.SBUF or self.strides[1:] != contiguous_strides(self.shape[1:]):
            raise ShapeError(f"{where}: tensor indirection reads an SBUF tile whose partitions hold "
                             f"contiguous rows; this one is {self.storage.memory.value.upper()} "
                             f"{self.get_pattern()}")
        if not isinstance(index, NkiTensor) or index.storage.memory is not Memory.SBUF or \
                index.shape[0] != self.shape[0] or index.element.numpy.kind not in "iu":
            raise ShapeError(f"{where}: index must be an integer SBUF tile with {self.shape[0]} partitions, "
                             f"not {index!r}")
        count = index.size if num_elem is None else int(num_elem)
        if count <= 0:
            raise ShapeError(f"{where}: num_elem={num_elem} must be positive")
        return IndirectColumns(self.storage, (self.shape[0], count), (self.strides[0], 1), self.offset,
                               self.element, index, prod(self.shape[1:]))

    reinterpret_cast = view


class IndirectTensor(NkiTensor):
    """An access pattern whose position along `indirect_dim` comes from an index tile, one index per
    step (DMA gather/scatter through `ap(vector_offset=...)`), or, with `scalar_step`, that a 1x1
    tile's value times `scalar_step` shifts as a whole (`ap(scalar_offset=tile)` on HBM). Bounds are
    checked when the DMA runs, against its `oob_mode`."""

    __slots__ = ("index", "indirect_dim", "scalar_step")

    def __init__(self, storage, shape, strides, offset, element, index, indirect_dim: int | None,
                 scalar_step: int | None = None):
        super().__init__(storage, shape, strides, offset, element)
        self.index = index
        self.indirect_dim = indirect_dim
        self.scalar_step = scalar_step

    def _derive(self, *args, **kwargs):
        raise ShapeError("an indirect access pattern cannot be viewed further", hint="index the tensor first")

    def is_indirect(self) -> bool:
        return True

    def vector_select(self, dim: int, vector_offset):
        raise ShapeError(f"{self.name!r} is already an indirect view; only one dynamic select per tensor")


class IndirectColumns(NkiTensor):
    """A `NkiTensor.indirect` view. At issue time the engine's partition-group size G (from
    trnsim.hardware) fixes the offsets: partition group g (partitions gG..gG+G-1, or all of them
    when fewer) reads offset i from `index[gG + i % G, i // G]`."""

    __slots__ = ("index", "reach")

    def __init__(self, storage, shape, strides, offset, element, index, reach: int):
        super().__init__(storage, shape, strides, offset, element)
        self.index = index
        self.reach = reach

    def _derive(self, *args, **kwargs):
        raise ShapeError("an indirect (tensor indirection) view cannot be viewed further")

    def is_indirect(self) -> bool:
        return True

    def columns(self, group: int, read: bool) -> np.ndarray | None:
        """[P, num_elem] row offsets for an engine whose partition groups have `group` partitions
        (None when `read` is False: tracing keeps no index values)."""
        rows, count = self.shape
        group = min(group, rows)
        held = self.index.size // max(1, rows // group)
        if rows % group or count > held:
            raise ShapeError(f"indirect view of {self.name!r}: {count} offsets from a "
                             f"{list(self.index.shape)} index in groups of {group} partitions (each group "
                             f"holds {held})",
                             where=SourceLoc.of_caller())
        if not read:
            return None
        index = np.asarray(self.index.array()).reshape(rows, -1).astype(np.int64)
        step = np.arange(count)
        per_group = index[np.arange(0, rows, group)[:, None] + step % group, step // group]
        if per_group.min() < 0 or per_group.max() >= self.reach:
            raise HazardError(f"indirect view of {self.name!r}: offset {int(per_group.max())} is outside the "
                              f"{self.reach} elements of a partition row", where=SourceLoc.of_caller())
        return np.repeat(per_group, group, axis=0)


def _groups(side: str) -> list[list[str]]:
    return [g.split() if g.startswith("(") is False else g[1:-1].split()
            for g in re.findall(r"\([^)]*\)|\S+", side)]


def axis_index(dim, ndim: int, what: str) -> int:
    """`dim` as an index into `ndim` dims, negative counting from the end; one outside is refused,
    never wrapped (numpy raises AxisError there)."""
    if type(dim) is bool or not isinstance(dim, int | np.integer):
        raise ShapeError(f"{what}: a dim is an integer, not {dim!r}")
    if not -ndim <= dim < ndim:
        raise ShapeError(f"{what}: dim {dim} is outside {ndim} dims", hint=f"use {-ndim}..{ndim - 1}")
    return int(dim) % ndim


def _sequence(value, what: str) -> tuple:
    if not isinstance(value, tuple | list):
        raise ShapeError(f"{what}({value!r}): give a tuple or list of dims")
    return tuple(value)


def _index_int(value, key) -> int:
    """An index part (start, stop, step, size): an integer or a register. Bools, floats, lists and
    tiles are refused: NKI indexes with integers and `nl.ds` only."""
    if type(value) is int:
        return value
    if type(value) is bool or not (isinstance(value, int | np.integer) or hasattr(value, "read_value")):
        raise ShapeError(f"index {key!r}: {value!r} is not an integer",
                         hint="index with ints, slices of ints, nl.ds(start, size) or a register")
    return _int(value)


def _int(value) -> int:
    """A static index, or the current value of a register (simulate mode only)."""
    if type(value) is int:  # the common case, first: no attribute probe
        return value
    if hasattr(value, "read_value"):
        return value.read_value()
    return int(value)


def _scalar(value) -> int:
    """A scalar_offset: an int, a register, or the value of a 1x1 tile (read when simulating)."""
    if not isinstance(value, NkiTensor):
        return _int(value)
    return int(np.asarray(_offset_tile(value).array()).reshape(-1)[0])


def _offset_tile(value: NkiTensor) -> NkiTensor:
    """A scalar_offset tile: one of this launch, holding one value."""
    if value.storage.launch.over:
        _refuse_stale(value)
    if value.size != 1:
        raise ShapeError(f"scalar_offset must be a 1x1 tile; {value.name!r} has shape {list(value.shape)}")
    return value


def _dims(shape: tuple, what: str, unknown: bool = False) -> tuple[int, ...]:
    """A shape given to a view method, as ints (numpy ints are fine) of at least 1; `unknown`
    lets a dim be -1 (reshape's "the rest")."""
    try:
        dims = tuple(operator.index(size) for size in shape)
    except TypeError:
        raise ShapeError(f"{what}: every dim must be an integer") from None
    check_shape(tuple(size for size in dims if not (unknown and size == -1)), what)
    return dims


def _check_index(index, dim: int, shape: list[int]) -> None:
    """Pattern dim `dim` steps by a vector_offset tile's values: the dim must exist, and the tile
    must hold one index per step."""
    if not 0 <= dim < len(shape):
        raise ShapeError(f"indirect_dim={dim} is not a dim of the {len(shape)}-d access pattern")
    if not isinstance(index, NkiTensor) or index.size < shape[dim]:
        raise ShapeError(f"vector_offset must be a tile of at least {shape[dim]} indices, one per step of "
                         f"pattern dim {dim}; got {index!r}")


def _refuse_stale(tensor: NkiTensor):
    """A tensor whose launch has ended is not memory any more: its tile space was given back."""
    raise KernelError(f"{tensor.storage.memory.value.upper()} tensor {tensor.name!r} was made by an earlier "
                      f"launch (kept in a global or a closure?); its memory is gone",
                      hint="make tiles inside the kernel, and pass HBM data in as kernel arguments")


def identity(n: int, dtype="float32") -> np.ndarray:
    """An n x n identity matrix, as a trace-time constant."""
    return np.eye(n, dtype=dtypes.dtype(dtype).numpy)


def zeros(shape, dtype="float32") -> np.ndarray:
    return np.zeros(shape, dtypes.dtype(dtype).numpy)


def arange(*bounds, dtype="int32") -> np.ndarray:
    """start/stop/step as numpy's arange takes them."""
    return np.arange(*bounds, dtype=dtypes.dtype(dtype).numpy)


def _check_inside(view: NkiTensor) -> None:
    low = high = view.offset
    for stride, count in zip(view.strides, view.shape, strict=True):
        reach = stride * (count - 1) if count else 0
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    total = prod(view.storage.shape) * view.storage.dtype.numpy.itemsize // view.element.numpy.itemsize
    if low < 0 or high >= total:
        raise HazardError(f"access pattern reaches elements [{low}, {high}] of {view.name!r}, which has "
                          f"{total}", hint="keep the pattern inside the tensor")
