"""Model file and released SGRAF / NCR / UGNCL containers (generated here at tiny sizes)."""

from __future__ import annotations

import argparse
import zipfile

import pytest
import torch
from torch import Tensor

from sgraf.checkpoint import (
    CheckpointError,
    build_model_from_config,
    load_model,
    load_model_file,
    load_released_checkpoint,
    save_model_file,
)
from sgraf.model import SGRAF
from tests.sgraf.conftest import TINY, VOCAB, make_batch, make_model

# Released sim_enc names -> this package's (the inverse of the loader's renames).
SIM_RENAMES = (("SGR_module.", "sgr.steps."), ("SAF_module.", "saf."))

E, S, R, D, WD = TINY["embed_dim"], TINY["sim_dim"], TINY["num_regions"], TINY["img_dim"], 6


def released_shapes(head: str, img_names: list[str], steps: int = 3) -> list[dict]:
    """Key -> shape of [img_enc, txt_enc, sim_enc] exactly as in the SGRAF release."""
    img = {}
    for fc in img_names:
        img.update({f"{fc}.weight": (E, D), f"{fc}.bias": (E,)})
    txt = {"embed.weight": (VOCAB, WD)}
    for sfx in ("", "_reverse"):
        txt.update(
            {
                f"cap_rnn.weight_ih_l0{sfx}": (3 * E, WD),
                f"cap_rnn.weight_hh_l0{sfx}": (3 * E, E),
                f"cap_rnn.bias_ih_l0{sfx}": (3 * E,),
                f"cap_rnn.bias_hh_l0{sfx}": (3 * E,),
            }
        )
    sim = {}

    def lin(name, out, inp):
        sim.update({f"{name}.weight": (out, inp), f"{name}.bias": (out,)})

    def bn(name, n):
        sim.update({f"{name}.{k}": (n,) for k in ("weight", "bias", "running_mean", "running_var")})
        sim[f"{name}.num_batches_tracked"] = ()

    for sa in ("v_global_w", "t_global_w"):
        lin(f"{sa}.embedding_local.0", E, E)
        lin(f"{sa}.embedding_global.0", E, E)
        lin(f"{sa}.embedding_common.0", 1, E)
    bn("v_global_w.embedding_local.1", R)
    bn("v_global_w.embedding_global.1", E)
    lin("sim_tranloc_w", S, E)
    lin("sim_tranglo_w", S, E)
    lin("sim_eval_w", 1, S)
    if head == "sgr":
        for i in range(steps):
            for w in ("graph_query_w", "graph_key_w", "sim_graph_w"):
                lin(f"SGR_module.{i}.{w}", S, S)
    else:
        lin("SAF_module.attn_sim_w", 1, S)
        bn("SAF_module.bn", 1)
    return [img, txt, sim]


def perturbed(head: str, views: int, seed: int = 3):
    model = make_model(head, views, dtype=torch.float32, seed=seed, word_dim=WD)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                noise = torch.rand(tensor.shape, generator=gen) * 0.5
                tensor.add_(noise if "running_var" in name else noise - 0.25)
            else:
                tensor.fill_(7)
    return model.eval()


def to_released_parts(model: SGRAF) -> list[dict[str, Tensor]]:
    """This package's state dict as a released-style list ``[img, txt, sim]`` (SGRAF/NCR
    naming ``fc`` for one view, UGNCL naming ``fc1``, ``fc2`` for several)."""
    state = model.state_dict()
    parts: list[dict[str, Tensor]] = [{}, {}, {}]
    index = {"img_enc": 0, "txt_enc": 1, "sim_enc": 2}
    for key, value in state.items():
        part, _, rest = key.partition(".")
        if part == "img_enc":
            view, _, leaf = rest[len("fc.") :].partition(".")
            rest = f"fc.{leaf}" if model.num_views == 1 else f"fc{int(view) + 1}.{leaf}"
        else:
            for old, new in SIM_RENAMES:
                if rest.startswith(new):
                    rest = old + rest[len(new) :]
        parts[index[part]][rest] = value
    return parts


def released_parts(model) -> list[dict]:
    parts = to_released_parts(model)
    return [{k: v.clone() for k, v in p.items()} for p in parts]


def opt_namespace() -> argparse.Namespace:
    return argparse.Namespace(
        data_name="f30k_precomp", embed_size=E, sim_dim=S, bi_gru=True, sgr_step=3, lr=2e-4
    )


def scores_of(model):
    with torch.no_grad():
        return model.eval()(*make_batch(dtype=torch.float32))


LAYOUTS = {
    "sgraf": (["fc"], lambda parts, _: {
        "epoch": 3, "model": parts, "best_rsum": 412.5, "opt": opt_namespace(), "Eiters": 999}),
    "ugncl": (["fc1", "fc2"], lambda parts, _: {
        "opt": opt_namespace(), "epoch": 4, "best_rsum": 300.0, "model": parts}),
    "decl": (["fc"], lambda parts, _: {
        "epoch": 6, "model": parts, "best_rsum": 2.0, "opt": opt_namespace(), "step": 4321}),
    "ncr": (["fc"], lambda parts, other: {
        "epoch": 5, "model_A": parts, "model_B": other, "best_rsum": 1.0, "opt": opt_namespace()}),
}  # fmt: skip


