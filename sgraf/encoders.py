"""Image (W views) and caption encoders of SGRAF (its release's model.py)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from sgraf.functional import host_to_device, l2norm, word_mask
from sgraf.shard import ShardDropout


def xavier_linear_(layer: nn.Linear) -> None:
    """Released SGRAF init: U(-r, r), r = sqrt(6 / (fan_in + fan_out)), bias 0."""
    r = math.sqrt(6.0) / math.sqrt(layer.in_features + layer.out_features)
    nn.init.uniform_(layer.weight, -r, r)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


class ImageEncoder(nn.Module):
    """W independent linear projections of the same region features, each l2-normalised.

    W = 1 is plain SGRAF (`fc`), W = 2 is UGNCL (`fc1`, `fc2`). The precomputed bottom-up
    features are used as they are (the released code applies no input normalisation).
    """

    def __init__(self, img_dim: int, embed_dim: int, num_views: int = 1) -> None:
        super().__init__()
        if num_views < 1:
            raise ValueError(f"num_views must be >= 1, got {num_views}")
        self.fc = nn.ModuleList(nn.Linear(img_dim, embed_dim) for _ in range(num_views))
        for layer in self.fc:
            xavier_linear_(layer)

    @property
    def num_views(self) -> int:
        return len(self.fc)

    def forward(self, images: Tensor) -> Tensor:
        """Project regions into every view.

        Args:
            images: (B, R, D) region features.

        Returns:
            (W, B, R, E) l2-normalised region embeddings.
        """
        return torch.stack([l2norm(fc(images), dim=-1) for fc in self.fc], dim=0)


class TextEncoder(nn.Module):
    """Word embedding -> dropout -> 1-layer (bi)GRU, directions averaged -> l2norm.

    Captions need not be sorted by length (packing uses ``enforce_sorted=False``). Padded
    positions and zero-length captions give all-zero rows.
    """

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        embed_dim: int,
        *,
        bi_gru: bool = True,
        word_dropout: float = 0.4,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.dropout = ShardDropout(word_dropout)
        self.cap_rnn = nn.GRU(word_dim, embed_dim, 1, batch_first=True, bidirectional=bi_gru)
        self.bi_gru = bi_gru
        self.embed_dim = embed_dim
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def forward(self, captions: Tensor, lengths: Tensor) -> Tensor:
        """Encode padded token ids.

        Args:
            captions: (B, L) int64 ids, padded with anything (positions >= length are ignored).
            lengths: (B,) number of real tokens per caption, 0 <= length <= L.

        Returns:
            (B, L, E) l2-normalised word features, exactly zero at padded positions.
        """
        batch, max_len = captions.shape
        lengths = torch.as_tensor(lengths)
        if lengths.shape != (batch,):
            raise ValueError(
                f"lengths must have shape ({batch},) to match captions {tuple(captions.shape)}, "
                f"got {tuple(lengths.shape)}"
            )
        # Lengths are host bookkeeping (PairBatch keeps them on the CPU): read there, no wait.
        lengths_cpu = lengths.to("cpu", torch.int64)
        if batch and (int(lengths_cpu.min()) < 0 or int(lengths_cpu.max()) > max_len):
            raise ValueError(
                f"caption lengths must lie in [0, {max_len}] (the padded width), got "
                f"min {int(lengths_cpu.min())} max {int(lengths_cpu.max())}"
            )
        out = torch.zeros(
            batch, max_len, self.embed_dim, device=captions.device, dtype=self.embed.weight.dtype
        )
        if batch == 0 or max_len == 0:
            return out
        x = self.dropout(self.embed(captions))
        # pack_padded_sequence rejects zero lengths: run them as length 1 and zero them after.
        # The sort by length is done here on the host and its permutations reach the device
        # in one queued copy; torch's own unsorted packing copies its permutation from
        # pageable memory, which makes the host wait for the device.
        sorted_len, order = torch.sort(lengths_cpu.clamp(min=1), descending=True, stable=True)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(batch)
        moved = host_to_device(torch.stack([order, inverse, lengths_cpu]), captions.device)
        packed = pack_padded_sequence(
            x.index_select(0, moved[0]), sorted_len, batch_first=True, enforce_sorted=True
        )
        # A deep copy (NPC's and SDD's siamese copy, OSA's estimator) or a state loaded by
        # assignment leaves cuDNN's weights in separate chunks, which the GRU then compacts
        # on every call (a warning on CUDA, seen in the GPU check); re-flattening is a check
        # of pointers when they are already one chunk, and a no-op off CUDA.
        self.cap_rnn.flatten_parameters()
        hidden, _ = self.cap_rnn(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=max_len)
        hidden = hidden.index_select(0, moved[1])
        if self.bi_gru:
            # The released code averages the two directions rather than concatenating them.
            hidden = (hidden[..., : self.embed_dim] + hidden[..., self.embed_dim :]) / 2
        hidden = l2norm(hidden, dim=-1)
        mask = word_mask(moved[2], max_len)
        return torch.where(mask.unsqueeze(-1), hidden, out)
