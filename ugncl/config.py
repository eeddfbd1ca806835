"""Typed experiment configuration: YAML files with one base, dotted overrides, strict keys.

A config file may name a base with ``_base_: base.yaml`` (one level, resolved relative to the
file). ``--set a.b=value`` overrides are applied last; values are parsed as YAML scalars. Every
key must exist in the dataclasses below: an unknown key is an error that suggests the closest
valid key. Below this module nothing sees a dict: the entry script unpacks these objects into
explicit constructor arguments.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
BASE_KEY = "_base_"


class ConfigError(ValueError):
    """A config file, key or value is wrong; the message says which and how to fix it."""


@dataclass
class DataConfig:
    """Where the precomputed split lives and which noisy index to train on."""

    root: str = "data/synthetic"
    name: str = "synthetic_precomp"
    # SCAN vocabulary JSON; null -> <root>/<name>_vocab.json, then <root>/vocab/<name>_vocab.json.
    vocab: str | None = None
    captions_per_image: int = 5
    train_split: str = "train"
    dev_split: str = "dev"
    test_split: str = "test"
    # Dev subset (first N images and their captions) used for per-epoch validation.
    dev_images: int | None = 1000
    # Optional cap on training images (first N); null uses the whole split.
    train_images: int | None = None
    noise_ratio: float = 0.0
    noise_seed: int = 0
    # An existing noise index (NCR caption format, or UGNCL image permutation with
    # noise_format: image). When set, noise_ratio/noise_seed are not used to build one.
    noise_file: str | None = None
    noise_format: str = "caption"
    allow_nonfinite: bool = False
    num_workers: int = 0


@dataclass
class ModelConfig:
    """SGRAF network sizes (reference_implementations.md section 5.1)."""

    head: str = "sgr"
    word_dim: int = 300
    img_dim: int = 2048
    embed_dim: int = 1024
    sim_dim: int = 256
    num_regions: int = 36
    num_views: int = 2
    sgr_steps: int = 3
    bi_gru: bool = True
    word_dropout: float = 0.4


@dataclass
class UGNCLConfig:
    """UGNCL hyper-parameters; names follow UGNCL_METHOD.md."""

    tau: float = 0.1
    # Evidence function of Eq. 3: tanh = exp(tanh(r)/tau) (DECL; default, README "UGNCL
    # equations" has the measurement), softplus = exp(softplus(r)/tau) (paper, released).
    evidence: str = "tanh"
    evidence_ceiling: float = 50.0
    evidence_floor: str = "keep"
    p: float = 0.5  # uncertainty threshold of the division (Eq. 8)
    epsilon: float = 0.5  # hard-clean / hard-noisy threshold on the soft label
    # Soft label of hard pairs: mean_rival (decision, README "UGNCL equations") | max_rival
    # | projected (released b_ii / (1 - u)) | belief (paper b_ii).
    soft_label: str = "mean_rival"
    kl_weight: float = 0.1  # xi1
    trl_weight: float = 0.8  # xi2 (paper; the released default is 0.2)
    margin: float = 0.2  # gamma
    margin_base: float = 10.0  # m of the soft margin
    # Delta of Eq. 17; paper 10. 0 (f_C = f_N = 1/2) is our default: with u ~ 1 for every pair
    # at xi1 = 0.1, Delta = 10 zeroes every hard-clean margin (README "UGNCL equations").
    trust_delta: float = 0.0
    lambda_delta: float = 0.025  # delta of the hardness schedule, per optimiser step
    lambda_min: int = 5  # theta
    evidential_loss: str = "fused"
    division_batch_size: int | None = None  # null -> train.batch_size (K of the division)
    # Anneal xi1 linearly from 0 over this many epochs (Sensoy et al. 2018); 0 = constant
    # (released code). See README "Demo" for why the synthetic demo uses it.
    kl_anneal_epochs: int = 0


@dataclass
class TripletConfig:
    """Plain SGRAF training with VSE++ hinge (the non-robust baseline)."""

    margin: float = 0.2
    max_violation: bool = True


@dataclass
class MethodConfig:
    name: str = "ugncl"
    ugncl: UGNCLConfig = field(default_factory=UGNCLConfig)
    triplet: TripletConfig = field(default_factory=TripletConfig)


@dataclass
class TrainConfig:
    """Optimisation and run control. Warm-up epochs come before ``epochs`` main epochs."""

    epochs: int = 40
    warmup_epochs: int = 5
    batch_size: int = 128
    lr: float = 2e-4
    lr_update: int = 20  # lr x lr_decay every lr_update main epochs (warm-up runs at lr)
    lr_decay: float = 0.1
    grad_clip: float = 2.0
    amp: str = "auto"  # auto (bf16/fp16 on CUDA, off on CPU) | off | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int | None = None  # null -> drawn once, logged and written to config.yaml
    log_every: int = 50
    eval_batch_size: int = 128
    # Stop this invocation after N epochs (preemptible jobs); --resume continues the run.
    stop_after_epochs: int | None = None
    threads: int | None = None  # torch CPU threads; null keeps torch's default


@dataclass
class EvalConfig:
    eval_score: str = "evidence"  # evidence | sigmoid | raw (UGNCL_METHOD.md section 10)
    memory_budget_mb: int = 512
    test_after_training: bool = True


@dataclass
class RunConfig:
    out_dir: str = "runs"
    name: str | None = None  # null -> <config stem>-<timestamp>


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


CHOICES: dict[str, tuple[str, ...]] = {
    "model.head": ("sgr", "saf"),
    "method.name": ("ugncl", "triplet"),
    "method.ugncl.evidence": ("tanh", "softplus"),
    "method.ugncl.soft_label": ("mean_rival", "max_rival", "projected", "belief"),
    "method.ugncl.evidence_floor": ("keep", "subtract"),
    "method.ugncl.evidential_loss": ("fused", "per_view"),
    "train.amp": ("auto", "off", "bf16", "fp16"),
    "eval.eval_score": ("evidence", "sigmoid", "raw"),
    "data.noise_format": ("caption", "image"),
}


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A path that exists is used as is; a bare name is looked up in ``configs/``."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidates = [CONFIG_DIR / path, CONFIG_DIR / f"{path}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    available = sorted(p.name for p in CONFIG_DIR.glob("*.yaml"))
    tried = ", ".join(str(p) for p in [path, *candidates])
    raise ConfigError(f"config '{name_or_path}' not found (tried {tried}). Available: {available}")


def load_yaml_tree(path: Path) -> dict[str, Any]:
    """Read a config file and merge it over its ``_base_`` (one level)."""
    tree = _read_yaml(path)
    base_name = tree.pop(BASE_KEY, None)
    if base_name is None:
        return tree
    base_path = (path.parent / base_name).resolve()
    base = _read_yaml(base_path)
    if BASE_KEY in base:
        raise ConfigError(
            f"{base_path} names a base itself; configs inherit one level only "
            f"(put the shared keys into {base_path.name} directly)"
        )
    return merge_trees(base, tree)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(tree, dict):
        raise ConfigError(f"{path} must hold a mapping at top level, found {type(tree).__name__}")
    return tree


def merge_trees(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``override`` wins, nested mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_trees(merged[key], value)
        else:
            merged[key] = value
    return merged


def apply_overrides(tree: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings; values are parsed as YAML scalars (``1e-4``, ``null``)."""
    tree = merge_trees({}, tree)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.path=value")
        dotted, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = tree
        keys = dotted.strip().split(".")
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[keys[-1]] = value
    return tree


