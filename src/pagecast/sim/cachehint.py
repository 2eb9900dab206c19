"""``prefetch_hint(array, index)``: a CPU cache prefetch for numba kernels (``njit`` code).

The simulators' loops read per-page state at random ids; whether a page is resident
decides a branch, so every mispredicted branch waits for that load to come from memory.
Hinting the state of an access a few rows ahead (``llvm.prefetch``, a no-op if the
address is bad) lets those loads overlap instead. A plain load would not do: it holds up
retirement until its data arrives.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch_hint(typingctx, arr, idx):
    """Hint that ``arr[idx]`` (1-d array, integer index) will be read and written soon."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [index], wraparound=False)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # rw=1 (the page's state is written back), locality=3 (keep in all levels), data cache
        builder.call(fn, [ptr, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen
