"""Several processes, one run: PyTorch's DistributedDataParallel plus what the trainer and the
whole-set passes need on top of it.

``torchrun --nproc_per_node N tools/train.py --cfg ...`` sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_from_env` reads them and opens
the default process group (NCCL on CUDA, gloo on the CPU). Without them (``python
tools/train.py``) every helper here is the identity of a world of one, so single-process runs
take exactly the code path they took before.

What is sharded and how (docs/distributed.md has the user's view):

* Training: the epoch order is still ``epoch_order(seed, epoch)``; it is cut into global
  batches of ``train.batch_size`` (B) and rank r trains on slice ``[r*B/W, (r+1)*B/W)`` of each
  (:func:`shard_global_batches`). B must divide by W (:func:`check_global_batch`).
* In-batch losses whose negatives are the batch (every registered method): the model
  is wrapped in :class:`PairForward`, whose forward encodes the rank's micro-batch, gathers the
  caption embeddings and the score rows *with* gradient and returns the global ``(W, B, B)``
  matrix, so the method's loss is the one-process loss of the global batch; every rank computes
  it and DDP's gradient mean recovers the one-process gradient (see :class:`_AllGather`).
  Around that forward a :class:`sgraf.shard.BatchShard` names the rank's rows, so dropout draws
  the global batch's masks from one process's generator (these ranks are not reseeded by rank)
  and BatchNorm sums its statistics over the ranks. :func:`encode_global_batch` is the same
  forward returning the global batch's embeddings too (NPC's and SDD's bank pairs reuse
  them); :func:`mean_over_ranks` averages a gradient taken outside DDP (their siamese step).
* Whole-set passes (UGNCL's division, NPC's and SDD's banks, SDD's per-epoch GMM, OSA's
  estimator): rank r takes whole pass batches ``r::W`` and the per-sample arrays are merged
  with :func:`merge_rows`, so every rank holds the one-process result.
* Evaluation: each rank scores a contiguous block of image rows; :func:`gather_rows` joins the
  blocks, so every rank ranks the same matrix.
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from precomputed.errors import InvalidSettingError, UserError
from sgraf.shard import BatchShard, batch_shard

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a collective waits for a missing rank before the job fails (not a hang).
TIMEOUT_ENV = "UGNCL_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0

# A second process group for the collectives inside forward/backward (gathered features), so
# they never interleave with DDP's gradient buckets on the default group.
_GATHER_GROUP: Any = None


class RankLostError(UserError, RuntimeError):
    """Another process of the job stopped (killed, crashed, out of memory) or timed out."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in the job (``world == 1``: a plain single-process run)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def env_world() -> tuple[int, int, int]:
    """``(rank, world, local_rank)`` from torchrun's environment variables (0, 1, 0 without)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    return rank, world, local


def timeout_seconds() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise InvalidSettingError(f"{TIMEOUT_ENV}={raw!r}: give a positive number of seconds")
    return value


def init_from_env(device_name: str = "auto") -> tuple[DistEnv, str]:
    """Open the default process group when torchrun started this process.

    Returns ``(env, device_name)``: with CUDA each rank takes ``cuda:LOCAL_RANK`` (the
    config's ``train.device`` ``auto``/``cuda`` becomes that device), NCCL joins the GPUs;
    on the CPU gloo does. An already opened group (tests) is reused.
    """
    _, world, local = env_world()
    if world <= 1 and not (dist.is_available() and dist.is_initialized()):
        return DistEnv(), device_name
    use_cuda = device_name != "cpu" and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local)
        device_name = f"cuda:{local}"
    if not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(
            backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds())
        )
    env = DistEnv(dist.get_rank(), dist.get_world_size(), local, str(dist.get_backend()))
    global _GATHER_GROUP
    _GATHER_GROUP = dist.new_group(backend=env.backend) if env.world > 1 else None
    return env, device_name


def current() -> DistEnv:
    """The running job's :class:`DistEnv` (a world of one when no group is open)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistEnv()
    _, _, local = env_world()
    return DistEnv(dist.get_rank(), dist.get_world_size(), local, str(dist.get_backend()))


def world_size() -> int:
    return current().world


def is_main_process() -> bool:
    """True on rank 0 (and in a single-process run): the one process that writes files."""
    return current().rank == 0


def shutdown() -> None:
    """Close the process group (end of ``train``)."""
    global _GATHER_GROUP
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _GATHER_GROUP = None


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def _comm_device() -> torch.device:
    """Where tensors of a collective must live: NCCL needs the rank's GPU."""
    if current().backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_object(value: T) -> T:
    """Rank 0's ``value`` on every rank (run name, drawn seed)."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=_comm_device())
    return box[0]


def all_gather_object(value: Any) -> list[Any]:
    """``[value of rank 0, value of rank 1, ...]`` on every rank."""
    if world_size() == 1:
        return [value]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


def all_gather_state(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``state`` (tensors included, e.g. RNG states) on every rank; the states
    travel as ``torch.save`` bytes (``all_gather_object`` cannot carry tensors on gloo)."""
    if world_size() == 1:
        return [state]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    blobs = all_gather_object(buffer.getvalue())
    return [torch.load(io.BytesIO(b), weights_only=True) for b in blobs]


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 only and give its result to every rank; an exception raised there
    (a run directory that exists, ...) is raised on every rank, so none waits forever."""
    if world_size() == 1:
        return fn()
    outcome: tuple[bool, Any] = (True, None)
    if is_main_process():
        try:
            outcome = (True, fn())
        except Exception as err:
            try:
                pickle.dumps(err)
                outcome = (False, err)
            except Exception:
                outcome = (False, RuntimeError(f"{type(err).__name__}: {err}"))
    ok, value = broadcast_object(outcome)
    if not ok:
        raise value
    return value


# ----------------------------------------------------------------------------- batches
def check_global_batch(batch_size: int, world: int) -> int:
    """Per-rank batch of a global ``batch_size`` over ``world`` ranks.

    Raises:
        InvalidSettingError: ``batch_size`` does not divide by ``world``. Padding or uneven
            micro-batches would change the loss (its negatives, its mean) against one process.
    """
    if world > 1 and batch_size % world:
        lower = batch_size - batch_size % world
        raise InvalidSettingError(
            f"train.batch_size={batch_size} does not divide over {world} processes; the global "
            f"batch is split evenly across ranks, so use a multiple of {world} "
            f"(e.g. train.batch_size={lower} or {lower + world})"
        )
    return batch_size // max(world, 1)


def shard_global_batches(batches: Sequence[Sequence[int]], env: DistEnv) -> list[list[int]]:
    """Rank ``env.rank``'s slice of each global batch (global batches divide by the world)."""
    out = []
    for batch in batches:
        per = len(batch) // env.world
        out.append(list(batch[env.rank * per : (env.rank + 1) * per]))
    return out


def shard_pass_batches(batches: Sequence[Sequence[int]], env: DistEnv) -> list[list[int]]:
    """Whole batches ``rank::world`` of a pass: every batch is computed as in one process
    (its in-batch rivals unchanged), every sample on exactly one rank."""
    return [list(b) for b in batches[env.rank :: env.world]]


# ----------------------------------------------------------------------------- merging
def merge_rows(values: np.ndarray, visited: np.ndarray) -> np.ndarray:
    """Join per-sample arrays that each rank filled for the samples it visited.

    Each rank sends only what it owns: the indices of its visited rows and those rows' bytes
    in their own dtype (:func:`owned_rows`), gathered from every rank; not a dense float64
    copy of the whole table (an all-reduce of ``N x row x 8`` bytes whatever the share each
    rank filled). The result is exact: every visited row is its rank's value, bit for bit.

    Args:
        values: ``(N, ...)`` this rank's array; rows it did not visit hold the fill value
            (NaN, -1), which stays where no rank visited.
        visited: ``(N,)`` bool, the rows this rank filled.

    Returns:
        ``(N, ...)`` with every visited row from its rank.

    Raises:
        RuntimeError: a row was filled by two ranks (the pass was not sharded).
    """
    if world_size() == 1:
        return values
    values = np.asarray(values)
    index, payload = owned_rows(values, visited)
    indices = [t.numpy() for t in _all_gather_rows(torch.from_numpy(index))]
    rows = [t.numpy() for t in _all_gather_rows(torch.from_numpy(payload))]
    every = np.concatenate(indices)
    repeated = every.size - np.unique(every).size
    if repeated:
        raise RuntimeError(
            f"{repeated} samples were computed on more than one rank; "
            "a whole-set pass must take its batches from MethodContext.batches (sharded)"
        )
    merged = np.array(values, copy=True)
    row_shape, dtype = values.shape[1:], values.dtype
    merged[every] = np.concatenate(rows).view(dtype).reshape((every.size, *row_shape))
    return merged


def owned_rows(values: np.ndarray, visited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a rank sends for :func:`merge_rows`: ``(k,)`` int64 indices of its visited rows
    and ``(k, row bytes)`` uint8, those rows' bytes in the array's own dtype."""
    values = np.ascontiguousarray(values)
    index = np.flatnonzero(np.asarray(visited, dtype=bool)).astype(np.int64)
    row_items = int(np.prod(values.shape[1:], dtype=np.int64))
    row_bytes = values.dtype.itemsize * row_items
    # Explicit row sizes: a rank that visited no row (fewer pass batches than ranks) sends
    # an empty payload, where ``reshape(0, -1)`` cannot infer the row size.
    rows = values[index].reshape(index.size, row_items)
    payload = rows.view(np.uint8).reshape(index.size, row_bytes)
    return index, payload


def _all_gather_rows(tensor: Tensor) -> list[Tensor]:
    """Every rank's ``tensor`` (same trailing shape, any number of rows), in rank order: row
    counts first, then one gather of the tensors padded to the longest."""
    device = _comm_device()
    count = torch.tensor([tensor.shape[0]], dtype=torch.int64, device=device)
    counts = [torch.empty_like(count) for _ in range(world_size())]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in torch.cat(counts).cpu()]
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    out = [torch.empty_like(padded, device=device) for _ in sizes]
    dist.all_gather(out, padded.to(device))
    return [t[:n].cpu() for t, n in zip(out, sizes)]


def gather_blocks(block: Tensor) -> Tensor:
    """Every rank's ``block`` (any number of rows, the same trailing shape and dtype)
    concatenated in rank order, on every rank, on the CPU (no gradient)."""
    if world_size() == 1:
        return block
    return torch.cat(_all_gather_rows(block))


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum over ranks of a few float64 scalars (running totals of a pass)."""
    if world_size() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t)
    return t.cpu().tolist()


def row_block(n: int, env: DistEnv | None = None) -> tuple[int, int]:
    """``[start, stop)`` of rank ``env.rank``'s contiguous block of ``n`` rows (sizes differ by
    at most one)."""
    env = env or current()
    base, extra = divmod(n, env.world)
    start = env.rank * base + min(env.rank, extra)
    return start, start + base + (1 if env.rank < extra else 0)


def gather_rows(block: Tensor, n: int) -> Tensor:
    """Concatenate every rank's :func:`row_block` of an ``(rows, ...)`` tensor -> ``(n, ...)``
    on every rank (no gradient; evaluation's score matrix)."""
    env = current()
    if env.world == 1:
        return block
    sizes = [row_block(n, DistEnv(r, env.world)) for r in range(env.world)]
    longest = max(b - a for a, b in sizes)
    dev = _comm_device()
    padded = torch.zeros((longest, *block.shape[1:]), dtype=block.dtype, device=dev)
    padded[: block.shape[0]] = block.to(dev)
    out = [torch.empty_like(padded) for _ in range(env.world)]
    dist.all_gather(out, padded)
    parts = [o[: b - a] for o, (a, b) in zip(out, sizes)]
    return torch.cat(parts).to(block.device)


# ----------------------------------------------------------------------------- gradients
class _AllGather(torch.autograd.Function):
    """All-gather along dim 0 that keeps the graph (open_clip's ``gather_with_grad``).

    Backward sums every rank's gradient of the gathered tensor and returns this rank's slice:
    each rank computes the same global loss L, so this rank's rows receive ``W * dL/drows``,
    and DDP's mean over W ranks leaves exactly the one-process gradient ``dL/dtheta``.
    """

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any) -> Tensor:
        ctx.group = group
        ctx.rank = dist.get_rank(group)
        ctx.rows = tensor.shape[0]
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, tensor.contiguous(), group=group)
        return torch.cat(out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows], None


