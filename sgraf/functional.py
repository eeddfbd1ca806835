"""Small tensor helpers shared by the SGRAF modules.

The normalisations keep the released code's epsilon placement (``x / (norm + eps)``), so
that scores of converted checkpoints match the original implementation.
"""

from __future__ import annotations

import torch
from torch import Tensor

EPS = 1e-8


def l2norm(x: Tensor, dim: int = -1, eps: float = EPS) -> Tensor:
    """``x / (||x||_2 + eps)`` along ``dim`` (released SGRAF convention; zero stays zero).

    ``vector_norm`` rather than ``sqrt(sum(x^2))``: its gradient at an all-zero vector is
    0 instead of NaN (the released code produces NaN gradients for all-zero regions).
    """
    return x / (torch.linalg.vector_norm(x, dim=dim, keepdim=True) + eps)


def l1norm(x: Tensor, dim: int = -1, eps: float = EPS) -> Tensor:
    """``x / (sum |x| + eps)`` along ``dim``."""
    return x / (x.abs().sum(dim=dim, keepdim=True) + eps)


def host_to_device(host: Tensor, device: torch.device | str) -> Tensor:
    """A CPU tensor (index or length bookkeeping) on ``device`` without the host waiting.

    A copy from pageable host memory to CUDA makes the host wait for the stream (torch copies
    and synchronises), so every small index moved that way inside a forward pass would drain
    the launch queue; from pinned memory with ``non_blocking`` the copy is queued like a
    kernel (torch keeps the pinned buffer alive until the copy has run). Elsewhere a plain copy.
    """
    device = torch.device(device)
    if device.type != "cuda" or host.device.type != "cpu":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def word_mask(lengths: Tensor, max_len: int) -> Tensor:
    """Boolean mask of real words.

    Args:
        lengths: (N,) integer lengths.
        max_len: padded length L.

    Returns:
        (N, L) bool, True where position < length.
    """
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.to(positions.device).unsqueeze(1)


def masked_softmax(logits: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to ``mask`` (masked entries get exactly 0).

    Every slice along ``dim`` must contain at least one True entry.
    """
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=dim)


class PackedWords:
    """Token-level caption features ``(n_cap, L, E)`` stored without padding.

    Evaluation keeps a split's word features for all-pairs scoring; padded to the longest
    caption they cost ``n_cap * L_max * E`` floats (about 6 GB for COCO 5K), packed only
    ``sum(lengths) * E``. Blocks are padded on demand by :meth:`padded`, with exactly the zeros
    a padded tensor holds, so scores are bit-identical.

    Attributes:
        data: (sum(lengths), E) the real words, caption after caption.
        lengths: (n_cap,) int64 words per caption.
        offsets: (n_cap + 1,) int64 start of each caption in ``data``.
    """

    def __init__(self, data: Tensor, lengths: Tensor) -> None:
        lengths = torch.as_tensor(lengths, dtype=torch.int64).cpu()
        if data.dim() != 2 or int(lengths.sum()) != data.shape[0]:
            raise ValueError(
                f"packed words must be (sum(lengths)={int(lengths.sum())}, E), got "
                f"{tuple(data.shape)}"
            )
        self.data = data
        self.lengths = lengths
        self.offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=self.offsets[1:])
        self.max_len = int(lengths.max()) if lengths.numel() else 0

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.lengths.numel(), self.max_len, self.data.shape[1]))

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    def dim(self) -> int:
        return 3

    def subset(self, start: int, stop: int) -> PackedWords:
        """Captions ``start:stop`` (a view of ``data``, no copy)."""
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return PackedWords(self.data[a:b], self.lengths[start:stop])

    def padded(self, index: Tensor, width: int) -> Tensor:
        """(len(index), width, E): captions ``index`` zero-padded (or cut) to ``width``.

        The gather's source rows and destination slots are computed on the host and reach
        the data's device in one queued copy (no boolean mask on the device: no host wait)."""
        index = torch.as_tensor(index, dtype=torch.int64).cpu()
        positions = torch.arange(width, dtype=torch.int64)
        mask = positions.unsqueeze(0) < self.lengths[index].unsqueeze(1)
        rows = (self.offsets[index].unsqueeze(1) + positions.unsqueeze(0))[mask]
        slots = torch.arange(mask.numel(), dtype=torch.int64)[mask.reshape(-1)]
        moved = host_to_device(torch.stack([rows, slots]), self.data.device)
        out = self.data.new_zeros(index.numel() * width, self.data.shape[1])
        out[moved[1]] = self.data[moved[0]]
        return out.view(index.numel(), width, -1)


def caption_words(cap_emb: Tensor | PackedWords, index: Tensor, width: int) -> Tensor:
    """Rows ``index`` of padded (n_cap, L, E) features, cut to ``width`` words (packed or not)."""
    if isinstance(cap_emb, PackedWords):
        return cap_emb.padded(index, width)
    return cap_emb[index.to(cap_emb.device), :width]
