"""CHECK rules of data movement, fills, registers and LNC exchange (nki.isa.<name> docs), and the
rule for x4-packed MX dtypes that every instruction obeys."""

from __future__ import annotations

from trnsim.core.check import CHECK, MX_PACKED, _fail, shape_of
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction, Region
from trnsim.errors import ArgumentError, DTypeError, ShapeError, UnsupportedError

_PACKED_PRODUCERS = frozenset({Opcode.QUANTIZE_MX, Opcode.MATMUL_MX})
_MOVES = frozenset({Opcode.DMA_COPY, Opcode.TENSOR_COPY})  # copies that move the stored bits
_PACKED = frozenset(MX_PACKED)


def check_packed(ins: Instruction, core) -> None:
    """x4-packed MX tiles hold four values per element: engines cannot compute on them. Only
    quantize_mx and nc_matmul_mx (their own rules say how) and copies to the same dtype touch them
    (sendrecv sends values, which packed words are not)."""
    if _PACKED.isdisjoint(core.dtypes) or ins.opcode in _PACKED_PRODUCERS:
        return
    packed = [region for region in ins.outputs + ins.inputs if region.dtype in _PACKED]
    if not packed:
        return
    plain_move = (ins.opcode in _MOVES and ins.param("reduce_op") is None and not ins.param("indirect")
                  and ins.inputs[0].dtype == ins.outputs[0].dtype)
    if not plain_move:
        region = packed[0]
        _fail(DTypeError, ins, f"{region.name!r} is {region.dtype}, which packs four values per element; "
              f"only copies to the same dtype, quantize_mx and nc_matmul_mx handle it",
              hint="use nisa.quantize_mx to produce MX data")


def _same_size(ins: Instruction, src: Region, dst: Region) -> None:
    if src.elements != dst.elements:
        _fail(ShapeError, ins, f"dst {dst.name!r} {list(shape_of(dst))} and {src.name!r} "
              f"{list(shape_of(src))} have different sizes ({dst.elements} and {src.elements} elements)")


@CHECK.register(Opcode.DMA_COPY)
def _dma_copy(ins: Instruction, core) -> None:
    """Every source has dst's size; an indirect copy's index tile has a step for each position of the
    indirect dim."""
    dst, src = ins.outputs[0], ins.inputs[0]
    indirect = ins.param("indirect")
    sources = ins.inputs[:-1] if indirect else ins.inputs
    for region in sources:
        _same_size(ins, region, dst)
    if indirect and ins.param("scalar_step") is None:  # a scalar_offset tile holds one value (front end)
        view, index = (src if indirect == "src" else dst), ins.inputs[-1]
        dim = ins.param("indirect_dim")
        shape = shape_of(view)
        if not 0 <= dim < len(shape) or index.elements < shape[dim]:
            _fail(ShapeError, ins, f"indirect {indirect} {view.name!r} {list(shape)} steps dim {dim} by an "
                  f"index tile {index.name!r} of {index.elements} elements; it needs one per position")


@CHECK.register(Opcode.TENSOR_COPY, Opcode.SENDRECV)
def _copy(ins: Instruction, core) -> None:
    """A copy moves every element of src to dst: the same number of elements."""
    _same_size(ins, ins.inputs[0], ins.outputs[0])


@CHECK.register(Opcode.DMA_TRANSPOSE)
def _dma_transpose(ins: Instruction, core) -> None:
    """axes is a permutation of src's dims, and dst has src's shape permuted by it."""
    src, dst = ins.inputs[0], ins.outputs[0]
    shape, axes = shape_of(src), tuple(ins.param("axes"))
    if sorted(axes) != list(range(len(shape))):
        _fail(ShapeError, ins, f"axes={axes} is not a permutation of the {len(shape)} dims of src "
              f"{src.name!r} {list(shape)}")
    permuted = tuple(shape[axis] for axis in axes)
    if shape_of(dst) != permuted:
        _fail(ShapeError, ins, f"dst {dst.name!r} is {list(shape_of(dst))}; src {list(shape)} transposed by "
              f"axes={axes} is {list(permuted)}")
    if axes not in DMA_TRANSPOSE_AXES:
        _fail(ShapeError, ins, f"axes={axes}; dma_transpose supports {list(DMA_TRANSPOSE_AXES)}",
              hint="for other permutations transpose on an engine, or copy with an access pattern")
    if src.dtype != dst.dtype:
        _fail(DTypeError, ins, f"src is {src.dtype} but dst is {dst.dtype}; dma_transpose does not cast "
              f"(src.dtype == dst.dtype)", hint="transpose, then nisa.tensor_copy to the other dtype")
    mode = ins.param("dge_mode")
    if mode not in (_DGE_UNKNOWN, _DGE_HARDWARE):
        _fail(ArgumentError, ins, f"dge_mode={_DGE_NAMES[mode]}; a direct dma_transpose takes dge_mode "
              f"unknown or hwdge")
    if mode == _DGE_HARDWARE:
        _hwdge_transpose(ins, core, src, shape)


