"""Settings and files are checked before the run folder appears; what can only fail later
leaves a folder that resumes with the fixed setting; bad values are one error line."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from precomputed.errors import UserError
from tests.conftest import write_tiny_clip_world
from tests.tools.test_train import tiny_overrides

CLIP = ["data.train_images=8", "data.dev_images=6", "model.clip.pretrained=random",
        "model.clip.image_size=32", "model.clip.context_length=24", "train.batch_size=8",
        "train.eval_batch_size=6", "train.epochs=1", "train.warmup_steps=1",
        "eval.test_after_training=false"]  # fmt: skip


# A run's train.threads sets torch's thread count for the process; give it back.
pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def clip_world(tmp_path_factory) -> Path:
    return write_tiny_clip_world(tmp_path_factory.mktemp("clip_world"), num_train=16)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_run_name_must_stay_inside_out_dir(tool, tiny_world, tiny_model, tmp_path, capsys):
    out = tmp_path / "runs"
    args = tiny_overrides(tiny_world, out, "../escaped", tiny_model)
    assert tool("train").main(["--cfg", "ugncl_synthetic", "--set", *args]) == 2
    assert "run.name='../escaped'" in _one_error(capsys)
    assert not (tmp_path / "escaped").exists() and not out.exists()


def test_yaml_tag_in_set_is_one_error_line(tool, capsys):
    argv = ["--cfg", "ugncl_synthetic", "--set", 'train.lr=!!python/object/apply:os.system ["x"]']
    assert tool("train").main(argv) == 2
    assert "not a plain YAML scalar" in _one_error(capsys)


def test_config_outside_configs_with_documented_base(tmp_path):
    from ugncl.run.config import load_config

    path = tmp_path / "mine.yaml"
    path.write_text("_base_: base.yaml\ntrain:\n  epochs: 3\n")
    assert load_config(path)[0].train.epochs == 3


@pytest.mark.parametrize(
    "setting, message",
    [("model.clip.image_size=7", "cannot score a batch"),
     ("model.clip.pretrained=ZERO", "is empty (0 bytes)")],
)  # fmt: skip
def test_clip_settings_fail_before_the_folder(tool, clip_world, tmp_path, capsys, setting, message):
    zero = tmp_path / "zero.pt"
    zero.write_bytes(b"")
    argv = [
        "--cfg",
        "clip_synthetic",
        "--set",
        f"data.root={clip_world}",
        *CLIP,
        f"run.out_dir={tmp_path / 'runs'}",
        "run.name=r",
        setting.replace("ZERO", str(zero)),
    ]
    assert tool("train").main(argv) == 2
    assert message in _one_error(capsys)
    assert not (tmp_path / "runs" / "r").exists()


def test_undecodable_image_fails_before_the_folder(tool, clip_world, tmp_path, capsys):
    world = tmp_path / "world"
    shutil.copytree(clip_world, world)
    first = sorted((world / "synthetic_clip" / "images").iterdir())[0]
    first.write_bytes(b"not an image at all")
    argv = ["--cfg", "clip_synthetic", "--set", f"data.root={world}", *CLIP,
            f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "data.num_workers=2"]  # fmt: skip
    assert tool("train").main(argv) == 2
    line = _one_error(capsys)
    assert first.name in line and "Traceback" not in line
    assert not (tmp_path / "runs" / "r").exists()


def test_image_names_leaving_the_folder_are_refused(clip_world, tmp_path):
    from precomputed.errors import DataFormatError
    from precomputed.image_layout import _check_names

    with pytest.raises(DataFormatError, match="not a file name inside"):
        _check_names(tmp_path, ["a.jpg", "../../etc/passwd"])


def test_decompression_bomb_is_a_data_error(tmp_path, monkeypatch):
    from precomputed.errors import DataFormatError
    from ugncl.backbones.clip.data import load_rgb

    path = tmp_path / "big.png"
    Image.new("RGB", (64, 64)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64 x 64 > 2 x 100: a "bomb"
    with pytest.raises(DataFormatError, match="cannot be decoded"):
        load_rgb(path)


def test_osa_estimator_is_read_before_the_folder(tool, tiny_world, tiny_model, tmp_path, capsys):
    zero = tmp_path / "zero.pt"
    zero.write_bytes(b"")
    args = tiny_overrides(tiny_world, tmp_path, "osa", tiny_model, "method.name=osa",
                          "method.osa.objective=triplet", f"method.osa.estimator={zero}",
                          "data.estimator.name=null")  # fmt: skip
    assert tool("train").main(["--cfg", "ugncl_synthetic", "--set", *args]) == 2
    assert "method.osa.estimator" in _one_error(capsys)
    assert not (tmp_path / "osa").exists()


@pytest.mark.slow
def test_failed_setup_resumes_with_the_fixed_setting(tool, clip_world, tmp_path, capsys):
    """An empty NPC bank can only be found by the bank pass: the folder stays, and a resume
    with another method setting continues it (nothing was learnt yet)."""
    train = tool("train").main
    run = tmp_path / "runs" / "npc"
    argv = [
        "--cfg",
        "npc_synthetic",
        "--set",
        f"data.root={clip_world}",
        *CLIP,
        f"run.out_dir={tmp_path / 'runs'}",
        "run.name=npc",
        "method.npc.clean_threshold=1.0",
    ]
    assert train(argv) == 2
    assert "memory bank" in _one_error(capsys)
    assert (run / "config.yaml").is_file()
    assert train(["--resume", str(run), "--set", "method.npc.clean_threshold=0.0"]) == 0
    assert (run / "checkpoints" / "last.pt").is_file()


def test_ctrl_c_names_the_resume_command(tool, tiny_world, tiny_model, tmp_path, monkeypatch,
                                         capsys):  # fmt: skip
    from ugncl.core.engine.trainer import Trainer

    def interrupted(self, batch, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_train_step", interrupted)
    args = tiny_overrides(tiny_world, tmp_path, "r", tiny_model, "data.train_images=16")
    assert tool("train").main(["--cfg", "ugncl_synthetic", "--set", *args]) == 130
    line = _one_error(capsys)
    assert f"--resume {tmp_path / 'r'}" in line


def test_crafted_torchscript_archive_is_one_error_line(tool, tmp_path, capsys):
    path = tmp_path / "crafted.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/code/__torch__.py", "garbage")
        z.writestr("archive/constants.pkl", b"\x80\x02garbage")
    assert tool("convert_clip").main([str(path), str(tmp_path / "out.pt")]) == 2
    assert "torch.jit.load cannot read it" in _one_error(capsys)


def test_clip_training_checkpoint_is_accepted_as_pretrained(tmp_path):
    from ugncl.backbones.clip.adapter import build_clip
    from ugncl.backbones.clip.loading import read_weights
    from ugncl.backbones.clip.models import TINY_MODEL

    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=32, context_length=24)
    path = tmp_path / "best.pt"
    torch.save({"model": model.state_dict(), "optimizer": {}, "backbone": "clip",
                "model_config": dict(model.config), "epoch": 3}, path)  # fmt: skip
    weights = read_weights(path)
    expected = model.model.state_dict()
    assert weights.state_dict.keys() == expected.keys()
    assert all(torch.equal(weights.state_dict[k], expected[k].float()) for k in expected)
    # Another backbone's checkpoint is named as such.
    torch.save({"model": {}, "optimizer": {}, "backbone": "sgraf"}, tmp_path / "sgraf.pt")
    with pytest.raises(UserError, match="'sgraf' run, not of a CLIP run"):
        read_weights(tmp_path / "sgraf.pt")


def test_preflight_changes_no_weight_buffer_or_random_state(tiny_world, tiny_model, tmp_path):
    from tests.tools.test_train import tiny_overrides as overrides
    from ugncl.run.build import build_model, open_run_data
    from ugncl.run.config import load_config
    from ugncl.run.training import preflight

    config, _ = load_config("ugncl_synthetic", overrides(tiny_world, tmp_path, "p", tiny_model))
    data = open_run_data(config)
    model = build_model(config, data).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    preflight(model, data.training_data())
    assert model.training and torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
