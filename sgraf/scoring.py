"""Block planning and all-pairs scoring of the SGRAF similarity head under a memory budget.

The released code loops over captions in Python; here every (image, caption) pair of a block
is scored at once, with padded words masked so that padding never changes a score, and the
(image, caption) grid is cut into blocks whose estimated working set fits a byte budget.
Captions are visited sorted by length so each block is trimmed to its longest caption.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from sgraf.attention import check_num_regions
from sgraf.functional import caption_words, host_to_device, word_mask

if TYPE_CHECKING:
    from sgraf.head import SimilarityHead

DEFAULT_MEMORY_BUDGET = 512 * 2**20
#: Share of a CUDA device's free memory one block may plan for; the rest is left to the
#: allocator's fragmentation, the caller's other tensors and (in training) the saved
#: activations of the earlier blocks.
DEVICE_MEMORY_SHARE = 0.5


def device_memory_budget(device: torch.device | str) -> int:
    """The working-set budget of one block on ``device`` when the caller sets none.

    On CUDA a share of the memory the process can still use: the device's free memory
    (``torch.cuda.mem_get_info``) plus what torch's caching allocator holds unused, so the
    plan does not shrink after the first step has filled the cache; never below
    :data:`DEFAULT_MEMORY_BUDGET`. Elsewhere :data:`DEFAULT_MEMORY_BUDGET` (the CPU's plan:
    small blocks keep the working set in cache and the CPU launches are cheap).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return DEFAULT_MEMORY_BUDGET
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(DEFAULT_MEMORY_BUDGET, int((free + cached) * DEVICE_MEMORY_SHARE))


def resolve_budget(budget: int | None, device: torch.device | str) -> int:
    """``budget`` itself, or :func:`device_memory_budget` of ``device`` for ``None``."""
    return device_memory_budget(device) if budget is None else int(budget)


def bytes_per_pair(
    n_words: int,
    n_regions: int,
    embed_dim: int,
    sim_dim: int,
    *,
    head: str = "sgr",
    sgr_steps: int = 3,
    itemsize: int = 4,
    autograd: bool = False,
) -> int:
    """Estimated peak working set of scoring one (image, caption) pair, in bytes.

    With ``autograd`` every intermediate stays alive for the backward pass: attention maps
    (3 R L), attended context and squared difference (2 L E), local alignment (3 L S),
    global alignment (E + 2 S), nodes, and per graph step the packed projection, edges and
    outputs. Without it (the no_grad path updates in place and frees stages) the peak is
    the larger of the attention stage (2 R L + L E) and the projection stage (L E + 2 L S),
    plus the node tensors of the head.
    """
    L, R, E, S = n_words, n_regions, embed_dim, sim_dim
    nodes = L + 1
    if head == "sgr":
        per_step = nodes * (2 * S + 2) + 2 * nodes * nodes + 2 * nodes * S
        head_elems = sgr_steps * per_step if autograd else per_step + 2 * nodes * S
    else:
        head_elems = 4 * nodes + 2 * nodes * S
    if autograd:
        elems = 3 * R * L + 2 * L * E + 3 * L * S + E + 2 * S + nodes * S + head_elems
    else:
        elems = max(2 * R * L + L * E, L * E + 2 * L * S) + E + nodes * S + head_elems
    return int(elems * itemsize)


