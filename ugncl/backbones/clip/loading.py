"""CLIP weights from a local file: no hub, no pickled code, fp32, the right activation.

Rules (README "CLIP weights"):

* ``pretrained`` must be an existing file. A hub tag (``openai``, ``laion2b_s34b_b79k``,
  ``hf-hub:...``) fails at once: nothing here downloads (open_clip itself would try the hub
  and hang about 50 s offline before failing).
* Files are read with ``torch.load(weights_only=True)`` (``.safetensors`` with safetensors).
  A TorchScript archive (OpenAI's released ``ViT-B-32.pt``) is refused: its loader runs code
  from the archive. Convert it once with ``tools/convert_clip.py``
  (:func:`convert_torchscript`, the only caller that passes ``allow_torchscript=True``).
* Accepted layouts: a bare state dict (open_clip and OpenAI keys are the same names); the
  ``{"epoch", "name", "state_dict", "optimizer"}`` container NPC/SDD/OSA save (keys possibly
  ``module.``-prefixed); this package's own ``{"ugncl_clip": config, "state_dict": ...}``.
* Every floating tensor is cast to float32: the references keep fp16 master weights (OpenAI's
  ``convert_weights``), under which AdamW updates at lr 2e-7 round away. Autocast is the
  trainer's job.
* QuickGELU: OpenAI's CLIP was trained with ``x * sigmoid(1.702 x)``. Its weights load
  *silently* into a ``nn.GELU`` model and give different outputs. :func:`detect_quick_gelu`
  tells OpenAI weights by the keys TorchScript-era files carry (``input_resolution``,
  ``context_length``, ``vocab_size``) or by the mixed fp16/fp32 dtypes OpenAI's
  ``clip.load`` leaves (Linear/Conv weights fp16, LayerNorm fp32), which every NPC/SDD/OSA
  checkpoint has; :func:`resolve_quick_gelu` then picks QuickGELU, or refuses by name when
  the file cannot tell and nobody said.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from precomputed.errors import UserError
from ugncl.core.engine.checkpoint import save_checkpoint

__all__ = [
    "OPENAI_JIT_KEYS",
    "WEIGHTS_FORMAT_KEY",
    "LoadedWeights",
    "WeightsError",
    "convert_torchscript",
    "detect_quick_gelu",
    "is_torchscript_archive",
    "load_state_into",
    "read_weights",
    "resolve_quick_gelu",
]

#: Non-weight entries of OpenAI's TorchScript-era state dicts (dropped before loading).
OPENAI_JIT_KEYS = ("input_resolution", "context_length", "vocab_size")
#: Key of this package's checkpoints that holds the adapter config (quick_gelu included).
WEIGHTS_FORMAT_KEY = "ugncl_clip"

_WHERE = (
    "put the weights file on this machine (e.g. OpenAI's ViT-B/32 weights, converted once "
    "with tools/convert_clip.py) and set model.clip.pretrained=/path/to/file (a training "
    "checkpoint of this package, runs/<clip run>/checkpoints/best.pt, works too)"
)


_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".tar", ".safetensors", ".ckpt")


class WeightsError(UserError, ValueError):
    """A weights file that cannot be used as asked (message names the fix)."""


@dataclass
class LoadedWeights:
    """A state dict ready for ``load_state_dict`` plus what the file says about itself.

    Attributes:
        state_dict: fp32 (floating entries), no ``module.`` prefix, no TorchScript-era keys.
        quick_gelu: the activation the file was trained with; None when it cannot tell.
        evidence: how ``quick_gelu`` was told (for messages and the run record).
        meta: the container's ``epoch``/``name`` or this package's saved config.
    """

    state_dict: dict[str, Tensor]
    quick_gelu: bool | None
    evidence: str
    meta: dict = field(default_factory=dict)


def is_torchscript_archive(path: str | Path) -> bool:
    """True for a ``torch.jit.save`` archive (a zip with a ``code/`` folder of TorchScript)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any("/code/" in n or n.endswith("/constants.pkl") for n in z.namelist())


def _check_file(path: str | Path | None) -> Path:
    if path is None or not str(path).strip():
        raise WeightsError(f"no weights file given; {_WHERE}")
    p = Path(path).expanduser()
    if not p.is_file():
        what = "a directory" if p.is_dir() else "not an existing file"
        looks_like_tag = "/" not in str(path) and p.suffix not in _WEIGHT_SUFFIXES
        hint = (
            " (a hub tag or hub name: this package never downloads weights)"
            if looks_like_tag or str(path).startswith("hf-hub:")
            else ""
        )
        raise WeightsError(f"pretrained={str(path)!r} is {what}{hint}; {_WHERE}")
    return p


