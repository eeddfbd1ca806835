"""The CLIP track end to end (CPU, offline): tools/train.py with a random-init tiny open_clip
model on a tiny rendered world, resume, eval.py on the checkpoint and on a weights file, one
noise file through both tracks, and the errors of a missing model or data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from precomputed.noise import noise_sha256
from tests.conftest import write_tiny_clip_world
from ugncl.core.engine.recorder import read_metrics

IMAGE_SIZE, CONTEXT = 32, 24


# A run's train.threads sets torch's thread count for the process; give it back.
pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def clip_world(tmp_path_factory) -> Path:
    """A tiny world as features (36 x 64, SGRAF-sized by TINY_MODEL) and as 32 px images."""
    return write_tiny_clip_world(
        tmp_path_factory.mktemp("clip_world"), num_train=24, image_size=IMAGE_SIZE
    )


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory) -> Path:
    """A random-init ugncl-tiny at 32 px and a 24-token context, as a local weights file."""
    from ugncl.backbones.clip.adapter import build_clip, save_clip_weights
    from ugncl.backbones.clip.models import TINY_MODEL

    torch.manual_seed(0)
    model = build_clip(TINY_MODEL, image_size=IMAGE_SIZE, context_length=CONTEXT)
    return save_clip_weights(model, tmp_path_factory.mktemp("weights") / "tiny-random.pt")


def clip_overrides(world: Path, weights: Path, out: Path, name: str, *extra: str) -> list[str]:
    return [
        f"data.root={world}",
        "data.train_images=8",
        "data.dev_images=6",
        f"model.clip.pretrained={weights}",
        f"model.clip.image_size={IMAGE_SIZE}",
        f"model.clip.context_length={CONTEXT}",
        f"run.out_dir={out}",
        f"run.name={name}",
        "train.batch_size=8",
        "train.eval_batch_size=4",
        "train.warmup_steps=2",
        "train.log_every=2",
        "train.lr=1e-4",
        *extra,
    ]


@pytest.fixture
def run_clip(tool, clip_world: Path, random_weights: Path, tmp_path: Path):
    """``clip_synthetic`` on the tiny world into ``tmp_path/<name>``; returns the exit code."""

    def _run(name: str, *extra: str) -> int:
        args = clip_overrides(clip_world, random_weights, tmp_path, name, *extra)
        return tool("train").main(["--cfg", "clip_synthetic", "--set", *args])

    return _run


def test_clip_trains_evaluates_and_resumes_exactly(run_clip, tool, tmp_path: Path) -> None:
    assert run_clip("straight", "train.epochs=2") == 0
    run = tmp_path / "straight"
    records = read_metrics(run)
    setup = next(r for r in records if r["event"] == "setup")
    assert setup["noise_sha256"] == noise_sha256(np.load(run / "noise_index.npy"))
    assert setup["n_train_captions"] == 40 and 0 < setup["n_noisy"] < 40
    assert [r["epoch"] for r in records if r["event"] == "val"] == [0, 1]
    train = [r for r in records if r["event"] == "train"]
    assert train[-1]["step"] == 10 and all(np.isfinite(r["loss"]) for r in train)
    test = next(r for r in records if r["event"] == "test")
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert state["backbone"] == "clip" and state["method"] == "infonce"
    assert state["model_config"]["image_size"] == IMAGE_SIZE
    # AdamW with decoupled decay on matrices only; both groups train.
    groups = state["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.2, 0.0]
    assert tuple(groups[0]["betas"]) == (0.9, 0.98) and groups[0]["eps"] == 1e-6

    # eval.py rebuilds the model from the checkpoint and ranks the same test split.
    best = run / "checkpoints" / "best.pt"
    out = tmp_path / "eval.json"
    assert tool("eval").main([str(best), "--json", str(out)]) == 0
    result = json.loads(out.read_text())["results"]["full"]
    best_epoch = torch.load(best, weights_only=True)["epoch"] - 1
    assert test["epoch"] == best_epoch
    assert result["rsum"] == pytest.approx(test["rsum"], abs=1e-4)

    # Stopped after one epoch and resumed = the uninterrupted run.
    assert run_clip("split", "train.epochs=2", "train.stop_after_epochs=1") == 0
    resume = ["--resume", str(tmp_path / "split"), "--set", "train.stop_after_epochs=null"]
    assert tool("train").main(resume) == 0
    other = torch.load(tmp_path / "split" / "checkpoints" / "last.pt", weights_only=True)
    assert other["global_step"] == state["global_step"]
    for name, tensor in state["model"].items():
        torch.testing.assert_close(tensor, other["model"][name], rtol=1e-5, atol=1e-6)


def test_ugncl_on_two_clip_views_trains_and_evaluates_from_its_checkpoint(
    tool, clip_world: Path, random_weights: Path, tmp_path: Path
) -> None:
    """W = 2 image heads: the checkpoint keeps them and eval.py ranks as the run's test did."""
    args = clip_overrides(clip_world, random_weights, tmp_path, "views", "train.epochs=1")
    argv = ["--cfg", "ugncl_clip_synthetic", "--set", *args, "model.clip.num_views=2"]
    assert tool("train").main(argv) == 0
    run = tmp_path / "views"
    test = next(r for r in read_metrics(run) if r["event"] == "test")
    best = run / "checkpoints" / "best.pt"
    state = torch.load(best, weights_only=True)
    assert state["model_config"]["num_views"] == 2 and state["model"]["view_heads"].shape[0] == 2
    out = tmp_path / "eval.json"
    assert tool("eval").main([str(best), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["full"]["rsum"] == pytest.approx(
        test["rsum"], abs=1e-4
    )


def test_the_clean_pairs_oracle_trains_on_the_correct_pairs_only(run_clip, tmp_path) -> None:
    assert run_clip("oracle", "train.epochs=1", "method.infonce.train_pairs=clean") == 0
    records = read_metrics(tmp_path / "oracle")
    setup = next(r for r in records if r["event"] == "setup")
    clean = setup["n_train_captions"] - setup["n_noisy"]
    train = [r for r in records if r["event"] == "train"]
    assert 8 <= clean < 40 and train[-1]["step"] == clean // 8  # batches of 8, tail dropped


def test_one_noise_file_gives_one_sha256_in_both_setup_records(
    run_clip, tool, clip_world: Path, tmp_path: Path, tiny_model: list[str]
) -> None:
    """The shared-noise check: an SGRAF (ugncl_synthetic) run and a CLIP run on the same noise file
    record the same sha256 (setup only: no epoch is needed)."""
    noise_file = clip_world / "synthetic_precomp" / "noise_0.5_seed0.npy"
    shared = [
        f"data.noise_file={noise_file}",
        "data.train_images=null",
        "train.stop_after_epochs=0",
    ]
    assert run_clip("clip", *shared) == 0
    sgraf = [
        "--cfg", "ugncl_synthetic", "--set", f"data.root={clip_world}", "data.dev_images=6",
        f"run.out_dir={tmp_path}", "run.name=sgraf", "train.batch_size=8", *tiny_model, *shared,
    ]  # fmt: skip
    assert tool("train").main(sgraf) == 0
    setups = {
        name: next(r for r in read_metrics(tmp_path / name) if r["event"] == "setup")
        for name in ("clip", "sgraf")
    }
    expected = noise_sha256(np.load(noise_file))
    assert setups["clip"]["noise_sha256"] == setups["sgraf"]["noise_sha256"] == expected
    assert setups["clip"]["n_noisy"] == setups["sgraf"]["n_noisy"] > 0
    assert setups["clip"]["noise_source"] == setups["sgraf"]["noise_source"] == str(noise_file)


def test_zero_shot_eval_of_a_weights_file(tool, clip_world: Path, random_weights: Path) -> None:
    args = [str(random_weights), "--data-root", str(clip_world), "--name", "synthetic_clip",
            "--eval-score", "raw", "--split", "dev"]  # fmt: skip
    assert tool("eval").main(args) == 0


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model.clip.pretrained=null", "README 'CLIP weights'"),
        ("model.clip.pretrained=nowhere/tiny.pt", "python tools/pretrain_clip.py"),
        ("data.name=missing_clip", "annotations/scan_split"),
    ],
)
def test_missing_weights_or_images_are_one_clear_error(
    run_clip, tmp_path: Path, capsys, setting: str, message: str
) -> None:
    extra = [setting] + (["data.clip.naming=f30k"] if "missing" in setting else [])
    assert run_clip("bad", *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


@pytest.mark.parametrize("cfg", ["clip_flickr", "clip_coco", "clip_cc120k"])
def test_paper_configs_ask_for_the_weights_first(tool, tmp_path: Path, capsys, cfg: str) -> None:
    args = ["--cfg", cfg, "--set", f"run.out_dir={tmp_path}", "run.name=r"]
    assert tool("train").main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model.clip.pretrained is not set") and "ViT-B-32" in err
    assert "README 'CLIP weights'" in err