def build_config(tree: Mapping[str, Any]) -> Config:
    """Validate a plain tree against :class:`Config`; unknown keys and bad types are errors."""
    config = _build_dataclass(Config, tree, prefix="")
    _check_choices(config)
    return config


def load_config(name_or_path: str | Path, overrides: Sequence[str] = ()) -> tuple[Config, Path]:
    """Resolve, merge, override and validate; returns the config and the file it came from."""
    path = resolve_config_path(name_or_path)
    tree = apply_overrides(load_yaml_tree(path), overrides)
    return build_config(tree), path


def save_config(config: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")


def all_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every valid dotted key (leaves and sections) of a config dataclass."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        dotted = f"{prefix}{f.name}"
        keys.append(dotted)
        if dataclasses.is_dataclass(hints[f.name]):
            keys.extend(all_keys(hints[f.name], dotted + "."))
    return keys


def _build_dataclass(cls: type, tree: Any, prefix: str) -> Any:
    if not isinstance(tree, Mapping):
        raise ConfigError(f"'{prefix.rstrip('.') or 'config'}' must be a mapping, got {tree!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in tree:
        if key not in names:
            raise ConfigError(_unknown_key_message(f"{prefix}{key}"))
    kwargs = {}
    for name in names & set(tree):
        hint = hints[name]
        dotted = f"{prefix}{name}"
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build_dataclass(hint, tree[name], dotted + ".")
        else:
            kwargs[name] = _coerce(tree[name], hint, dotted)
    return cls(**kwargs)


def _unknown_key_message(dotted: str) -> str:
    """Suggest the closest valid key: first by full dotted path, then by the last component."""
    valid = all_keys()
    close = difflib.get_close_matches(dotted, valid, n=1, cutoff=0.6)
    if not close:
        leaf = dotted.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in valid}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)
        close = [by_leaf[leaf_match[0]]] if leaf_match else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown config key '{dotted}'{hint}"


def _coerce(value: Any, hint: Any, dotted: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, dotted)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML reads "1e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - only the types above are used in the dataclasses
        raise ConfigError(f"unsupported type {hint} for '{dotted}'")
    raise ConfigError(
        f"config key '{dotted}' expects {hint.__name__}, got {value!r} ({type(value).__name__})"
    )


def _check_choices(config: Config) -> None:
    for dotted, options in CHOICES.items():
        value: Any = config
        for key in dotted.split("."):
            value = getattr(value, key)
        if value not in options:
            raise ConfigError(f"config key '{dotted}' must be one of {options}, got {value!r}")
    if not 0.0 <= config.data.noise_ratio < 1.0:
        raise ConfigError(
            f"data.noise_ratio must be in [0, 1), got {config.data.noise_ratio} "
            "(it is the share of training captions whose image is shuffled)"
        )
    if config.train.batch_size < 2:
        raise ConfigError("train.batch_size must be >= 2 (in-batch negatives and BatchNorm)")