def _unwrap(obj: object, path: Path) -> tuple[dict, dict]:
    """(raw state dict, meta) of a loaded object in one of the accepted layouts."""
    if not isinstance(obj, dict):
        raise WeightsError(f"{path} holds a {type(obj).__name__}, not a state dict; {_WHERE}")
    meta: dict = {}
    if isinstance(obj.get("model"), dict) and "optimizer" in obj:
        # A training checkpoint of this package (best.pt / last.pt of a CLIP run): the
        # similarity model's weights are the open_clip model's under "model.".
        if obj.get("backbone") != "clip":
            raise WeightsError(
                f"{path} is a training checkpoint of a {obj.get('backbone') or 'non-CLIP'!r} "
                f"run, not of a CLIP run; {_WHERE}"
            )
        config = obj.get("model_config") if isinstance(obj.get("model_config"), dict) else {}
        if isinstance(config.get("quick_gelu"), bool):
            meta[WEIGHTS_FORMAT_KEY] = {"quick_gelu": config["quick_gelu"]}
        meta["epoch"] = obj.get("epoch")
        obj = {k[len("model.") :]: v for k, v in obj["model"].items() if k.startswith("model.")}
    if isinstance(obj.get("state_dict"), dict):
        meta = {k: obj[k] for k in ("epoch", "name", WEIGHTS_FORMAT_KEY) if k in obj}
        obj = obj["state_dict"]
    tensors = {k: v for k, v in obj.items() if isinstance(v, Tensor)}
    if not tensors or len(tensors) != len(obj):
        raise WeightsError(
            f"{path} is not a CLIP state dict (expected name -> tensor entries, optionally "
            "under 'state_dict'); " + _WHERE
        )
    # DataParallel/DDP wrappers (NPC/SDD/OSA save them that way) prefix every key.
    if all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module.") :]: v for k, v in tensors.items()}
    return tensors, meta


def detect_quick_gelu(state_dict: dict[str, Tensor], meta: dict) -> tuple[bool | None, str]:
    """What a raw state dict says about its activation: (quick_gelu or None, evidence)."""
    saved = meta.get(WEIGHTS_FORMAT_KEY)
    if isinstance(saved, dict) and isinstance(saved.get("quick_gelu"), bool):
        return saved[
            "quick_gelu"
        ], f"this package's checkpoint records quick_gelu={saved['quick_gelu']}"
    jit = [k for k in OPENAI_JIT_KEYS if k in state_dict]
    if jit:
        return True, f"OpenAI layout (TorchScript-era keys {', '.join(jit)})"
    # OpenAI's clip.load -> build_model -> convert_weights: Linear/Conv/projection weights fp16,
    # LayerNorm, embeddings and logit_scale fp32 (OpenAI's clip/model.py).
    half = [
        k for k in ("visual.conv1.weight", "text_projection", "visual.proj")
        if k in state_dict and state_dict[k].dtype == torch.float16
    ]  # fmt: skip
    ln = state_dict.get("ln_final.weight")
    if half and ln is not None and ln.dtype == torch.float32:
        return (
            True,
            "OpenAI layout (fp16 Linear/Conv weights beside fp32 LayerNorm, as left by clip.load)",
        )
    return None, "the file does not say which activation it was trained with"


def read_weights(path: str | Path | None, *, allow_torchscript: bool = False) -> LoadedWeights:
    """Read a local weights file without running code from it.

    Args:
        path: the file (anything else, a hub tag included, raises at once).
        allow_torchscript: read a TorchScript archive through ``torch.jit.load`` (runs the
            archive's TorchScript; only :func:`convert_torchscript` passes True).

    Raises:
        WeightsError: not a file, a TorchScript archive without opt-in, not a state dict.
    """
    p = _check_file(path)
    if is_torchscript_archive(p):
        if not allow_torchscript:
            raise WeightsError(
                f"{p} is a TorchScript archive (OpenAI's released format), whose loader runs "
                "code stored in the file; convert it once with "
                f"`python tools/convert_clip.py {p} <out.pt>` and point pretrained at <out.pt>"
            )
        obj: object = _jit_state_dict(p)
    elif p.suffix == ".safetensors":  # open_clip's hub format; tensors only by construction
        from safetensors.torch import load_file

        obj = load_file(str(p), device="cpu")
    else:
        if p.stat().st_size == 0:
            raise WeightsError(
                f"{p} is empty (0 bytes): its copy or download was cut off; copy it again"
            )
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:
            first = (str(e).splitlines() or [""])[0][:200]
            raise WeightsError(
                f"{p} cannot be read with torch.load(weights_only=True) ({type(e).__name__}"
                f"{': ' + first if first else ''}); it is truncated or not a weights file; save "
                "it as a plain dict of tensors"
            ) from e
    raw, meta = _unwrap(obj, p)
    quick_gelu, evidence = detect_quick_gelu(raw, meta)
    state = {
        k: (v.float() if v.is_floating_point() else v)
        for k, v in raw.items()
        if k not in OPENAI_JIT_KEYS
    }
    return LoadedWeights(state, quick_gelu, evidence, meta)


