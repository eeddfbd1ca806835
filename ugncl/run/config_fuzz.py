"""Every config key set to a hostile value must end in one ``error:`` line or a valid run.

For a key and a value (:func:`hostile_values`: a wrong type, a negative number, zero, inf,
nan and a huge number), :func:`probe` loads the config with the value as a ``--set`` override
and runs the checks a new run makes before its folder exists (:func:`ugncl.run.training.check_run`:
data, model, method, one scored batch); nothing is written and nothing trains. The outcome is
``error`` (a :class:`~precomputed.errors.UserError`: the tools print it as one ``error:`` line),
``valid`` (the run would start) or ``traceback`` (anything else: a bug). A probe that runs past
its time limit is a ``traceback`` too (an endless loop on a huge value).

Each key is probed under the config of its section: ``method.<name>.*`` under
``<name>_synthetic`` (so the method's own checks run), ``model.clip.*`` under
``clip_synthetic``, everything else under ``ugncl_synthetic``, on a tiny synthetic world with
rendered images and CPU-sized models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import signal
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from precomputed.errors import UserError
from ugncl.run.config import CONFIG_DIR, config_class, load_config

#: Sizes of the CPU-sized SGRAF and CLIP models the probes build.
TINY_SGRAF = (
    "model.sgraf.word_dim=16", "model.sgraf.embed_dim=32", "model.sgraf.sim_dim=16",
    "model.sgraf.img_dim=64", "model.sgraf.num_regions=36",
)  # fmt: skip
TINY_CLIP = (
    "model.clip.pretrained=random", "model.clip.image_size=32", "model.clip.context_length=24",
)  # fmt: skip
IMAGE_SIZE = 32
HUGE_INT = 10**18
PROBE_SECONDS = 60


@dataclass(frozen=True)
class Outcome:
    key: str
    value: str
    kind: str  # error | valid | traceback
    message: str


def leaf_keys() -> list[tuple[str, type]]:
    """Every settable key with its type (``int``, ``float``, ``bool``, ``str``; ``X | None``
    gives ``X``)."""

    def walk(cls: type, prefix: str) -> Iterator[tuple[str, type]]:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                yield from walk(hint, f"{prefix}{f.name}.")
                continue
            options = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
            yield f"{prefix}{f.name}", options[0]

    return list(walk(config_class(), ""))


def hostile_values(kind: type) -> list[str]:
    """``--set`` values (YAML scalars) for a key of type ``kind``: a wrong type, a negative
    number, zero, inf, nan and a huge number."""
    wrong = "[1, 2]" if kind is str else "abc"
    huge = str(HUGE_INT) if kind is int else "1e308"
    return [wrong, "-1", "0", ".inf", ".nan", huge]


def world_overrides(world: Path, key: str) -> tuple[str, list[str]]:
    """The config and the overrides a probe of ``key`` starts from."""
    cfg = "ugncl_synthetic"
    parts = key.split(".")
    if parts[0] == "method" and len(parts) > 2:
        if (CONFIG_DIR / f"{parts[1]}_synthetic.yaml").is_file():
            cfg = f"{parts[1]}_synthetic"
    elif key.startswith("model.clip."):
        cfg = "clip_synthetic"
    common = [
        f"data.root={world}", "data.dev_images=6", "data.train_images=null",
        "data.noise_ratio=0.5", "train.batch_size=8", "train.threads=1",
        "run.out_dir=/nonexistent/fuzz", *TINY_SGRAF, *TINY_CLIP,
    ]  # fmt: skip
    return cfg, common


def make_world(root: Path) -> Path:
    """The tiny world the probes open: 24 training images (features 36 x 64) with a 50%
    noise file, rendered as 32 px images for the CLIP configs."""
    from precomputed.synthetic import make_synthetic
    from precomputed.synthetic.render import write_clip_images

    make_synthetic(root, num_train=24, num_dev=6, num_test=6, seed=0, feature_dim=64,
                   noise_ratios=(0.5,))  # fmt: skip
    write_clip_images(root, size=IMAGE_SIZE)
    return root


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def stop(signum, frame):
        raise TimeoutError(f"probe ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def probe(world: Path, key: str, value: str, seconds: int = PROBE_SECONDS) -> Outcome:
    """Load the config with ``key=value`` and run the pre-flight checks of a new run."""
    from ugncl.run.training import check_run

    cfg, common = world_overrides(world, key)
    threads = torch.get_num_threads()
    try:
        with _time_limit(seconds):
            config, _ = load_config(cfg, [*common, f"{key}={value}"])
            check_run(config)
    except UserError as err:
        return Outcome(key, value, "error", str(err).splitlines()[0] if str(err) else "")
    except Exception as err:  # a bug: what the sweep is for
        return Outcome(key, value, "traceback", f"{type(err).__name__}: {err}"[:300])
    finally:
        torch.set_num_threads(threads)
    return Outcome(key, value, "valid", "")


def sweep(world: Path, keys: int | None = None, seed: int = 0) -> list[Outcome]:
    """Every (or a seeded sample of ``keys``) key x every hostile value."""
    chosen = leaf_keys()
    if keys is not None and keys < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, keys))
    return [probe(world, key, value) for key, kind in chosen for value in hostile_values(kind)]