def gather_with_grad(tensor: Tensor, dim: int = 0) -> Tensor:
    """Every rank's ``tensor`` concatenated along ``dim`` (equal sizes along ``dim``), other
    dims zero-padded to the largest rank's (caption word features of different lengths);
    gradients flow back to each rank's own part."""
    if world_size() == 1:
        return tensor
    moved = _pad_to_largest(tensor.movedim(dim, 0))
    return _AllGather.apply(moved, _GATHER_GROUP).movedim(0, dim)


def _pad_to_largest(tensor: Tensor) -> Tensor:
    """``tensor`` zero-padded at the end of every dim but the first to the largest rank's."""
    shape = torch.tensor(tensor.shape[1:], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(shape, op=dist.ReduceOp.MAX, group=_GATHER_GROUP)
    pad: list[int] = []
    for have, want in zip(reversed(tensor.shape[1:]), reversed(shape.tolist())):
        pad += [0, int(want) - int(have)]
    return nn.functional.pad(tensor, pad) if any(pad) else tensor


def gather_no_grad(tensor: Tensor) -> Tensor:
    """Every rank's ``tensor`` (equal shapes) concatenated along dim 0, without graph, on
    ``tensor``'s device (host bookkeeping such as caption lengths travels through the
    backend's device and comes back)."""
    if world_size() == 1:
        return tensor
    sent = tensor.detach().contiguous().to(_comm_device())
    out = [torch.empty_like(sent) for _ in range(world_size())]
    dist.all_gather(out, sent, group=_GATHER_GROUP)
    return torch.cat(out).to(tensor.device)


def gather_padded(tensor: Tensor) -> Tensor:
    """Every rank's ``tensor`` concatenated along dim 0 without graph, the other dims
    zero-padded to the largest rank's (0-padded caption tokens: the global batch's tokens,
    padded to its longest caption as one process's collate pads them)."""
    if world_size() == 1:
        return tensor
    return gather_no_grad(_pad_to_largest(tensor.detach()))


def mean_over_ranks(tensors: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Element-wise mean over the ranks of each tensor (``None`` stays ``None``; every rank
    must hold the same shapes and the same ``None`` entries), one all-reduce per dtype.

    The gradient of a loss every rank computes alike from gathered features is, on rank r,
    ``W`` times the part that flows through rank r's own rows (:class:`_AllGather`), plus the
    whole gradient of what every rank computes itself; its mean over the ranks is the
    one-process gradient, as DDP's mean is for the model's own step."""
    out = list(tensors)
    if world_size() == 1:
        return out
    world = world_size()
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(out):
        if t is not None:
            by_dtype.setdefault(t.dtype, []).append(i)
    for positions in by_dtype.values():
        parts = [out[i] for i in positions]
        flat = torch.cat([p.detach().reshape(-1) for p in parts]).to(_comm_device())
        dist.all_reduce(flat, group=_GATHER_GROUP)
        flat = (flat / world).to(parts[0].device)
        for i, p, piece in zip(positions, parts, flat.split([p.numel() for p in parts])):
            out[i] = piece.view_as(p)
    return out


@dataclass
class GlobalPairs:
    """The global batch encoded and scored with graph (:func:`encode_global_batch`)."""

    images: Tensor  # image embeddings of the B images, images on the model's image axis
    captions: Tensor  # (B, ...) caption embeddings
    lengths: Tensor  # (B,) caption lengths
    scores: Tensor  # (W, B, B) raw scores, rows images, columns captions


def encode_global_batch(
    model: Any, images: Tensor, captions: Tensor, lengths: Tensor, image_axis: int = 0
) -> GlobalPairs:
    """Encode the rank's micro-batch and return the global batch's embeddings and score matrix,
    all with gradient (for a method that needs the embeddings beside the matrix: NPC's and
    SDD's bank pairs reuse the batch's rows).

    In one process: ``encode_images``, ``encode_captions`` and ``score`` of the batch, the
    model's own forward. With several: as :class:`PairForward`'s gathered forward (the rank's
    rows under its :class:`~sgraf.shard.BatchShard`, captions gathered before scoring, the
    rows gathered after), and the image embeddings gathered too. A loss every rank computes
    from these is the one-process loss, and DDP's mean of the gradients the one-process
    gradient (see :class:`_AllGather`).
    """
    img, cap, all_lengths, rows = _score_rank_rows(model, images, captions, lengths)
    return GlobalPairs(gather_with_grad(img, dim=image_axis), cap, all_lengths,
                       gather_with_grad(rows, dim=1))  # fmt: skip


def _score_rank_rows(
    model: Any, images: Tensor, captions: Tensor, lengths: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(rank's image embeddings, global caption embeddings, global lengths, rank's rows of
    the (W, B, B) scores)``. Layers with batch statistics or dropout (sgraf.shard) see this
    rank's rows as rows of the global batch: the masks and statistics of one process."""
    with batch_shard(global_batch_shard(images.shape[0])):
        img = model.encode_images(images)
        cap = gather_with_grad(model.encode_captions(captions, lengths), dim=0)
        all_lengths = gather_no_grad(lengths)
        return img, cap, all_lengths, model.score(img, cap, all_lengths)


class PairForward(nn.Module):
    """What DDP wraps: a similarity model whose forward can score the *global* batch.

    ``forward(images, captions, lengths)`` with ``gather=True``: encode this rank's micro-batch,
    gather the caption embeddings with gradient, score this rank's images against every caption
    (the rank's rows of the global matrix: the SGRAF cross-attention cost is split over the
    ranks), gather the rows with gradient -> raw ``(W, B, B)``, rows and columns in global batch
    order. ``gather=False``: the model's own forward on the micro-batch. ``call="name"``: the
    model's ``encode_images`` / ``encode_captions`` / ``score`` through DDP's forward, so
    methods that encode pieces (NPC, SDD) still get their gradients averaged.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, gather: bool = False, call: str | None = None) -> Tensor:
        if call is not None:
            return getattr(self.model, call)(*args)
        if not gather:
            return self.model(*args)
        rows = _score_rank_rows(self.model, *args)[3]  # (W, B/world, B)
        return gather_with_grad(rows, dim=1)


def global_batch_shard(local_rows: int) -> BatchShard | None:
    """This rank's rows ``[rank * n, (rank + 1) * n)`` of a global batch of ``world * n`` rows
    (:func:`shard_global_batches`'s slices), on the group of the in-forward collectives;
    ``None`` in one process."""
    if world_size() == 1:
        return None
    rank = dist.get_rank(_GATHER_GROUP)
    return BatchShard(rank * local_rows, world_size() * local_rows, _GATHER_GROUP)


class DistributedModel:
    """The model as a method's ``training_step`` sees it in a multi-process run.

    Calling it runs DDP's forward (global matrix for ``gathered`` negatives, the micro-batch's
    for ``per_rank``); ``encode_images`` / ``encode_captions`` / ``score`` go through DDP too;
    every other attribute (``logit_scale``, ``parameters()``, ``modules()``) is the model's.
    """

    def __init__(self, ddp: nn.Module, *, gathered: bool) -> None:
        self.__dict__["_ddp"] = ddp
        self.__dict__["_gathered"] = gathered

    @property
    def module(self) -> nn.Module:
        return self._ddp.module.model

    def __call__(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        return self._ddp(images, captions, lengths, gather=self._gathered)

    def encode_images(self, images: Tensor) -> Tensor:
        return self._ddp(images, call="encode_images")

    def encode_captions(self, captions: Tensor, lengths: Tensor | None = None) -> Tensor:
        return self._ddp(captions, lengths, call="encode_captions")

    def score(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor | None = None) -> Tensor:
        return self._ddp(img_emb, cap_emb, lengths, call="score")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


def wrap_model(model: nn.Module, device: torch.device) -> nn.Module:
    """``DistributedDataParallel(PairForward(model))`` on ``device``; on CUDA the model's
    BatchNorm layers become SyncBatchNorm first (the global batch's statistics). gloo has no
    SyncBatchNorm: on the CPU the model's ``sgraf.shard`` layers take the global batch's
    statistics and dropout masks inside :class:`PairForward`'s gathered forward."""
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return DistributedDataParallel(
        PairForward(model), device_ids=[device.index] if device.type == "cuda" else None
    )


def is_collective_failure(err: BaseException) -> bool:
    """A collective that failed because a peer is gone or timed out (not a bug of ours)."""
    backend_error = getattr(dist, "DistBackendError", ())
    if backend_error and isinstance(err, backend_error):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        s in text
        for s in ("connection closed", "connection reset", "timed out", "broken pipe", "gloo")
    )


def rank_lost(err: BaseException, run_dir: Any) -> RankLostError:
    """The error line of a job whose peer stopped: what happened and how to continue."""
    env = current()
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return RankLostError(
        f"rank {env.rank} of {env.world}: another process of the job stopped or did not answer "
        f"within {TIMEOUT_ENV}={timeout_seconds():g}s ({first}); the job ends here. Continue it "
        f"from its last checkpoint with torchrun --nproc_per_node {env.world} tools/train.py "
        f"--resume {run_dir}"
    )
