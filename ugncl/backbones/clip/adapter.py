"""``CLIPSimilarity``: an open_clip model behind the package's similarity-model interface.

The raw score of (image i, caption k) is ``logit_scale.exp() * cos(i, k)``, the x~100 scale
on which NPC, SDD and OSA put every threshold (docs/methods/weighted.md); ``unit_scores``
gives back the cosine, the scale UGNCL's evidence reads. Embeddings are L2-normalised by the
encoders, so evaluation encodes each image and caption once and scores by matrix products in
blocks.

One view (W = 1) by default. With ``num_views`` W > 1 the image tower ends in W projection
heads, UGNCL's W image views (on SGRAF: W image projections): head w maps the tower's
embedding ``e`` to ``e + e @ D_w``. Head 0 starts as the pretrained projection (``D_0 = 0``);
heads 1..W-1 start at a random ``D_w`` of relative size ``view_spread`` (``|e @ D_w|`` is about
``view_spread * |e|``), so the views start near the pretrained alignment and apart from one
another: W copies of one head would get the same gradients from a loss symmetric in the views
and never part. The text tower is shared.
"""

from __future__ import annotations

import logging
from pathlib import Path

import open_clip
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ugncl.core.engine.checkpoint import save_checkpoint
from ugncl.core.similarity import SimilarityModel

from .loading import (
    WEIGHTS_FORMAT_KEY,
    LoadedWeights,
    load_state_into,
    read_weights,
    resolve_quick_gelu,
)
from .models import TINY_MODEL, architecture_config, clip_tokenizer
from .pixels import PixelTransform, normalize_pixels, split_transform

__all__ = ["CLIPSimilarity", "build_clip", "init_view_heads", "save_clip_weights"]

#: ``view_spread`` of new heads: the extra views start about 0.3 rad (17 degrees) from the
#: pretrained projection's embedding.
DEFAULT_VIEW_SPREAD = 0.3


def init_view_heads(num_views: int, dim: int, spread: float) -> Tensor:
    """The starting ``(W, d, d)`` residual maps of W image projection heads.

    ``D_0 = 0`` (head 0 is the pretrained projection); ``D_w``, w >= 1, has i.i.d. normal
    entries of standard deviation ``spread / sqrt(d)``, so ``|e @ D_w| ~ spread * |e|`` for
    any ``e``. Drawn from the global generator: the run's seed decides the heads.
    """
    heads = torch.zeros(num_views, dim, dim)
    if num_views > 1:
        heads[1:].normal_(0.0, spread / dim**0.5)
    return heads