@pytest.mark.parametrize("fmt", ["sgraf", "ugncl", "ncr", "decl"])
@pytest.mark.parametrize("head", ["sgr", "saf"])
def test_released_layout_round_trip(tmp_path, fmt, head, tool):
    img_names, build = LAYOUTS[fmt]
    model = perturbed(head, len(img_names))
    parts = released_parts(model)
    expected = released_shapes(head, img_names)
    for got, want in zip(parts, expected):
        assert {k: tuple(v.shape) for k, v in got.items()} == want
    other = released_parts(perturbed(head, 1, seed=9)) if fmt == "ncr" else None
    path = tmp_path / "model_best.pth.tar"
    torch.save(build(parts, other), path)

    state, config, info = load_released_checkpoint(path)
    assert config == {
        "vocab_size": VOCAB, "word_dim": WD, "img_dim": D, "embed_dim": E, "sim_dim": S,
        "num_regions": R, "num_views": len(img_names), "head": head, "sgr_steps": 3,
        "bi_gru": True,
    }  # fmt: skip
    assert info["format"] == fmt and info["opt"]["data_name"] == "f30k_precomp"
    released = {"ugncl": "raw", "decl": "evidence"}.get(fmt, "sigmoid")
    assert info["released_score"] == released
    loaded = build_model_from_config(config)
    loaded.load_state_dict(state)
    torch.testing.assert_close(scores_of(loaded), scores_of(model), rtol=0, atol=0)

    out = tmp_path / "converted.pt"
    assert tool("convert_checkpoint").main([str(path), str(out)]) == 0
    payload = torch.load(out, weights_only=True)  # plain dict, no allow-list needed
    assert payload["version"] == 1 and payload["source"]["format"] == fmt
    torch.testing.assert_close(scores_of(load_model(out)), scores_of(model), rtol=0, atol=0)


def test_ncr_which_selects_model_b(tmp_path, tool):
    a, b = perturbed("sgr", 1, seed=1), perturbed("sgr", 1, seed=2)
    path = tmp_path / "ncr.pth.tar"
    torch.save(LAYOUTS["ncr"][1](released_parts(a), released_parts(b)), path)
    _, _, info = load_released_checkpoint(path)
    assert info["which"] == "model_A"
    assert torch.equal(scores_of(load_model(path)), scores_of(a))
    assert torch.equal(scores_of(load_model(path, which="model_B")), scores_of(b))
    out = tmp_path / "b.pt"
    assert tool("convert_checkpoint").main([str(path), str(out), "--which", "model_B"]) == 0
    assert torch.equal(scores_of(load_model(out)), scores_of(b))
    with pytest.raises(CheckpointError, match="NCR containers only"):
        load_released_checkpoint(tmp_path / "b.pt", which="model_B")


def test_unknown_and_missing_keys_are_listed(tmp_path):
    parts = released_parts(perturbed("sgr", 1))
    parts[2]["extra_head.weight"] = torch.zeros(3)
    del parts[2]["sim_tranglo_w.bias"]
    del parts[1]["cap_rnn.bias_hh_l0"]
    path = tmp_path / "bad.pth.tar"
    torch.save({"epoch": 0, "model": parts, "best_rsum": 0.0, "opt": opt_namespace()}, path)
    with pytest.raises(CheckpointError) as err:
        load_released_checkpoint(path)
    msg = str(err.value)
    assert "sim_enc[extra_head.weight]" in msg
    assert "sim_enc[sim_tranglo_w.bias]" in msg and "txt_enc[cap_rnn.bias_hh_l0]" in msg


def test_shape_mismatch_and_unknown_container(tmp_path):
    parts = released_parts(perturbed("saf", 1))
    parts[2]["sim_eval_w.weight"] = torch.zeros(2, S)
    path = tmp_path / "shape.pth.tar"
    torch.save({"model": parts, "opt": opt_namespace()}, path)
    with pytest.raises(CheckpointError, match=r"sim_enc\[sim_eval_w.weight\]: \(2, 8\)"):
        load_released_checkpoint(path)
    torch.save({"weights": 1}, path)
    with pytest.raises(CheckpointError, match="unknown container"):
        load_released_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="nope"):
        load_released_checkpoint(tmp_path / "nope.pth")


def test_model_file_is_plain_and_atomic(tmp_path):
    model = perturbed("saf", 2)
    path = tmp_path / "sub" / "model.pt"
    save_model_file(path, model.state_dict(), model.config, epoch=2)
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.pt"]
    payload = torch.load(path, weights_only=True)
    assert payload["epoch"] == 2 and payload["model_config"] == model.config
    assert load_model_file(path)["version"] == 1
    assert torch.equal(scores_of(load_model(path)), scores_of(model))
    with pytest.raises(CheckpointError, match="unknown keys"):
        build_model_from_config({**model.config, "margin": 0.2})
    with pytest.raises(ValueError, match="reserved"):
        save_model_file(path, model.state_dict(), model.config, model=1)


