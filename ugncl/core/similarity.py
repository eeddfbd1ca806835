"""The similarity-model interface every backbone implements (SGRAF today, CLIP next).

Evaluation and methods use only these calls, never a backbone's insides::

    img = model.encode_images(images)              # images along ``model.image_axis``
    cap = model.encode_captions(captions, lengths)  # (n_cap, ...)
    raw = model.score(img, cap, lengths)            # (W, n_img, n_cap), differentiable
    raw = model(images, captions, lengths)          # = score(encode_images, encode_captions)
    raw = model.score_all_pairs(img, cap, lengths, memory_budget_bytes=...)  # a whole split
    unit = model.unit_scores(raw)                  # the same scores without a temperature

Scores are raw: the method decides what they mean (sigmoid, evidence, logit-scaled cosine).
A method whose score function is set for scores a few units wide (UGNCL's evidence
``exp(tanh(r)/tau)``) reads them through ``unit_scores``: SGRAF's raw scores as they are,
CLIP's cosine (its raw score divided by the learned temperature ``logit_scale.exp()``).
``model.config`` is a plain dict that rebuilds the model through the backbone registry
(``ugncl.backbones.registry.BACKBONES[model.backbone]``); checkpoints store it with the
backbone name.

``sgraf.SGRAF`` implements the interface structurally (``sgraf`` never imports ``ugncl``) and
is registered as a virtual subclass in :mod:`ugncl.backbones.sgraf.backbone`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from sgraf.scoring import DEFAULT_MEMORY_BUDGET, blocked_all_pairs, resolve_budget

__all__ = ["DEFAULT_MEMORY_BUDGET", "SimilarityModel"]


class SimilarityModel(nn.Module, metaclass=abc.ABCMeta):
    """Base of the backbones: encode images, encode captions, score blocks and whole splits.

    Attributes:
        backbone: the registry key (class attribute).
        image_axis: the axis of ``encode_images``' output that indexes images (0 unless the
            backbone stacks views first, as SGRAF's (W, n, R, E)).
        num_views: W, the leading dimension of every raw score tensor.
        accepts_image_source: ``score_all_pairs`` also takes the images as an
            :class:`sgraf.scoring.ImageSource` (chunks on axis 1), so evaluation streams them
            instead of holding a split's image embeddings (class attribute).
        config: constructor arguments as plain types.
    """

    backbone: ClassVar[str] = ""
    image_axis: ClassVar[int] = 0
    accepts_image_source: ClassVar[bool] = False
    num_views: int
    config: dict[str, Any]

    @abc.abstractmethod
    def encode_images(self, images: Tensor) -> Tensor:
        """(n_img, ...) backbone inputs -> image embeddings (images on ``image_axis``)."""

    @abc.abstractmethod
    def encode_captions(self, captions: Tensor, lengths: Tensor) -> Tensor:
        """(n_cap, L) ids and (n_cap,) lengths -> (n_cap, ...) caption embeddings.

        Token-level embeddings are (n_cap, L_b, E) with L_b the batch's longest caption,
        zero beyond each caption's length (the evaluator pads batches to the longest).
        """

    @abc.abstractmethod
    def score(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> Tensor:
        """Raw (W, n_img, n_cap) scores of every (image, caption) pair; differentiable."""

    def unit_scores(self, raw: Tensor) -> Tensor:
        """Raw scores of this model -> the same scores on its unit scale, differentiable.

        The unit scale has no learned temperature: scores a few units wide, the scale that
        bounded functions of a score (UGNCL's evidence ``exp(tanh(r)/tau)``) are set for.
        Identity here (SGRAF's pre-sigmoid scores); a backbone that multiplies its scores by a
        temperature divides it out (CLIP: the cosine). Works on any shape of raw scores.
        """
        return raw

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor) -> Tensor:
        """(K images, K captions) -> raw (W, K, K) scores; rows images, columns captions."""
        return self.score(
            self.encode_images(images), self.encode_captions(captions, lengths), lengths
        )

    @torch.no_grad()
    def score_all_pairs(
        self,
        img_emb: Tensor,
        cap_emb: Tensor,
        lengths: Tensor | None = None,
        *,
        memory_budget_bytes: int | None = None,
        view_reduce: Callable[[Tensor], Tensor] | None = None,
        out_device: str | torch.device = "cpu",
    ) -> Tensor:
        """Score every pair of an encoded split in blocks of captions, in eval mode.

        The default cuts the captions into chunks whose ``(W, n_img, chunk)`` float32 block
        fits the budget and calls :meth:`score` on each (CLIP: a product of embeddings);
        backbones with a costlier pairwise head plan their own blocks (SGRAF by its working
        set); both run the one loop :func:`sgraf.scoring.blocked_all_pairs`.

        Args:
            img_emb: image embeddings of the split (images on ``image_axis``), on any device.
            cap_emb: (n_cap, ...) caption embeddings.
            lengths: (n_cap,) caption lengths (None for a backbone whose score ignores them).
            memory_budget_bytes: bound on one block's scores (``None``: the device's plan,
                :func:`sgraf.scoring.device_memory_budget`).
            view_reduce: maps a raw (W, a, b) block to (a, b); None keeps the views.
            out_device: where the result is allocated.

        Returns:
            float32 (W, n_img, n_cap), or (n_img, n_cap) after ``view_reduce``.
        """
        device = next(self.parameters()).device
        n_img, n_cap = img_emb.shape[self.image_axis], cap_emb.shape[0]
        budget = resolve_budget(memory_budget_bytes, device)
        chunk = max(1, budget // max(1, 4 * self.num_views * n_img))

        def blocks() -> Iterator[tuple[slice, slice, Tensor]]:
            images = img_emb.to(device)
            for a in range(0, n_cap, chunk):
                b = min(a + chunk, n_cap)
                part = None if lengths is None else lengths[a:b].to(device)
                yield (
                    slice(0, n_img),
                    slice(a, b),
                    self.score(images, cap_emb[a:b].to(device), part),
                )

        return blocked_all_pairs(
            blocks, (self.num_views, n_img, n_cap), model=self, view_reduce=view_reduce,
            out_device=out_device,
        )  # fmt: skip
