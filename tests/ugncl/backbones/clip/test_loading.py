"""CLIP weights: local files only, no pickled code, fp32, QuickGELU told from the OpenAI layout."""

from __future__ import annotations

import argparse
import time

import open_clip
import pytest
import torch
from open_clip.model import convert_weights_to_lp
from torch import nn

from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
from ugncl.backbones.clip.loading import (
    LoadedWeights,
    WeightsError,
    read_weights,
    resolve_quick_gelu,
)
from ugncl.backbones.clip.models import TINY_MODEL, clip_tokenizer


def _reference(quick_gelu: bool, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return open_clip.create_model(TINY_MODEL, quick_gelu=quick_gelu).eval()


def _inputs():
    g = torch.Generator().manual_seed(3)
    pixels = torch.randn(2, 3, 64, 64, generator=g)
    tokens = clip_tokenizer(TINY_MODEL, 40)(["a small red dog", "a cat on the left ."])
    return pixels, tokens


def _forward(model: nn.Module):
    pixels, tokens = _inputs()
    with torch.no_grad():
        return model.encode_image(pixels, normalize=True), model.encode_text(tokens, normalize=True)


def _openai_jit_state(ref: nn.Module) -> dict:
    """OpenAI's TorchScript-era state dict: same keys plus input_resolution & co."""
    state = dict(ref.state_dict())
    state["input_resolution"] = torch.tensor(64)
    state["context_length"] = torch.tensor(40)
    state["vocab_size"] = torch.tensor(49408)
    return state


def _reference_container(ref: nn.Module) -> tuple[dict, nn.Module]:
    """NPC/SDD/OSA checkpoint: fp16 OpenAI weights (clip.load), DataParallel prefixes."""
    half = _reference(True)
    half.load_state_dict(ref.state_dict())
    convert_weights_to_lp(half, dtype=torch.float16)  # what OpenAI's convert_weights leaves
    opt = torch.optim.AdamW([p for p in half.parameters()], lr=1e-6)
    container = {
        "epoch": 4,
        "name": "npc_f30k",
        "state_dict": {f"module.{k}": v for k, v in half.state_dict().items()},
        "optimizer": opt.state_dict(),
    }
    rounded = _reference(True)
    rounded.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    return container, rounded


@pytest.mark.parametrize("layout", ["jit_keys", "reference_container"])
def test_openai_layout_loads_with_quick_gelu_and_reproduces_the_forward(tmp_path, layout):
    ref = _reference(quick_gelu=True)
    if layout == "jit_keys":
        obj, expected_model = _openai_jit_state(ref), ref
    else:
        obj, expected_model = _reference_container(ref)
    path = tmp_path / "openai.pt"
    torch.save(obj, path)
    # ugncl-tiny declares quick_gelu false: the file's layout must override the default.
    model = build_clip(TINY_MODEL, pretrained=path)
    assert model.config["quick_gelu"] is True
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    want_img, want_cap = _forward(expected_model)
    pixels, tokens = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(model.encode_images(pixels), want_img)
        torch.testing.assert_close(model.encode_captions(tokens, None), want_cap)
    # The silent failure this guards against: the same weights under nn.GELU differ.
    gelu = _reference(quick_gelu=False)
    gelu.load_state_dict(expected_model.state_dict())
    assert (_forward(gelu)[1] - want_cap).abs().max() > 1e-4


def test_explicit_non_quick_gelu_on_openai_weights_is_refused(tmp_path):
    path = tmp_path / "openai.pt"
    torch.save(_openai_jit_state(_reference(True)), path)
    with pytest.raises(WeightsError, match="quick_gelu=False contradicts .*input_resolution"):
        build_clip(TINY_MODEL, pretrained=path, quick_gelu=False)


def test_file_that_cannot_tell_needs_an_explicit_setting():
    unknown = LoadedWeights({}, None, "the file does not say")
    with pytest.raises(WeightsError, match="set model.clip.quick_gelu=true"):
        resolve_quick_gelu(None, unknown, None, source="w.pt")
    assert resolve_quick_gelu(True, unknown, None, source="w.pt") is True
    assert resolve_quick_gelu(None, unknown, False, source="w.pt") is False  # declared by config
    assert resolve_quick_gelu(None, None, None, source="-") is False  # random init


@pytest.mark.parametrize("tag", ["openai", "laion2b_s34b_b79k", "hf-hub:timm/vit_base", ""])
def test_hub_tags_fail_at_once(tag):
    start = time.perf_counter()
    with pytest.raises(WeightsError, match="put the weights file on this machine"):
        build_clip(TINY_MODEL, pretrained=tag)
    assert time.perf_counter() - start < 1.0


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_archive_is_refused_then_converted(tmp_path, tool):
    class Jit(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("input_resolution", torch.tensor(224))
            self.ln_final = nn.LayerNorm(4)
            self.token_embedding = nn.Embedding(3, 4)
            self.text_projection = nn.Parameter(torch.zeros(4, 4))
            self.visual = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.visual(self.ln_final(x)) @ self.text_projection

    src, dst = tmp_path / "ViT-B-32.pt", tmp_path / "converted.pt"
    torch.jit.script(Jit()).save(str(src))
    with pytest.raises(WeightsError, match="TorchScript.*tools/convert_clip.py"):
        read_weights(src)
    assert tool("convert_clip").main([str(src), str(dst)]) == 0
    converted = read_weights(dst)
    assert converted.quick_gelu is True and "input_resolution" in converted.evidence
    assert {"ln_final.weight", "token_embedding.weight", "visual.weight"} <= set(
        converted.state_dict
    )
    assert tool("convert_clip").main([str(dst), str(tmp_path / "again.pt")]) == 2


def test_a_torchscript_archive_without_a_clip_model_is_refused(tmp_path, tool, capsys):
    src, dst = tmp_path / "linear.pt", tmp_path / "out.pt"
    torch.jit.script(nn.Linear(3, 2)).save(str(src))
    assert tool("convert_clip").main([str(src), str(dst)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "holds no CLIP model" in lines[0] and "weight" in lines[0]
    assert not dst.exists()


def test_pickled_objects_and_non_state_dicts_are_refused(tmp_path):
    path = tmp_path / "obj.pt"
    # Released checkpoints often pickle an argparse.Namespace beside the weights.
    torch.save({"state_dict": {"w": torch.zeros(1)}, "args": argparse.Namespace(lr=1)}, path)
    with pytest.raises(WeightsError, match="weights_only"):
        read_weights(path)
    torch.save({"a": 1}, path)
    with pytest.raises(WeightsError, match="not a CLIP state dict"):
        read_weights(path)


def test_architecture_mismatch_names_the_keys(tmp_path):
    path = tmp_path / "w.pt"
    state = _reference(False).state_dict()
    state["visual.proj"] = torch.zeros(3, 3)
    torch.save(state, path)
    with pytest.raises(WeightsError, match=r"1 shape \(visual.proj"):
        build_clip(TINY_MODEL, pretrained=path, quick_gelu=False)


def test_own_checkpoint_round_trip_records_the_activation(tmp_path):
    torch.manual_seed(5)
    model = build_clip(TINY_MODEL, quick_gelu=True)
    path = save_clip_weights(model, tmp_path / "tiny.pt", note="x")
    raw = torch.load(path, weights_only=True)
    assert raw["ugncl_clip"]["quick_gelu"] is True and raw["note"] == "x"
    again = build_clip(TINY_MODEL, pretrained=path)
    assert again.config["quick_gelu"] is True
    pixels, tokens = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(again(pixels, tokens), model.eval()(pixels, tokens))


def test_safetensors_file_loads(tmp_path):
    from safetensors.torch import save_file

    ref = _reference(quick_gelu=False)
    path = tmp_path / "open_clip_model.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    model = build_clip(TINY_MODEL, pretrained=path)  # ugncl-tiny declares quick_gelu false
    assert model.config["quick_gelu"] is False
    torch.testing.assert_close(model.encode_captions(_inputs()[1], None), _forward(ref)[1])


def test_missing_local_path_is_not_called_a_hub_tag():
    with pytest.raises(WeightsError) as err:
        build_clip(TINY_MODEL, pretrained="weights/missing.pt")
    assert "not an existing file;" in str(err.value) and "hub tag" not in str(err.value)
