"""Feature-row panels as LLVM vectors, for the SpMM kernels.

A :class:`Panel` is ``lanes`` consecutive features of one row held as one LLVM vector
``<lanes x float>`` (``lanes`` a compile-time constant), so an accumulator lives in
``lanes / 8`` AVX registers across a row's edges instead of in memory.  Numba's own code
cannot say this: a loop over a runtime width keeps the accumulator in memory and
vectorises for 32-float trip counts, leaving a 16-float row to the scalar remainder, and
a constant width is fully unrolled into scalars (Numba runs no SLP vectoriser).

:func:`load` reads ``arr[row, col:col + n]`` (lanes past ``n`` read as 0, without touching
memory), widening bf16 to float32 when ``arr`` holds bf16 bit patterns (uint16):
``float32(bits << 16)`` is exact, so a bf16 gather adds the same values a float32 gather
of the rounded features would.  :func:`store` writes the first ``n`` lanes back (rounded to bf16 into bf16 bit patterns).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import models, register_model
from numba.extending import intrinsic, overload

BF16 = np.uint16  # bf16 values travel as their bit patterns (the upper half of a float32)


class Panel(types.Type):
    """``lanes`` values of the float type ``dtype`` in one LLVM vector."""

    def __init__(self, dtype: types.Float, lanes: int):
        self.dtype, self.lanes = dtype, lanes
        super().__init__(name=f"Panel({dtype}, {lanes})")


@register_model(Panel)
class PanelModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        element = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.lanes))


def _value_type(dtype) -> types.Float | None:
    """The float type a panel of an array of ``dtype`` holds (bf16 widens to float32)."""
    if dtype == types.uint16:
        return types.float32
    return dtype if isinstance(dtype, types.Float) else None


def _splat(builder, value: ir.Value, lanes: int) -> ir.Value:
    vector = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.IntType(32)(0))
    return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _mask(context, builder, n, nty, lanes: int) -> ir.Value:
    """``<lanes x i1>``: lane ``i`` is ``i < n``."""
    n = context.cast(builder, n, nty, types.intp)
    iota = ir.Constant(ir.VectorType(n.type, lanes), list(range(lanes)))
    return builder.icmp_signed("<", iota, _splat(builder, n, lanes))


def _pointer(context, builder, arrty, arr, row, rowty, col, colty, lanes: int):
    """``<lanes x element>*`` to ``arr[row, col]``."""
    ary = context.make_array(arrty)(context, builder, arr)
    index = [context.cast(builder, row, rowty, types.intp),
             context.cast(builder, col, colty, types.intp)]
    ptr = cgutils.get_item_pointer(context, builder, arrty, ary, index, wraparound=False)
    vector = ir.VectorType(context.get_data_type(arrty.dtype), lanes)
    return builder.bitcast(ptr, vector.as_pointer()), vector


def _masked(builder, op: str, vector: ir.VectorType, args) -> ir.Value:
    """Call ``llvm.masked.load`` or ``llvm.masked.store`` on ``vector``-typed memory."""
    name = str(vector.element)  # float, double or i16 in LLVM's intrinsic suffixes
    element = {"float": "f32", "double": "f64"}.get(name, name)
    mask = ir.VectorType(ir.IntType(1), vector.count)
    ptr, i32 = vector.as_pointer(), ir.IntType(32)
    fnty = (ir.FunctionType(vector, [ptr, i32, mask, vector]) if op == "load"
            else ir.FunctionType(ir.VoidType(), [vector, ptr, i32, mask]))
    fn = cgutils.get_or_insert_function(builder.module, fnty,
                                        f"llvm.masked.{op}.v{vector.count}{element}.p0")
    return builder.call(fn, args)


def _lanes(lanes) -> int | None:
    return lanes.literal_value if isinstance(lanes, types.IntegerLiteral) else None


@intrinsic
def zeros(typingctx, arr, lanes):
    """A panel of ``lanes`` (a compile-time constant) zeros of ``arr``'s value type."""
    count, dtype = _lanes(lanes), _value_type(arr.dtype)
    if count is None or dtype is None:
        return None

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(sig.return_type), None)

    return Panel(dtype, count)(arr, lanes), codegen


@intrinsic
def load(typingctx, arr, row, col, n, lanes):
    """``arr[row, col:col + n]`` as a panel of ``lanes`` (lanes ``>= n`` are 0; bf16 bits
    widen to float32).  ``n == lanes`` as constants compiles to a plain vector load."""
    count, dtype = _lanes(lanes), _value_type(arr.dtype)
    if count is None or dtype is None or arr.ndim != 2:
        return None

    def codegen(context, builder, sig, args):
        arrty, rowty, colty, nty = sig.args[:4]
        ptr, vector = _pointer(context, builder, arrty, args[0], args[1], rowty, args[2],
                               colty, count)
        align = ir.IntType(32)(context.get_abi_alignment(vector.element))
        raw = _masked(builder, "load", vector,
                      [ptr, align, _mask(context, builder, args[3], nty, count),
                       ir.Constant(vector, None)])
        if arrty.dtype != types.uint16:
            return raw
        i32 = ir.VectorType(ir.IntType(32), count)
        wide = builder.shl(builder.zext(raw, i32), ir.Constant(i32, [16] * count))
        return builder.bitcast(wide, ir.VectorType(ir.FloatType(), count))

    return Panel(dtype, count)(arr, row, col, n, lanes), codegen