class CLIPSimilarity(SimilarityModel):
    """An open_clip ``CLIP`` as a one-view similarity model.

    Attributes:
        backbone: ``"clip"`` (the backbone registry name).
        num_views: W, the image projection heads (``config["num_views"]``, 1 if absent).
        model: the wrapped open_clip model (fp32 parameters; autocast is the trainer's job).
        view_heads: ``(W, d, d)`` residual maps of the heads (module docstring), None at W = 1.
        config: plain dict that rebuilds this model through :func:`build_clip`.
    """

    backbone = "clip"

    def __init__(self, model: nn.Module, config: dict) -> None:
        super().__init__()
        self.model = model
        self.config = dict(config)
        self.num_views = int(self.config.setdefault("num_views", 1))
        spread = float(self.config.setdefault("view_spread", DEFAULT_VIEW_SPREAD))
        if self.num_views < 1:
            raise ValueError(f"num_views must be >= 1, got {self.num_views}")
        self.view_heads: nn.Parameter | None = None
        if self.num_views > 1:
            dim = int(self.config["embed_dim"])
            self.view_heads = nn.Parameter(init_view_heads(self.num_views, dim, spread))

    @property
    def logit_scale(self) -> Tensor:
        """The learnable log temperature (``exp`` is ~100 for pretrained CLIP)."""
        return self.model.logit_scale

    @property
    def image_size(self) -> int:
        return int(self.config["image_size"])

    @property
    def context_length(self) -> int:
        return int(self.config["context_length"])

    def tokenizer(self) -> open_clip.tokenizer.SimpleTokenizer:
        """open_clip's BPE tokenizer (offline vocabulary) at this model's context length."""
        return clip_tokenizer(self.config["model_name"], self.context_length)

    def image_transform(self, *, train: bool = False):
        """open_clip's preprocessing (resize, centre crop, CLIP mean/std) for this model."""
        cfg = open_clip.get_model_preprocess_cfg(self.model)
        return open_clip.image_transform(
            cfg["size"], is_train=train, mean=cfg["mean"], std=cfg["std"],
            interpolation=cfg["interpolation"], resize_mode=cfg["resize_mode"],
        )  # fmt: skip

    def pixel_transform(self) -> PixelTransform:
        """The evaluation preprocessing split into its geometry (cached as uint8) and the
        normalisation :meth:`encode_images` applies to uint8 input."""
        return split_transform(self.image_transform(train=False))

    def encode_images(self, images: Tensor) -> Tensor:
        """(n, 3, H, W) pixels -> (n, d) L2-normalised image embeddings; (n, W, d), one per
        view, when the model has W > 1 views (images stay on axis 0).

        uint8 pixels (the pixel cache's) are normalised here, on their device, exactly as
        ``ToTensor`` + ``Normalize`` would on the host; float pixels are taken as normalised.
        """
        if images.dtype == torch.uint8:
            cfg = open_clip.get_model_preprocess_cfg(self.model)
            images = normalize_pixels(images, cfg["mean"], cfg["std"])
        emb = self.model.encode_image(images)
        if self.view_heads is None:
            return F.normalize(emb, dim=-1)
        views = emb.unsqueeze(1) + torch.einsum("nd,wde->nwe", emb, self.view_heads.to(emb))
        return F.normalize(views, dim=-1)

    def encode_captions(self, captions: Tensor, lengths: Tensor | None = None) -> Tensor:
        """(n, ctx) token ids (SOT ... EOT, zero padded) -> (n, d) L2-normalised embeddings.

        ``lengths`` is accepted for the interface and unused: CLIP pools at the EOT token
        (the largest id), which the padding cannot move.
        """
        if captions.shape[-1] != self.context_length:
            raise ValueError(
                f"captions have {captions.shape[-1]} tokens, the model's context is "
                f"{self.context_length}; tokenise with model.tokenizer()"
            )
        return F.normalize(self.model.encode_text(captions), dim=-1)

    def score(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor | None = None) -> Tensor:
        """(n_img, d) or (n_img, W, d), and (n_cap, d) -> (W, n_img, n_cap) raw float32
        scores ``logit_scale.exp() * cos`` (W = 1 for 2-D image embeddings).

        Computed in float32 with autocast off: on the x~100 scale bf16 would round a logit by
        up to 0.25 (fp16 by 0.03), and the (K, K) product is cheap next to the encoders.
        """
        with torch.autocast(img_emb.device.type, enabled=False):
            scale = self.logit_scale.float().exp()
            if img_emb.dim() == 2:
                return (scale * img_emb.float() @ cap_emb.float().t()).unsqueeze(0)
            return scale * torch.einsum("nwd,md->wnm", img_emb.float(), cap_emb.float())

    def unit_scores(self, raw: Tensor) -> Tensor:
        """Raw scores -> the cosine ``raw / logit_scale.exp()``, in [-1, 1] (the unit scale).

        Differentiable; the cosine does not depend on ``logit_scale``, so a loss on it gives the
        temperature no gradient (up to rounding).
        """
        return raw.float() / self.logit_scale.float().exp()

    def forward(self, images: Tensor, captions: Tensor, lengths: Tensor | None = None) -> Tensor:
        """(n_img, 3, H, W), (n_cap, ctx) -> (1, n_img, n_cap) raw scores."""
        return self.score(
            self.encode_images(images), self.encode_captions(captions, lengths), lengths
        )