DMA_TRANSPOSE_AXES = ((1, 0), (2, 1, 0), (3, 1, 2, 0))
"""The permutations nki.isa.dma_transpose supports (its `axes` parameter)."""
_DGE_UNKNOWN, _DGE_HARDWARE = 0, 2
_DGE_NAMES = {0: "unknown", 1: "swdge", 2: "hwdge", 3: "none"}
_HWDGE_FIRST_GENERATION = 3
"""Hardware DGE: "only supported for NeuronCore-v3 or newer" (nki.isa.dma_transpose)."""
_HWDGE_ROWS = (1, 2, 4, 8, 16)


def _hwdge_transpose(ins: Instruction, core, src: Region, shape: tuple[int, ...]) -> None:
    """The Hardware DGE transpose's limits (nki.isa.dma_transpose, "DMA Direct Transpose Constraints")."""
    if core.generation < _HWDGE_FIRST_GENERATION:
        _fail(UnsupportedError, ins, f"dge_mode=hwdge needs NeuronCore generation {_HWDGE_FIRST_GENERATION} "
              f"or later; {core.name} is generation {core.generation}", hint="choose trn2 or later")
    rows = shape[0]
    rows_ok = rows == 16 if len(shape) == 2 else rows in _HWDGE_ROWS and rows * shape[-2] % 16 == 0
    if not rows_ok or shape[-1] > 128:
        rule = ("src.shape[0] == 16" if len(shape) == 2 else
                "src.shape[0] in {1, 2, 4, 8, 16} and src.shape[0] * src.shape[-2] a multiple of 16")
        _fail(ShapeError, ins, f"src {list(shape)}: a hwdge transpose needs {rule} and src.shape[-1] <= 128")
    if src.dtype_bytes != 2:
        _fail(DTypeError, ins, f"src is {src.dtype}; a hwdge transpose moves 2-byte elements",
              hint="use dge_mode=unknown")


@CHECK.register(Opcode.TENSOR_COPY_PREDICATED)
def _copy_predicated(ins: Instruction, core) -> None:
    """The predicate has one value per dst element, on the same partitions."""
    predicate, dst = ins.inputs[1], ins.outputs[0]
    if predicate.partition_count != dst.partition_count:
        _fail(ShapeError, ins, f"predicate {predicate.name!r} spans {predicate.partition_count} partitions "
              f"but dst {dst.name!r} spans {dst.partition_count}")


@CHECK.register(Opcode.MEMSET, Opcode.REGISTER_MOVE, Opcode.CORE_BARRIER)
def _nothing_to_relate(ins: Instruction, core) -> None:
    """memset has one operand, register_move and core_barrier none: with no two operands to relate,
    the generic checks (memories, partitions, dtypes, the immediate's kind and range) are the whole
    contract."""


@CHECK.register(Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE)
def _register_tile(ins: Instruction, core) -> None:
    """A register holds one value: the tile it is loaded from or stored to has one element."""
    region = (ins.inputs or ins.outputs)[0]
    if region.elements != 1:
        _fail(ShapeError, ins, f"{region.name!r} {list(shape_of(region))} has {region.elements} elements; "
              f"a register moves one value", hint="index one element, e.g. t[0:1, 0:1]")



@CHECK.register(Opcode.COLLECTIVE)
def _collective(ins: Instruction, core) -> None:
    """Each dst against its src (same dtype) for a group of g ranks: all_reduce and permute keep the
    size; along collective_dim all_gather multiplies it by g, reduce_scatter divides it by g, and
    all_to_all keeps the shape and splits that dim into g blocks."""
    kind, ranks, dim = ins.param("collective"), len(ins.param("group")), ins.param("collective_dim") or 0
    if kind.endswith("_v"):  # flat buffers, sized by the metadata when it runs (EXECUTE)
        return
    if len(ins.inputs) != len(ins.outputs):
        _fail(ShapeError, ins, f"{len(ins.inputs)} srcs but {len(ins.outputs)} dsts; they pair up one to one")
    for src, dst in zip(ins.inputs, ins.outputs, strict=True):
        if src.dtype != dst.dtype:
            _fail(DTypeError, ins, f"src {src.name!r} is {src.dtype} but dst {dst.name!r} is {dst.dtype}; "
                  f"a collective moves elements unchanged")
        if kind in ("all_reduce", "permute"):
            _same_size(ins, src, dst)
            continue
        shape, expected = list(shape_of(src)), list(shape_of(src))
        if not 0 <= dim < len(shape):
            _fail(ShapeError, ins, f"collective_dim={dim} is not a dim of src {src.name!r} {shape}")
        if kind != "all_gather" and shape[dim] % ranks:
            _fail(ShapeError, ins, f"dim {dim} of src {src.name!r} {shape} does not split into {ranks} ranks")
        expected[dim] = {"all_gather": shape[dim] * ranks, "reduce_scatter": shape[dim] // ranks}.get(kind,
                                                                                                    shape[dim])
        if list(shape_of(dst)) != expected:
            _fail(ShapeError, ins, f"{kind} over {ranks} ranks: dst {dst.name!r} is {list(shape_of(dst))}, "
                  f"src {shape} needs {expected}")