def _bf16_bits(builder, values: ir.Value, lanes: int) -> ir.Value:
    """``<lanes x float>`` rounded to bf16 to nearest even, as ``<lanes x i16>`` bit
    patterns; a NaN becomes the quiet NaN 0x7FC0 (as :func:`stored` and torch round)."""
    i32 = ir.VectorType(ir.IntType(32), lanes)

    def splat(value: int) -> ir.Constant:
        return ir.Constant(i32, [value] * lanes)

    bits = builder.bitcast(values, i32)
    odd = builder.and_(builder.lshr(bits, splat(16)), splat(1))
    rounded = builder.lshr(builder.add(builder.add(bits, splat(0x7FFF)), odd), splat(16))
    nan = builder.icmp_unsigned(">", builder.and_(bits, splat(0x7FFFFFFF)), splat(0x7F800000))
    return builder.trunc(builder.select(nan, splat(0x7FC0), rounded),
                         ir.VectorType(ir.IntType(16), lanes))


@intrinsic
def store(typingctx, arr, row, col, n, panel):
    """``arr[row, col:col + n] = panel[:n]`` (``arr`` of the panel's float type, or bf16 bit
    patterns for a float32 panel: rounded to nearest even, as :func:`stored`)."""
    if not isinstance(panel, Panel) or arr.ndim != 2:
        return None
    narrowed = arr.dtype == types.uint16 and panel.dtype == types.float32
    if arr.dtype != panel.dtype and not narrowed:
        return None

    def codegen(context, builder, sig, args):
        arrty, rowty, colty, nty = sig.args[:4]
        ptr, vector = _pointer(context, builder, arrty, args[0], args[1], rowty, args[2],
                               colty, panel.lanes)
        align = ir.IntType(32)(context.get_abi_alignment(vector.element))
        values = _bf16_bits(builder, args[4], panel.lanes) if narrowed else args[4]
        _masked(builder, "store", vector,
                [values, ptr, align, _mask(context, builder, args[3], nty, panel.lanes)])
        return context.get_dummy_value()

    return types.void(arr, row, col, n, panel), codegen


def _fast(instruction):
    instruction.flags.append("fast")  # may contract into an FMA, as fastmath=True does
    return instruction


@intrinsic
def add(typingctx, acc, panel):
    """``acc + panel`` lane by lane."""
    if not isinstance(acc, Panel) or acc != panel:
        return None

    def codegen(context, builder, sig, args):
        return _fast(builder.fadd(args[0], args[1]))

    return acc(acc, panel), codegen


@intrinsic
def scaled_add(typingctx, acc, scale, panel):
    """``acc + scale * panel`` lane by lane (``scale`` a scalar)."""
    if not isinstance(acc, Panel) or acc != panel or not isinstance(scale, types.Number):
        return None

    def codegen(context, builder, sig, args):
        s = _splat(builder, context.cast(builder, args[1], sig.args[1], acc.dtype), acc.lanes)
        return _fast(builder.fadd(args[0], _fast(builder.fmul(s, args[2]))))

    return acc(acc, scale, panel), codegen


@intrinsic
def scale(typingctx, panel, factor):
    """``factor * panel`` lane by lane (``factor`` a scalar)."""
    if not isinstance(panel, Panel) or not isinstance(factor, types.Number):
        return None

    def codegen(context, builder, sig, args):
        s = _splat(builder, context.cast(builder, args[1], sig.args[1], panel.dtype),
                   panel.lanes)
        return _fast(builder.fmul(s, args[0]))

    return panel(panel, factor), codegen


@intrinsic
def float32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the uint32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _bits_of_float32(typingctx, value):
    """The uint32 bit pattern of the float32 ``value``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


def as_float(v):
    """``v`` as a float: a bf16 bit pattern (uint16) widened to float32 (exactly), a float
    as it is (in Numba kernels; a kernel compiled for float arrays is unchanged by it)."""


@overload(as_float, inline="always")
def _as_float(v):
    if v == types.uint16:
        return lambda v: float32_from_bits(np.uint32(v) << np.uint32(16))
    return lambda v: v


def stored(v, out):
    """``v`` in the element type of the array ``out``: rounded to bf16 to nearest even (as
    torch rounds; a NaN to the quiet NaN 0x7FC0) where ``out`` holds bf16 bit patterns,
    else ``v`` (the assignment converts it)."""


@overload(stored, inline="always")
def _stored(v, out):
    if out.dtype == types.uint16:
        def rounded(v, out):
            bits = _bits_of_float32(np.float32(v))
            if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                return np.uint16(0x7FC0)
            bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
            return np.uint16(bits >> np.uint32(16))
        return rounded
    return lambda v, out: v


@intrinsic
def where_positive(typingctx, panel, reference):
    """``panel`` where ``reference > 0`` lane by lane, else 0 (a NaN reference: 0)."""
    if not isinstance(panel, Panel) or panel != reference:
        return None

    def codegen(context, builder, sig, args):
        positive = builder.fcmp_ordered(">", args[1], ir.Constant(args[1].type, None))
        return builder.select(positive, args[0], ir.Constant(args[0].type, None))

    return panel(panel, reference), codegen