def _sgraf_container(head: str = "sgr", **opt) -> tuple[dict, torch.nn.Module]:
    """A released SGRAF container as the release writes it: module state dicts + Namespace."""
    model = perturbed(head, 1)
    parts = [model.img_enc.state_dict(), model.txt_enc.state_dict(), model.sim_enc.state_dict()]
    parts = [{k: v for k, v in p.items() if not k.endswith("num_batches_tracked")} for p in parts]
    namespace = opt_namespace()
    vars(namespace).update(opt)
    ckpt = {"epoch": 3, "model": to_released_parts(model), "best_rsum": 412.5,
            "opt": namespace, "Eiters": 999}  # fmt: skip
    return ckpt, model


def test_legacy_torch_format_loads_without_code_execution(tmp_path, tool, capsys):
    """Released SGRAF/NCR files predate torch 1.6: the non-zip format must load."""
    ckpt, model = _sgraf_container(no_imgnorm=False, no_txtnorm=False)
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(path)
    torch.testing.assert_close(scores_of(load_model(path)), scores_of(model), rtol=0, atol=0)
    out = tmp_path / "converted.pt"
    assert tool("convert_checkpoint").main([str(path), str(out)]) == 0
    torch.testing.assert_close(scores_of(load_model(out)), scores_of(model), rtol=0, atol=0)

    marker = tmp_path / "code_ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({**ckpt, "extra": Payload()}, path, _use_new_zipfile_serialization=False)
    assert tool("convert_checkpoint").main([str(path), str(out)]) == 2
    assert "no code from the file was run" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("flag", ["no_imgnorm", "no_txtnorm"])
def test_released_norm_flags_are_refused_by_name(tmp_path, flag):
    ckpt, _ = _sgraf_container(**{flag: True})
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match=rf"opt\.{flag}=True .*not l2-normalised"):
        load_released_checkpoint(path)


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_convert_checkpoint_errors_say_what_is_wrong(tmp_path, tool, capsys):
    convert = tool("convert_checkpoint").main
    out = str(tmp_path / "out.pt")
    rand = tmp_path / "random.pth.tar"
    rand.write_bytes(bytes(range(256)) * 16)
    assert convert([str(rand), out]) == 2
    line = _one_error_line(capsys)
    assert "is not a PyTorch checkpoint" in line and "convert_checkpoint.py" not in line

    assert convert([str(tmp_path), out]) == 2
    line = _one_error_line(capsys)
    assert "is a directory" in line and "does not exist" not in line

    assert convert([str(tmp_path / "nope.pth.tar"), out]) == 2
    assert "does not exist" in _one_error_line(capsys)

    (tmp_path / "empty.pth.tar").write_bytes(b"")
    assert convert([str(tmp_path / "empty.pth.tar"), out]) == 2
    assert "is empty (0 bytes)" in _one_error_line(capsys)

    ckpt, _ = _sgraf_container()
    for zip_format in (True, False):
        torch.save(ckpt, rand, _use_new_zipfile_serialization=zip_format)
        rand.write_bytes(rand.read_bytes()[:-100])
        assert convert([str(rand), out]) == 2
        assert "truncated or corrupt" in _one_error_line(capsys)

    torch.save({"weights": 1}, rand)
    assert convert([str(rand), out]) == 2
    assert "unknown container" in _one_error_line(capsys)
    assert not (tmp_path / "out.pt").exists()


def test_one_checkpoint_error_hierarchy():
    from precomputed.errors import CheckpointNotFoundError, UserError

    assert issubclass(CheckpointError, UserError)
    assert issubclass(CheckpointNotFoundError, CheckpointError)
    assert issubclass(CheckpointNotFoundError, FileNotFoundError)


def test_legacy_file_with_untyped_storage_is_explained(tmp_path):
    """torch >= 2.0 can write a bare UntypedStorage in the legacy format; torch cannot read it."""
    path = tmp_path / "odd.pth.tar"
    torch.save({"s": torch.ones(3).untyped_storage()}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(AttributeError):
        torch.load(path, weights_only=False)  # torch itself fails, whatever the mode
    with pytest.raises(CheckpointError, match="holds an untyped storage.*Re-save it"):
        load_released_checkpoint(path)


@pytest.mark.parametrize("zip_format", [True, False])
def test_plain_reader_points_released_files_to_the_converter(tmp_path, zip_format):
    """``read_torch_file`` without an allow-list (the trainer's checkpoints) names the global
    and sends released containers, and only those, to tools/convert_checkpoint.py."""
    from sgraf.checkpoint import read_torch_file

    ckpt, _ = _sgraf_container()
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(CheckpointError, match=r"GLOBAL argparse\.Namespace.*convert_checkpoint"):
        read_torch_file(path)
    assert read_torch_file(path, allowed_globals=[argparse.Namespace])["epoch"] == 3