def resolve_quick_gelu(
    requested: bool | None,
    weights: LoadedWeights | None,
    config_default: bool | None,
    *,
    source: str,
) -> bool:
    """The activation to build: the user's setting, the file's, or the architecture's.

    Args:
        requested: the user's explicit ``quick_gelu`` (None = not set).
        weights: the file to load (None = random init).
        config_default: the architecture config's ``quick_gelu`` key (None = not declared).
        source: the file path, for messages.

    Raises:
        WeightsError: the user's setting contradicts the file, or a file that cannot tell
            meets an architecture that does not declare it and no user setting.
    """
    found = None if weights is None else weights.quick_gelu
    if requested is not None and found is not None and requested != found:
        raise WeightsError(
            f"quick_gelu={requested} contradicts {source}: {weights.evidence} -> "
            f"quick_gelu={found}; set model.clip.quick_gelu={str(found).lower()} or leave it unset "
            "(loading with the other activation runs silently with wrong outputs)"
        )
    if requested is not None:
        return requested
    if found is not None:
        return found
    if weights is not None and config_default is None:
        raise WeightsError(
            f"cannot tell whether {source} was trained with QuickGELU ({weights.evidence}); "
            "set model.clip.quick_gelu=true (OpenAI CLIP weights and their fine-tunes) or false "
            "(most open_clip LAION/DataComp weights)"
        )
    return bool(config_default)


def load_state_into(
    model: nn.Module, weights: LoadedWeights, *, source: str, model_name: str
) -> None:
    """Strict ``load_state_dict`` with a message that names the mismatch.

    Raises:
        WeightsError: missing/unexpected keys or shape mismatches.
    """
    state = dict(weights.state_dict)
    own = model.state_dict()
    if "logit_scale" in state and "logit_scale" in own:
        state["logit_scale"] = state["logit_scale"].reshape(own["logit_scale"].shape)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        parts = []
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)):
            if keys:
                parts.append(
                    f"{len(keys)} {what} ({'; '.join(keys[:3])}{' ...' if len(keys) > 3 else ''})"
                )
        raise WeightsError(
            f"{source} does not fit architecture {model_name!r}: {', '.join(parts)}; pick the "
            "architecture the weights were trained as (e.g. ViT-B-32 for OpenAI ViT-B/32)"
        )
    model.load_state_dict(state, strict=True)


def _jit_state_dict(path: Path) -> dict[str, Tensor]:
    """The state dict of a TorchScript archive; a damaged or crafted archive is a
    :class:`WeightsError`, not a traceback."""
    try:
        return torch.jit.load(str(path), map_location="cpu").state_dict()
    except Exception as e:  # torch.jit raises RuntimeError, ValueError, KeyError...
        first = (str(e).splitlines() or [""])[0][:200]
        raise WeightsError(
            f"{path} looks like a TorchScript archive but torch.jit.load cannot read it "
            f"({type(e).__name__}{': ' + first if first else ''}); it is damaged or not a CLIP "
            "model, copy or download it again"
        ) from e


#: Weights every CLIP model's state dict has (OpenAI's clip/model.py and open_clip alike).
CLIP_KEYS = ("token_embedding.weight", "ln_final.weight", "text_projection")


def convert_torchscript(src: str | Path, dst: str | Path) -> LoadedWeights:
    """One-time conversion of a TorchScript CLIP archive into a weights_only-loadable file.

    The output keeps the TorchScript-era keys (``input_resolution`` ...), so loading it still
    detects the OpenAI layout and picks QuickGELU. Tensors keep their dtypes (they are cast to
    fp32 when loaded for training).
    """
    p = _check_file(src)
    if not is_torchscript_archive(p):
        raise WeightsError(f"{p} is not a TorchScript archive; it loads directly as pretrained")
    raw = _jit_state_dict(p)
    missing = [k for k in CLIP_KEYS if k not in raw]
    if missing or not any(k.startswith("visual.") for k in raw):
        shown = ", ".join(list(raw)[:3]) or "none"
        raise WeightsError(
            f"{p} is a TorchScript archive but holds no CLIP model (no "
            f"{', '.join(missing) or 'visual.* weights'}; its first weights: {shown}); "
            "convert OpenAI's CLIP archive (e.g. ViT-B-32.pt)"
        )
    out = save_checkpoint({k: v.detach().clone() for k, v in raw.items()}, dst)
    return read_weights(out)