def plan_blocks(
    n_img: int, n_cap: int, pair_bytes: int, budget: int, *, split_images: bool = True
) -> tuple[int, int]:
    """Block shape (images, captions) whose pair count fits ``budget // pair_bytes``.

    Square-ish blocks keep both GEMM sides large. With ``split_images=False`` (SAF in
    training mode, whose BatchNorm statistics span all images) only captions are split,
    even if one caption column exceeds the budget.
    """
    if budget <= 0:
        raise ValueError(f"memory_budget_bytes must be positive, got {budget}")
    pairs = max(1, budget // max(1, pair_bytes))
    if not split_images:
        return n_img, min(n_cap, max(1, pairs // max(1, n_img)))
    side = math.isqrt(pairs)
    rows = min(n_img, max(side, pairs // max(1, n_cap)))
    return max(1, rows), min(n_cap, max(1, pairs // max(1, rows)))


def check_pair_inputs(
    num_views: int,
    num_regions: int,
    img_emb: Tensor | ImageSource,
    cap_emb: Tensor,
    lengths: Tensor,
) -> None:
    """Shapes of encoded inputs: (W, n_img, R, E), (n_cap, L, E) and lengths in [1, L]."""
    if len(img_emb.shape) != 4 or img_emb.shape[0] != num_views:
        raise ValueError(
            f"img_emb must be (W={num_views}, n_img, R, E) as returned by encode_images, "
            f"got shape {tuple(img_emb.shape)}"
        )
    check_num_regions(img_emb.shape[2], num_regions)
    if cap_emb.dim() != 3 or lengths.shape != (cap_emb.shape[0],):
        raise ValueError(
            f"cap_emb must be (n_cap, L, E) with lengths (n_cap,), got {tuple(cap_emb.shape)} "
            f"and {tuple(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > cap_emb.shape[1]):
        raise ValueError(
            f"every caption needs 1 <= length <= L={cap_emb.shape[1]} to be scored, got lengths "
            f"in [{int(lengths.min())}, {int(lengths.max())}]; drop empty captions first"
        )


def score_pairs(
    head: SimilarityHead,
    img_emb: Tensor,
    cap_emb: Tensor,
    lengths: Tensor,
    *,
    memory_budget_bytes: int | None = None,
    block_captions: int | None = None,
) -> Tensor:
    """Raw scores of all (image, caption) pairs through ``head``, differentiable, in blocks.

    No step makes the host wait for the device: the plan reads the lengths on the host (a
    :class:`~ugncl.core.data.PairBatch` keeps them there; lengths on the device are read
    once), the length order and its inverse reach the device in one queued copy, and the
    blocks are joined and put back in caption order by device-side index_select.

    Args:
        head: the similarity head.
        img_emb: (W, n_img, R, E) image region embeddings (checked by the caller).
        cap_emb: (n_cap, L, E) word features.
        lengths: (n_cap,) real words per caption (>= 1).
        memory_budget_bytes: bound on the estimated working set of one block (``None``:
            :func:`device_memory_budget`: on CUDA half the free memory, which at batch 128
            and W = 2 is one block and about a third of the launches of 512 MiB's grid).
        block_captions: at most this many captions per block (``None``: the budget alone
            decides). Captions are visited sorted by length and each block is trimmed to its
            longest, so smaller blocks score fewer padded words: a CPU-sized training batch of
            32 (mean 9 words, longest ~17) in blocks of 8 cut the CPU time of a UGNCL training
            step by 25-30% (``SGRAF.block_captions``; docs/methods/ugncl.md). The scores
            are the same up to float rounding.

    Returns:
        (W, n_img, n_cap) raw scores, columns in the caption order of ``cap_emb``.
    """
    captions = CaptionOrder(lengths.detach().to("cpu", torch.int64), img_emb.device)
    img_glo = head.image_globals(img_emb)
    mask = word_mask(captions.lengths_on_device, cap_emb.shape[1])
    cap_glo = head.t_global_w(cap_emb, mask)
    stats: list = []
    budget = resolve_budget(memory_budget_bytes, img_emb.device)
    blocks = iter_blocks(
        head, img_emb, img_glo, cap_emb, cap_glo, captions, budget, stats,
        block_captions=block_captions,
    )  # fmt: skip
    rows: dict[int, list[Tensor]] = {}
    for img_start, _, block in blocks:
        rows.setdefault(img_start, []).append(block)
    parts = [torch.cat(rows[r], dim=2) if len(rows[r]) > 1 else rows[r][0] for r in sorted(rows)]
    sorted_scores = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
    commit_saf_stats(head, stats, captions.inverse_on_device)
    return sorted_scores.index_select(2, captions.inverse_on_device)


class CaptionOrder:
    """Captions sorted by length (stable), on the host and on the device.

    The host copy plans the blocks (their widths); the device copy (order, inverse, sorted
    lengths, lengths) arrives in one queued copy, so that indexing, masks and the final
    reordering never move an index from pageable host memory (which makes the host wait).

    Attributes:
        lengths: (n,) int64 on the host; order: (n,) positions sorted by length; inverse:
            its inverse permutation; ``*_on_device``: the same on ``device``.
    """

    def __init__(self, lengths: Tensor, device: torch.device | str) -> None:
        self.lengths = lengths
        self.order = torch.argsort(lengths, stable=True)
        self.inverse = torch.empty_like(self.order)
        self.inverse[self.order] = torch.arange(self.order.numel())
        host = torch.stack([self.order, self.inverse, lengths[self.order], lengths])
        moved = host_to_device(host, device)
        self.order_on_device, self.inverse_on_device = moved[0], moved[1]
        self.sorted_lengths_on_device, self.lengths_on_device = moved[2], moved[3]

    def __len__(self) -> int:
        return self.order.numel()


def iter_blocks(
    head: SimilarityHead,
    img_emb: Tensor,
    img_glo: Tensor,
    cap_emb: Tensor,
    cap_glo: Tensor,
    captions: CaptionOrder,
    budget: int,
    saf_stats: list,
    *,
    block_captions: int | None = None,
) -> Iterator[tuple[int, Tensor, Tensor]]:
    """Yield ``(image_start, caption_indices, raw (W, rows, cols) block)`` over the grid.

    Captions are visited sorted by length and each block is trimmed to its longest caption,
    which removes most padding work (exact, since padding is masked). A block holds all W
    views of its images, so ``view_reduce`` can be applied per block. Caption chunks are the
    outer loop: only one chunk of captions needs to be on the device at a time.

    Args:
        img_emb: (W, n_img, R, E) on the head's device; img_glo: (W, n_img, E) likewise.
        cap_emb: (n_cap, L, E) anywhere; cap_glo: (n_cap, E) anywhere.
        captions: the captions' lengths (>= 1) and their length order.
        block_captions: cap on the captions of one block (``None``: the budget's plan).
    """
    n_views, n_img, n_reg, dim = img_emb.shape
    device = img_emb.device
    train_saf = head.head == "saf" and head.training
    rows, cols = plan_grid(head, img_emb.shape, img_emb.element_size(), captions.lengths, budget,
                           split_images=not train_saf)  # fmt: skip
    if block_captions is not None:
        cols = min(cols, block_captions)
    folds = head.sgr.fold() if head.head == "sgr" else None
    for idx_cpu, words, mask, cglo in caption_chunks(cap_emb, cap_glo, captions, cols, device):
        for img_start in range(0, n_img, rows):
            sl = slice(img_start, img_start + rows)
            n_rows = img_emb[:, sl].shape[1]
            block = head.score_block(
                img_emb[:, sl].reshape(n_views * n_rows, n_reg, dim),
                img_glo[:, sl].reshape(n_views * n_rows, dim),
                words,
                cglo,
                mask,
                views=n_views,
                saf_stats=saf_stats,
                sgr_folds=folds,
            )
            yield img_start, idx_cpu, block.view(n_views, n_rows, -1)


def plan_grid(
    head: SimilarityHead,
    img_shape: tuple[int, ...],
    itemsize: int,
    lengths_cpu: Tensor,
    budget: int,
    *,
    split_images: bool = True,
) -> tuple[int, int]:
    """Block shape (images, captions) of the grid over ``(W, n_img, R, E)`` images and
    captions of ``lengths_cpu``: :func:`plan_blocks` with :func:`bytes_per_pair` of the head."""
    n_views, n_img, n_reg, dim = img_shape
    pair_bytes = n_views * bytes_per_pair(
        int(lengths_cpu.max()),
        n_reg,
        dim,
        head.sim_tranloc_w.out_features,
        head=head.head,
        sgr_steps=len(head.sgr.steps) if head.head == "sgr" else 0,
        itemsize=itemsize,
        autograd=torch.is_grad_enabled(),
    )
    return plan_blocks(n_img, lengths_cpu.numel(), pair_bytes, budget, split_images=split_images)


def caption_chunks(
    cap_emb: Tensor, cap_glo: Tensor, captions: CaptionOrder, cols: int, device: torch.device
) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Captions sorted by length in chunks of ``cols``: ``(indices on device, words
    (cols, L_b, E), mask (cols, L_b), globals (cols, E))``, each chunk trimmed to its longest
    caption and its padding exactly zero (on ``device``). Widths are read on the host."""
    for start in range(0, len(captions), cols):
        stop = min(start + cols, len(captions))
        idx_cpu = captions.order[start:stop]
        idx_dev = captions.order_on_device[start:stop]
        width = int(captions.lengths[captions.order[stop - 1]])  # sorted: the last is longest
        mask = word_mask(captions.sorted_lengths_on_device[start:stop], width)
        on_device = isinstance(cap_emb, Tensor) and cap_emb.device == idx_dev.device
        words = host_to_device(caption_words(cap_emb, idx_dev if on_device else idx_cpu, width),
                               device)  # fmt: skip
        words = words * mask.to(words.dtype).unsqueeze(-1)  # padding must be exactly zero
        glo_idx = idx_dev if cap_glo.device == idx_dev.device else idx_cpu
        yield idx_dev, words, mask, host_to_device(cap_glo[glo_idx], device)


def commit_saf_stats(head: SimilarityHead, stats: list, inverse: Tensor) -> None:
    """Apply collected SAF BatchNorm updates in (view, original caption) order; ``inverse``
    maps original caption positions to length-sorted ones (on the statistics' device)."""
    if not stats:
        return
    means = torch.cat([m for m, _ in stats], dim=1)
    variances = torch.cat([v for _, v in stats], dim=1)
    head.saf.update_running_stats(means[:, inverse], variances[:, inverse])


#: Images per ``image_globals`` call of :func:`score_all_pairs` (and per streamed chunk).
IMAGE_CHUNK = 1024


class ImageSource(Protocol):
    """Image embeddings ``(W, n_img, R, E)`` produced front to back, chunk by chunk.

    :func:`score_all_pairs` accepts one instead of a tensor so that a split's region
    embeddings (1.5 GB for COCO 5K at W = 2) need never be held at once: an evaluation
    encodes each chunk when it is asked for and drops it once scored.
    """

    @property
    def shape(self) -> tuple[int, int, int, int]: ...

    def chunks(self, size: int) -> Iterator[Tensor]:
        """Consecutive ``(W, <= size, R, E)`` float tensors covering all images in order."""
        ...


def image_chunks(img_emb: Tensor | ImageSource, size: int) -> Iterator[Tensor]:
    """Consecutive ``(W, <= size, R, E)`` chunks of a tensor (views) or an image source."""
    if isinstance(img_emb, Tensor):
        for start in range(0, img_emb.shape[1], size):
            yield img_emb[:, start : start + size]
    else:
        yield from img_emb.chunks(size)


class _RowWindow:
    """Region embeddings and globals of the images ``[start, stop)`` not yet scored, kept as
    pieces of consecutive chunks; :meth:`rows` returns a tile as one contiguous tensor."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, Tensor, Tensor]] = []  # (first image, regions, globals)
        self.start = self.stop = 0

    def add(self, regions: Tensor, glo: Tensor) -> None:
        self.pieces.append((self.stop, regions, glo))
        self.stop += regions.shape[1]

    def rows(self, a: int, b: int) -> tuple[Tensor, Tensor]:
        """``(W * (b - a), R, E)`` regions and ``(W * (b - a), E)`` globals of images a..b."""
        regions, globs = [], []
        for first, reg, glo in self.pieces:
            lo, hi = max(a, first), min(b, first + reg.shape[1])
            if lo < hi:
                regions.append(reg[:, lo - first : hi - first])
                globs.append(glo[:, lo - first : hi - first])
        reg = regions[0] if len(regions) == 1 else torch.cat(regions, dim=1)
        glo = globs[0] if len(globs) == 1 else torch.cat(globs, dim=1)
        return reg.reshape(-1, *reg.shape[2:]), glo.reshape(-1, glo.shape[-1])

    def drop_before(self, a: int) -> None:
        """Forget images before ``a``; a partly kept chunk is copied so the chunk is freed."""
        kept = []
        for first, reg, glo in self.pieces:
            n = reg.shape[1]
            if first + n <= a:
                continue
            if first < a:
                reg, glo, first = reg[:, a - first :].clone(), glo[:, a - first :].clone(), a
            kept.append((first, reg, glo))
        self.pieces, self.start = kept, a


class PairScoringNetwork(Protocol):
    """What :func:`score_all_pairs` reads of the network (:class:`sgraf.model.SGRAF` has it;
    named structurally so that this module does not import the model that imports it)."""

    num_views: int
    num_regions: int
    sim_enc: SimilarityHead
    training: bool

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def eval(self) -> PairScoringNetwork: ...

    def train(self, mode: bool = True) -> PairScoringNetwork: ...


@torch.no_grad()
def score_all_pairs(
    model: PairScoringNetwork,
    img_emb: Tensor | ImageSource,
    cap_emb: Tensor,
    lengths: Tensor,
    *,
    view_reduce: Callable[[Tensor], Tensor] | None = None,
    memory_budget_bytes: int | None = None,
    out_device: str | torch.device = "cpu",
    image_chunk: int = IMAGE_CHUNK,
) -> Tensor:
    """Score every (image, caption) pair of an evaluation split in shards.

    Each image and caption is encoded once beforehand (float32, one entry per image, not per
    caption), or images come chunk by chunk from an :class:`ImageSource`. The (image,
    caption) grid is cut into the blocks of :func:`plan_grid` (planned on the whole split),
    image globals are computed per ``image_chunk`` images; images are visited front to back
    (only the current chunk and the rows of an unfinished block are held, on the model's
    device), captions sorted by length per chunk. Every block sees exactly the inputs it
    would see with all images at once, so scores do not depend on how images arrive. The
    model runs in eval mode (BatchNorm running statistics, no dropout); its previous mode
    is restored afterwards.

    Args:
        model: the network.
        img_emb: (W, n_img, R, E) image embeddings from ``model.encode_images``, or an
            :class:`ImageSource` of them.
        cap_emb: (n_cap, L, E) caption features from ``model.encode_captions``, padded or
            packed (:class:`sgraf.functional.PackedWords`, padded block by block).
        lengths: (n_cap,) real words per caption (>= 1).
        view_reduce: maps a raw (W, a, b) shard to (a, b) (e.g. mean over views, or mean
            evidence); None keeps all views.
        memory_budget_bytes: bound on the estimated working set of one block (``None``:
            :func:`device_memory_budget` of the model's device).
        out_device: where the result matrix is allocated; the model's device keeps the
            blocks there (no copy and no host wait per block; the caller copies it once).
        image_chunk: images per ``image_globals`` call and per chunk asked of a source.

    Returns:
        float32 (W, n_img, n_cap) raw scores, or (n_img, n_cap) after ``view_reduce``.
    """
    check_pair_inputs(model.num_views, model.num_regions, img_emb, cap_emb, lengths)
    n_views, n_img = img_emb.shape[:2]
    n_cap = cap_emb.shape[0]

    def blocks() -> Iterator[tuple[slice, Tensor, Tensor]]:
        device = next(model.parameters()).device
        head = model.sim_enc
        captions = CaptionOrder(lengths.detach().to("cpu", torch.int64), device)
        l_pad = cap_emb.shape[1]
        cap_glo = torch.cat(
            [
                head.t_global_w(
                    host_to_device(caption_words(cap_emb, torch.arange(i, min(i + 1024, n_cap)),
                                                 l_pad), device),
                    word_mask(captions.lengths_on_device[i : i + 1024], l_pad),
                )
                for i in range(0, n_cap, 1024)
            ],
            dim=0,
        )  # fmt: skip
        itemsize = img_emb.element_size() if isinstance(img_emb, Tensor) else 4  # float32
        budget = resolve_budget(memory_budget_bytes, device)
        rows, cols = plan_grid(head, tuple(img_emb.shape), itemsize, captions.lengths, budget)
        folds = head.sgr.fold() if head.head == "sgr" else None
        window = _RowWindow()
        for chunk in image_chunks(img_emb, image_chunk):
            regions = chunk.to(device)
            window.add(regions, head.image_globals(regions))
            del chunk, regions
            # Score the whole blocks now available; a block cut by the chunk's end waits.
            stop = window.stop if window.stop == n_img else window.stop // rows * rows
            if stop <= window.start:
                continue
            for idx, words, mask, cglo in caption_chunks(cap_emb, cap_glo, captions, cols,
                                                         device):  # fmt: skip
                for img_start in range(window.start, stop, rows):
                    n_rows = min(rows, stop - img_start)
                    reg, glo = window.rows(img_start, img_start + n_rows)
                    block = head.score_block(
                        reg, glo, words, cglo, mask, views=n_views, sgr_folds=folds
                    ).view(n_views, n_rows, -1)
                    yield slice(img_start, img_start + n_rows), idx, block
            window.drop_before(stop)

    return blocked_all_pairs(
        blocks, (n_views, n_img, n_cap), model=model, view_reduce=view_reduce,
        out_device=out_device,
    )  # fmt: skip


@torch.no_grad()
def blocked_all_pairs(
    blocks: Callable[[], Iterable[tuple[slice, slice | Tensor, Tensor]]],
    shape: tuple[int, int, int],
    *,
    model: torch.nn.Module | None = None,
    view_reduce: Callable[[Tensor], Tensor] | None = None,
    out_device: str | torch.device = "cpu",
) -> Tensor:
    """The all-pairs loop every backbone's ``score_all_pairs`` runs: blocks of raw scores,
    each reduced over views and written into one float32 matrix, the model in eval mode.

    The blocking (how large, in which order, what a block costs) is the backbone's: SGRAF
    plans its head's working set and streams images (:func:`score_all_pairs`), a backbone
    whose score is a product of embeddings cuts the captions by the budget
    (``ugncl.core.similarity.SimilarityModel.score_all_pairs``). It lives here because
    ``sgraf`` is the lowest layer: ``ugncl`` imports it, never the reverse.

    Args:
        blocks: called once, in eval mode (it may encode globals first), it yields ``(image
            rows, caption columns (a slice or an index tensor), raw (W, rows, cols))``; every
            pair exactly once.
        shape: ``(W, n_img, n_cap)``.
        model: put in eval mode while ``blocks`` runs; its previous mode is restored.
        view_reduce: maps a raw (W, a, b) block to (a, b); None keeps the views.
        out_device: where the result is allocated.

    Returns:
        float32 (W, n_img, n_cap), or (n_img, n_cap) after ``view_reduce``.
    """
    n_views, n_img, n_cap = shape
    out_shape = (n_img, n_cap) if view_reduce is not None else (n_views, n_img, n_cap)
    out = torch.empty(out_shape, dtype=torch.float32, device=out_device)
    if n_img == 0 or n_cap == 0:
        return out
    was_training = model.training if model is not None else False
    if model is not None:
        model.eval()
    try:
        for rows, cols, raw in blocks():
            raw = raw.float()  # a reduced-precision block is reduced (evidence) in float32
            block = view_reduce(raw) if view_reduce is not None else raw
            if isinstance(cols, Tensor):
                cols = cols.to(out.device)
            out[..., rows, cols] = block.to(out.device, torch.float32)
        return out
    finally:
        if model is not None:
            model.train(was_training)