def _drop_random_init_warning(record: logging.LogRecord) -> bool:
    return "No pretrained weights loaded" not in record.getMessage()


def build_clip(
    model_name: str = TINY_MODEL,
    pretrained: str | Path | None = None,
    quick_gelu: bool | None = None,
    *,
    image_size: int | None = None,
    context_length: int | None = None,
    num_views: int = 1,
    view_spread: float = DEFAULT_VIEW_SPREAD,
) -> CLIPSimilarity:
    """Build an open_clip architecture, optionally with weights from a local file.

    Args:
        model_name: a registered open_clip architecture (``ViT-B-32``, ``ugncl-tiny`` ...).
        pretrained: a weights file on this machine, or None for random init. Hub tags fail
            at once (:mod:`ugncl.backbones.clip.loading`); nothing downloads.
        quick_gelu: the activation; None lets the file (OpenAI layout -> True) or the
            architecture config decide, and refuses when neither can.
        image_size: override the architecture's image size (random init only: position
            embeddings of a file must fit).
        context_length: override the text context (same caveat).
        num_views: W image projection heads (1: the plain model).
        view_spread: the relative size of heads 1..W-1's random start (module docstring).

    Raises:
        ValueError: unknown architecture, remote name, a hub tag, an unreadable or
            mismatching file, or a QuickGELU conflict (:class:`WeightsError`).
    """
    cfg = architecture_config(model_name)
    weights: LoadedWeights | None = None
    if pretrained is not None:
        weights = read_weights(pretrained)
    use_quick_gelu = resolve_quick_gelu(
        quick_gelu, weights, cfg.get("quick_gelu"), source=str(pretrained)
    )
    # pretrained=None: open_clip never resolves a tag or touches the hub; the state dict is
    # loaded below. precision fp32 keeps fp32 master weights (the OpenAI loader casts to fp16).
    # open_clip then warns "No pretrained weights loaded" on the root logger: false once
    # load_state_into has run, and what was asked for a random init, so it is filtered out.
    root = logging.getLogger()
    root.addFilter(_drop_random_init_warning)
    try:
        model = open_clip.create_model(
            model_name, pretrained=None, precision="fp32", device="cpu",
            force_image_size=image_size, force_context_length=context_length,
            pretrained_image=False, pretrained_text=False, quick_gelu=use_quick_gelu,
        )  # fmt: skip
    finally:
        root.removeFilter(_drop_random_init_warning)
    if weights is not None:
        load_state_into(model, weights, source=str(pretrained), model_name=model_name)
    size = model.visual.image_size
    config = {
        "backbone": "clip",
        "model_name": model_name,
        "pretrained": None if pretrained is None else str(pretrained),
        "quick_gelu": use_quick_gelu,
        "image_size": int(size[0] if isinstance(size, tuple | list) else size),
        "context_length": int(model.context_length),
        "embed_dim": int(cfg["embed_dim"]),
        "num_views": int(num_views),
        "view_spread": float(view_spread),
    }
    return CLIPSimilarity(model, config)


def save_clip_weights(model: CLIPSimilarity, path: str | Path, **meta: object) -> Path:
    """Write ``{"ugncl_clip": config, "state_dict": fp32 weights, **meta}`` atomically.

    The file loads with ``weights_only=True`` and as ``pretrained=`` of :func:`build_clip`
    (its recorded ``quick_gelu`` is the detection evidence).
    """
    if model.num_views > 1:
        raise ValueError(
            f"a CLIP weights file holds one image projection; this model has {model.num_views} "
            "view heads (a training checkpoint keeps them)"
        )
    state = {k: v.detach().float().cpu().clone() for k, v in model.model.state_dict().items()}
    config = {**model.config, "pretrained": None}
    extra = {k: v for k, v in meta.items() if k not in ("state_dict", WEIGHTS_FORMAT_KEY)}
    return save_checkpoint({WEIGHTS_FORMAT_KEY: config, "state_dict": state, **extra}, path)
