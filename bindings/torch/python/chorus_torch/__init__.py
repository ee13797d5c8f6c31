"""chorus as a torch.distributed backend.

``import chorus_torch`` registers the backend ``"chorus"``::

    import torch.distributed as dist, chorus_torch
    dist.init_process_group("chorus")          # torchrun, or MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE

Every group (the default one and each ``new_group``) is its own chorus communicator: its rank 0
makes a chorus unique id and shares it through the group's c10d store. CPU tensors only.

The quantized collectives of chorus (ZeRO++-style group quantization) are module functions:
``all_reduce_quantized``, ``reduce_scatter_quantized``, ``all_gather_quantized``, and the local
``quantize`` / ``dequantize``; ``quantized_allreduce_hook`` is a DDP communication hook built on
the quantized all-reduce.
"""

import torch
import torch.distributed as dist

from . import _C
from ._C import ProcessGroupChorus

__all__ = [
    "ProcessGroupChorus",
    "all_reduce_quantized",
    "reduce_scatter_quantized",
    "all_gather_quantized",
    "quantize",
    "dequantize",
    "quantized_size",
    "quantized_allreduce_hook",
    "stats",
]

_UID_ROUND = "chorus/uid_round"


def _create(store, rank, size, timeout):
    # The group's store may have served an earlier group of the same name (a re-initialized
    # default group on a file store): number the rounds so a rank never reads a stale id.
    # Each round makes exactly `size` increments, one per rank.
    round_ = (store.add(_UID_ROUND, 1) - 1) // size
    key = f"chorus/uid/{round_}"
    if rank == 0:
        store.set(key, _C.unique_id())
    uid = store.get(key)
    return ProcessGroupChorus(uid, rank, size, timeout.total_seconds())


dist.Backend.register_backend("chorus", _create)


def _group(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def _quant_args(bits, mode, rounding, group_size, seed):
    return (int(bits), str(mode), str(rounding), int(group_size), int(seed))


def all_reduce_quantized(tensor, op="sum", *, bits=8, mode="symmetric", rounding="nearest",
                         group_size=256, seed=0, group=None, async_op=False):
    """All-reduce (op "sum" or "avg") whose messages carry group-quantized data
    (chorusAllReduceQuantized). float32, float16, bfloat16; in place."""
    work = _C._all_reduce_quantized(_group(group), tensor, op,
                                    *_quant_args(bits, mode, rounding, group_size, seed))
    if async_op:
        return work
    work.wait()
    return None


def reduce_scatter_quantized(output, input, op="sum", *, bits=8, mode="symmetric",
                             rounding="nearest", group_size=256, seed=0, group=None,
                             async_op=False):
    """Quantized reduce-scatter: `input` holds world_size x output.numel() elements; rank r gets
    the (quantized) sum of block r (chorusReduceScatterQuantized)."""
    work = _C._reduce_scatter_quantized(_group(group), output, input, op,
                                        *_quant_args(bits, mode, rounding, group_size, seed))
    if async_op:
        return work
    work.wait()
    return None


def all_gather_quantized(output, input, *, bits=8, mode="symmetric", rounding="nearest",
                         group_size=256, seed=0, group=None, async_op=False):
    """Quantized all-gather into `output` (world_size x input.numel() elements), identical on
    every rank (chorusAllGatherQuantized)."""
    work = _C._all_gather_quantized(_group(group), output, input,
                                    *_quant_args(bits, mode, rounding, group_size, seed))
    if async_op:
        return work
    work.wait()
    return None


def quantized_size(count, *, bits=8, mode="symmetric", rounding="nearest", group_size=256,
                   seed=0):
    """Bytes that `count` elements take once quantized (chorusQuantizedSize)."""
    return _C._quantized_size(count, *_quant_args(bits, mode, rounding, group_size, seed))


def quantize(tensor, *, bits=8, mode="symmetric", rounding="nearest", group_size=256, seed=0):
    """Group-quantizes `tensor` (float32/float16/bfloat16) into a uint8 tensor in chorus's packed
    format (chorusQuantize); local, no communication."""
    args = _quant_args(bits, mode, rounding, group_size, seed)
    out = torch.empty(_C._quantized_size(tensor.numel(), *args), dtype=torch.uint8)
    _C._quantize(tensor, out, *args)
    return out


def dequantize(quantized, count, dtype=torch.float32, *, bits=8, mode="symmetric",
               rounding="nearest", group_size=256, seed=0):
    """Decodes `count` elements quantized with the same parameters (chorusDequantize)."""
    out = torch.empty(count, dtype=dtype)
    _C._dequantize(quantized, out, *_quant_args(bits, mode, rounding, group_size, seed))
    return out


def stats(group=None):
    """The group's chorus traffic and algorithm counters, as text."""
    return _group(group).stats()


def quantized_allreduce_hook(state, bucket):
    """DDP communication hook: averages each gradient bucket with chorus's quantized all-reduce.

    ``model.register_comm_hook(state, quantized_allreduce_hook)`` where `state` is None (the
    default group, int8) or a dict with any of "group", "bits", "group_size", "mode",
    "rounding", "seed". float32/float16/bfloat16 gradients; buckets smaller than the group size
    fall back to the exact all-reduce (chorus requires group_size <= count).
    """
    state = state or {}
    group = state.get("group")
    group_size = state.get("group_size", 256)
    buf = bucket.buffer()
    if buf.numel() < group_size or buf.dtype not in (torch.float32, torch.float16,
                                                     torch.bfloat16):
        work = dist.all_reduce(buf, op=dist.ReduceOp.AVG, group=group, async_op=True)
    else:
        work = all_reduce_quantized(buf, "avg", bits=state.get("bits", 8),
                                    mode=state.get("mode", "symmetric"),
                                    rounding=state.get("rounding", "nearest"),
                                    group_size=group_size, seed=state.get("seed", 0),
                                    group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
