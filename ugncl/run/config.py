"""Typed experiment configuration: YAML files over a chain of bases, the method's reading,
dotted overrides, strict keys.

A config file names its base with ``_base_: track.yaml`` (resolved relative to the file, then in
``configs/``); a base may name its own base, so an experiment file states only what differs from
its track, and the root of every chain is ``configs/base.yaml`` (the dataclasses' defaults;
``_base_: null`` opts out: the file must then be complete, as the ``config.yaml`` saved in a run
directory is). The method's reading (``method.<name>.reading``: ``paper``, ``release`` or
``package``) then sets the keys it names over the bases, except those the named file or an
override states itself (:func:`apply_reading`). ``--set a.b=value`` overrides are applied
last; values are parsed as YAML 1.2 scalars (``off`` is a word). A key given twice in one
mapping of a file is an error. Relative ``data.root``, ``data.vocab``, ``data.noise_file`` and a
``model.clip.pretrained`` that looks like a path are resolved against the current working
directory when the config is loaded and stored absolute, so a saved config (and a ``--resume``
from another directory) names the same files. Every key must exist in the dataclasses of
:mod:`ugncl.core.config`, where ``model.<backbone>`` and ``method.<name>`` sections come from the
registries (``ugncl.backbones.registry.BACKBONES``, ``ugncl.methods.METHODS``): an unknown key is
an error that suggests the closest valid key. Below this module nothing sees a dict: the
builders (``ugncl.run.build``) unpack these objects into explicit constructor arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from ugncl.backbones.registry import BACKBONES
from ugncl.core.config import Config, MethodSection, ModelSection
from ugncl.core.engine.sampling import EPOCH_LENGTHS
from ugncl.core.errors import ConfigError
from ugncl.core.evaluation import EVAL_SCORES
from ugncl.core.optim import OPTIMIZERS, SCHEDULES
from ugncl.core.prefilter import KINDS as PREFILTER_KINDS
from ugncl.methods import METHODS
from ugncl.run.config_upgrade import upgrade_tree

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
BASE_KEY = "_base_"
DEFAULT_BASE = CONFIG_DIR / "base.yaml"
# Path-valued keys resolved against the working directory at load time.
PATH_KEYS = (
    "data.root",
    "data.vocab",
    "data.noise_file",
    "data.estimator.root",
    "model.sgraf.init",
)
# Keys holding a path or a word (``random``, a hub tag to refuse): resolved only when the value
# looks like a path (a ``/``, a suffix or ``~``).
PATH_OR_WORD_KEYS = ("model.clip.pretrained",)


def _sections(base: type, doc: str, registry: Mapping) -> type:
    """A subclass of ``base`` (its selector key) with one section per registry entry."""
    fields = [(n, spec.config, field(default_factory=spec.config)) for n, spec in registry.items()]
    cls = dataclasses.make_dataclass(
        base.__name__.replace("Section", "Config"), fields, bases=(base,)
    )
    cls.__doc__ = doc
    cls.__module__ = __name__
    return cls


@functools.cache
def _config_classes(backbones: tuple, methods: tuple) -> tuple[type, type, type]:
    """(Config, ModelConfig, MethodConfig) for the registries' current entries: subclasses of
    :class:`ugncl.core.config.Config` and its sections.

    Cached by the registries' content, so registering a backbone or method (a plug-in, a
    test) gives it a config section and unregistering it gives back the same classes."""
    model_cls = _sections(
        ModelSection,
        "``backbone`` selects the model; one section per backbone "
        "(``ugncl.backbones.registry.BACKBONES``).",
        dict(backbones),
    )
    method_cls = _sections(
        MethodSection,
        "``name`` selects the method; one section per method (``ugncl.methods.METHODS``).",
        dict(methods),
    )
    config_cls = dataclasses.make_dataclass(
        "RegisteredConfig",
        [
            ("model", model_cls, field(default_factory=model_cls)),
            ("method", method_cls, field(default_factory=method_cls)),
        ],
        bases=(Config,),
    )
    config_cls.__doc__ = Config.__doc__
    config_cls.__module__ = __name__
    return config_cls, model_cls, method_cls


def config_class() -> type:
    """The :class:`Config` class for the backbones and methods registered now."""
    return _registered_classes()[0]


def choices() -> dict[str, tuple[str, ...]]:
    """Allowed values of string keys: run-level ones plus each section's ``CHOICES``."""
    out = dict(CHOICES)
    out["eval.eval_score"] = tuple(EVAL_SCORES)
    out["model.backbone"] = tuple(BACKBONES)
    out["data.estimator.backbone"] = tuple(n for n, b in BACKBONES.items() if b.open_view)
    out["method.name"] = tuple(METHODS)
    out["train.optimizer"] = tuple(OPTIMIZERS)
    out["train.schedule"] = tuple(SCHEDULES)
    for prefix, registry in (("model", BACKBONES), ("method", METHODS)):
        for name, spec in registry.items():
            for key, options in getattr(spec.config, "CHOICES", {}).items():
                out[f"{prefix}.{name}.{key}"] = tuple(options)
    return out


CHOICES: dict[str, tuple[str, ...]] = {
    "train.amp": ("auto", "off", "bf16", "fp16"),
    "train.epoch_length": EPOCH_LENGTHS,
    "data.noise_format": ("caption", "image", "auto"),
    "data.clip.naming": ("auto", "f30k", "coco", "cc"),
    "data.clip.layout": ("auto", "scan_split", "osa"),
    "prefilter.kind": PREFILTER_KINDS,
    "eval.precision": ("fp32", "bf16", "tf32"),
}

# Numeric ranges checked at load (rule name -> (test, wording)); null passes for optional keys.
_RULES: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    ">0": (lambda v: v > 0, "> 0"),
    ">=0": (lambda v: v >= 0, ">= 0"),
    ">=1": (lambda v: v >= 1, ">= 1"),
    ">=2": (lambda v: v >= 2, ">= 2 (in-batch negatives and BatchNorm)"),
    ">=3": (lambda v: v >= 3, ">= 3 (<start>, one word, <end>)"),
    "[0,1)": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "(0,1)": (lambda v: 0 < v < 1, "in (0, 1)"),
    "[0,1]": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "(0,1]": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "[-1,1]": (lambda v: -1 <= v <= 1, "in [-1, 1]"),
    "seed": (lambda v: 0 <= v < 2**32, "in [0, 2**32) (numpy's seed range)"),
    "threads": (lambda v: 1 <= v <= 4096, "in [1, 4096]"),
    # Counts of modules or loop steps: a huge value would build or loop without end.
    "[1,64]": (lambda v: 1 <= v <= 64, "in [1, 64]"),
    "workers": (lambda v: 0 <= v <= 1024, "in [0, 1024]"),
    "pixels": (lambda v: 1 <= v <= 16384, "in [1, 16384] (pixels of the image side)"),
    "[3,65536]": (lambda v: 3 <= v <= 65536, "in [3, 65536] (tokens)"),
}
RANGES: dict[str, str] = {
    "data.captions_per_image": ">=1",
    "data.dev_images": ">=1",
    "data.train_images": ">=1",
    "data.noise_ratio": "[0,1)",
    "data.noise_seed": "seed",
    "data.num_workers": "workers",
    "data.max_caption_tokens": ">=3",
    "train.epochs": ">=0",
    "train.warmup_epochs": ">=0",
    "train.batch_size": ">=2",
    "train.lr": ">0",
    "train.weight_decay": ">=0",
    "train.image_decay_per_rms": ">=0",
    "train.adam_beta1": "[0,1)",
    "train.adam_beta2": "[0,1)",
    "train.adam_eps": ">0",
    "train.lr_update": ">=1",
    "train.lr_decay": ">0",
    "train.warmup_steps": ">=0",
    "train.grad_clip": ">=0",
    "train.log_every": ">=1",
    "train.eval_batch_size": ">=1",
    "train.stop_after_epochs": ">=0",  # 0: open, set up and record, train nothing
    "train.threads": "threads",
    "train.seed": "seed",
    "eval.memory_budget_mb": ">=1",
    "prefilter.alpha": "(0,1)",
    "prefilter.fdr": "(0,1)",
    "prefilter.epochs": ">=0",
    "model.clip.image_size": "pixels",
    "model.clip.context_length": "[3,65536]",
    # Methods (each key's meaning is in its section's comments and docs/methods/).
    "method.triplet.margin": ">=0",
    "method.ugncl.tau": ">0",
    "method.ugncl.evidence_ceiling": ">0",
    "method.ugncl.p": "[0,1]",  # Eq. 8: a threshold on the uncertainty u in [0, 1]
    "method.ugncl.epsilon": "[0,1]",  # a threshold on the soft label in [0, 1]
    "method.ugncl.null_level": "[0,1]",  # a quantile
    "method.ugncl.determined_level": "(0,1)",  # a share of the null
    "method.ugncl.kl_weight": ">=0",
    "method.ugncl.clean_infonce": ">=0",
    "method.ugncl.trl_weight": ">=0",
    "method.ugncl.margin": ">=0",
    "method.ugncl.margin_base": ">=0",
    "method.ugncl.trust_delta": ">=0",
    "method.ugncl.lambda_delta": ">=0",
    "method.ugncl.lambda_min": ">=1",
    "method.ugncl.division_batch_size": ">=2",
    "method.ugncl.kl_anneal_epochs": ">=0",
    "method.ugncl.division_lambda_min": ">=1",
    "method.ugncl.start_separation": ">=0",  # Ashman's D
    "method.ugncl.start_agreement": "[-1,1]",  # Cohen's kappa
    "method.ugncl.start_max_wait": ">=0",
    "method.npc.clean_threshold": "[0,1]",  # a GMM posterior
    "method.npc.gmm.max_iter": ">=1",
    "method.npc.gmm.tol": ">0",
    "method.npc.gmm.reg_covar": ">=0",
    "method.npc.bank_batch_size": ">=1",
    "method.npc.bank_loss_weight": ">=0",
    "method.npc.siamese.lr": ">0",
    "method.npc.siamese.beta1": "[0,1)",
    "method.npc.siamese.beta2": "[0,1)",
    "method.npc.siamese.eps": ">0",
    "method.npc.siamese.weight_decay": ">=0",
    "method.sdd.gmm.max_iter": ">=1",
    "method.sdd.gmm.tol": ">0",
    "method.sdd.gmm.reg_covar": ">=0",
    "method.sdd.pass_batch_size": ">=1",
    "method.sdd.siamese.lr": ">0",
    "method.sdd.siamese.beta1": "[0,1)",
    "method.sdd.siamese.beta2": "[0,1)",
    "method.sdd.siamese.eps": ">0",
    "method.sdd.siamese.weight_decay": ">=0",
    "method.osa.margin": ">=0",
    "method.osa.random_token_high": ">=1",
    "method.osa.adapt_threshold": "[0,1]",  # a GMM posterior
    "method.osa.adapt_epochs": ">=0",
    "method.osa.adapt_lr": ">0",
    "method.osa.adapt_batch_size": ">=2",
    "method.osa.logit_scale": ">0",
    "method.osa.pass_batch_size": ">=1",
}
#: Numeric keys without a range, on purpose: thresholds and offsets on a score scale, where
#: any finite value (negative included) is a setting. A test keeps every numeric key either
#: here or in a range.
UNBOUNDED: dict[str, str] = {
    "method.sdd.alpha": "self-drop threshold on the x100 cosine scale, may be negative",
    "method.sdd.beta": "clean-set threshold on the x100 cosine scale, may be negative",
    "method.sdd.auto_alpha_std": "standard deviations from the mean, either side",
    "method.sdd.auto_beta_std": "standard deviations from the mean, either side",
    "method.osa.beta": "Eq. 4's reference score, any real number",
}


def ranges() -> dict[str, str]:
    """Range rules of numeric keys: :data:`RANGES` plus each section's ``RANGES``."""
    out = dict(RANGES)
    for prefix, registry in (("model", BACKBONES), ("method", METHODS)):
        for name, spec in registry.items():
            for key, rule in getattr(spec.config, "RANGES", {}).items():
                out[f"{prefix}.{name}.{key}"] = rule
    return out


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


#: How many files a chain of ``_base_`` may hold (base.yaml included).
MAX_CHAIN = 6


def config_chain(path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The files a config stands on, root first: each file's own tree (``_base_`` removed).

    A file names its base with ``_base_`` (resolved relative to the file, then in ``configs/``);
    without the key the base is ``configs/base.yaml``, and ``_base_: null`` ends the chain (a
    complete file, as a run folder's ``config.yaml``). A track base may itself name a base, so
    experiment files state only what differs from their track.
    """
    chain: list[tuple[Path, dict[str, Any]]] = []
    current: Path | None = path
    while current is not None:
        if any(current.resolve() == seen.resolve() for seen, _ in chain):
            names = " -> ".join(p.name for p, _ in reversed(chain))
            raise ConfigError(f"{path}: the _base_ chain loops ({names} -> {current.name})")
        if len(chain) >= MAX_CHAIN:
            raise ConfigError(
                f"{path}: the _base_ chain is longer than {MAX_CHAIN} files; configs stand on a "
                "track base over base.yaml, not on deeper chains"
            )
        tree = upgrade_tree(_read_yaml(current), str(current))
        chain.append((current, tree))
        current = _base_of(current, tree)
    return list(reversed(chain))


def _base_of(path: Path, tree: dict[str, Any]) -> Path | None:
    """The file ``tree`` (read from ``path``) stands on, or None; pops ``_base_``."""
    if BASE_KEY not in tree:
        return None if path.resolve() == DEFAULT_BASE.resolve() else DEFAULT_BASE
    name = tree.pop(BASE_KEY)
    if name is None:
        return None
    base_path = (path.parent / str(name)).resolve()
    if not base_path.is_file() and (CONFIG_DIR / str(name)).is_file():
        # A config written outside configs/ that names a shipped base (``_base_: base.yaml``).
        base_path = CONFIG_DIR / str(name)
    return base_path


def load_yaml_tree(path: Path) -> dict[str, Any]:
    """A config file merged over its chain of bases (:func:`config_chain`)."""
    tree: dict[str, Any] = {}
    for _, own in config_chain(path):
        tree = merge_trees(tree, own)
    return tree


def explicit_keys(path: Path, overrides: Sequence[str] = ()) -> set[str]:
    """The dotted keys a config states itself: set by the named file (not by the bases it
    stands on: a track base's keys sit below the method's reading) or by an override."""
    file, own = config_chain(path)[-1]
    keys = set() if file.resolve() == DEFAULT_BASE.resolve() else set(_dotted_leaves(own))
    keys |= {item.split("=", 1)[0].strip() for item in overrides if "=" in item}
    return keys


def flat_tree(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of a nested tree's leaves (``Config.to_dict()``, a YAML tree)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flat_tree(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _dotted_leaves(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.extend(_dotted_leaves(value, f"{prefix}{key}."))
        else:
            out.append(f"{prefix}{key}")
    return out


#: The keys a reading sets only on the backbone its paper trained (``READING_BACKBONE`` of the
#: method's section): the training recipe (optimiser, lr, batch, epochs, precision) of a CLIP
#: fine-tune means nothing for SGRAF trained from scratch, and the reverse.
RECIPE_PREFIX = "train."


def reading_layer(name: str, reading: Any, backbone: str | None) -> dict[str, Any]:
    """The keys method ``name``'s ``reading`` sets on ``backbone``: its ``READINGS`` entry,
    less the training recipe (:data:`RECIPE_PREFIX`) where the backbone is not the one the
    paper trained (the section's ``READING_BACKBONE``). Empty for a method without readings or
    an unknown reading."""
    section = getattr(METHODS.get(name), "config", None)
    readings = getattr(section, "READINGS", None) or {}
    values = readings.get(reading) if isinstance(reading, str) else None
    if not values:
        return {}
    home = getattr(section, "READING_BACKBONE", None)
    if home is not None and backbone is not None and backbone != home:
        return {k: v for k, v in values.items() if not k.startswith(RECIPE_PREFIX)}
    return dict(values)


def apply_reading(tree: dict[str, Any], explicit: set[str]) -> dict[str, Any]:
    """The method's reading (``method.<name>.reading``: ``paper``, ``release`` or ``package``)
    sets the keys its section lists in ``READINGS`` (the method's and shared ones, such as the
    optimiser), over base.yaml and the track bases, except those the named config file or an
    override states itself.

    ``package`` is the dataclasses' defaults; the other readings name every key where they
    differ. A key a config states beside a reading is the config's departure from it, and the
    config's first line must say so (a test checks the shipped configs). On a backbone other
    than the paper's, a reading sets the method's keys and not the paper's training recipe
    (:func:`reading_layer`): the backbone's track trains it.
    """
    name = tree.get("method", {}).get("name", MethodSection.name)
    spec = METHODS.get(name)
    if not getattr(getattr(spec, "config", None), "READINGS", None):
        return tree
    section = tree.get("method", {}).get(name, {})
    reading = section.get("reading", getattr(spec.config, "reading", "package"))
    backbone = tree.get("model", {}).get("backbone", ModelSection.backbone)
    values = reading_layer(name, reading, backbone if isinstance(backbone, str) else None)
    layer = [f"{key}={_yaml_scalar(value)}" for key, value in values.items() if key not in explicit]
    return apply_overrides(tree, layer)


def _yaml_scalar(value: Any) -> str:
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10**6)
        .strip()
        .removesuffix("...")
        .strip()
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        tree = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); a config is a YAML "
            "file, save it as UTF-8"
        ) from err
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror}") from err
    except _DuplicateKeyError as err:
        raise ConfigError(
            f"{path}: key '{err.key}' is given twice in the same mapping (lines {err.first} and "
            f"{err.second}); YAML would silently keep the last one. Delete one of them"
        ) from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(tree, dict):
        raise ConfigError(f"{path} must hold a mapping at top level, found {type(tree).__name__}")
    return tree


class _DuplicateKeyError(Exception):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class _Yaml12Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's booleans: only true/false (any case) are booleans, so
    ``train.amp=off`` and ``amp: off`` are the word ``off``, not false (YAML 1.1 also reads
    yes/no/on/off as booleans, which turned a documented value into a type error)."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def parse_scalar(raw: str) -> Any:
    """One override value as YAML 1.2 (``1e-4``, ``null``, ``off``, ``[1, 2]``)."""
    return yaml.load(raw, Loader=_Yaml12Loader)


class _UniqueKeyLoader(_Yaml12Loader):
    """``yaml.SafeLoader`` that refuses a key repeated within one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKeyError(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


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
        try:
            value = parse_scalar(raw) if raw.strip() else ""
        except yaml.YAMLError as err:
            problem = str(err).splitlines()[0]
            raise ConfigError(
                f"override '{item}': the value is not a plain YAML scalar ({problem}); "
                "give a number, a word, a quoted string or null"
            ) from err
        set_dotted(tree, dotted.strip(), value)
    return tree


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """``tree[a][b] = value`` for ``dotted = "a.b"``, making the mappings on the way."""
    node = tree
    keys = dotted.split(".")
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def build_config(tree: Mapping[str, Any]) -> Config:
    """Validate a plain tree against :class:`Config`; unknown keys and bad types are errors."""
    config = _build_dataclass(config_class(), tree, prefix="")
    _check_choices(config)
    return config


def load_config(
    name_or_path: str | Path, overrides: Sequence[str] = (), cwd: Path | None = None
) -> tuple[Config, Path]:
    """Resolve, merge, override and validate; returns the config and the file it came from.
    Relative paths are made absolute against ``cwd`` (default: the working directory)."""
    path = resolve_config_path(name_or_path)
    tree = apply_overrides(load_yaml_tree(path), overrides)
    tree = apply_reading(tree, explicit_keys(path, overrides))
    return build_config(absolute_paths(tree, cwd)), path


def absolute_paths(tree: Mapping[str, Any], cwd: Path | None = None) -> dict[str, Any]:
    """A copy of ``tree`` whose relative :data:`PATH_KEYS` are made absolute against ``cwd``
    (default: the current working directory); ``~`` is expanded, null stays null."""
    tree = copy.deepcopy(dict(tree))
    base = Path.cwd() if cwd is None else Path(cwd)
    for dotted in PATH_KEYS + PATH_OR_WORD_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = tree
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str) and node[leaf]:
            value = node[leaf]
            if dotted in PATH_OR_WORD_KEYS and not _looks_like_path(value):
                continue
            node[leaf] = str((base / Path(value).expanduser()).resolve())
    return tree


def _looks_like_path(value: str) -> bool:
    return "/" in value or value.startswith("~") or bool(Path(value).suffix)


def defaults_yaml() -> str:
    """``configs/base.yaml``: every key at its default, written from the config dataclasses
    (the one source of defaults) with each key's comment from its field and the allowed values
    of a choice key from :func:`choices` (the registries). ``tools/write_base_config.py``
    writes it; a test keeps the file equal to this text."""
    config = config_class()()
    allowed = choices()
    lines = [
        "# Every config key at its default. Written by `python tools/write_base_config.py` from",
        "# the config dataclasses (ugncl/run/config.py, each backbone's and method's",
        "# section): edit the defaults there, never here. An experiment file states only what",
        "# differs from these values.",
    ]

    def emit(node: Any, prefix: str, indent: str) -> None:
        above, notes = _field_comments(type(node))
        for f in dataclasses.fields(node):
            value, dotted = getattr(node, f.name), f"{prefix}{f.name}"
            lines.extend(
                f"{indent}# {text}" if text else f"{indent}#" for text in above.get(f.name, [])
            )
            note = _choice_note(notes.get(f.name, ""), allowed.get(dotted))
            tail = f"  # {note}" if note else ""
            if dataclasses.is_dataclass(value):
                empty = not dataclasses.fields(value)
                lines.append(f"{indent}{f.name}:{' {}' if empty else ''}{tail}")
                emit(value, dotted + ".", indent + "  ")
            else:
                text = yaml.safe_dump(value, default_flow_style=True).strip()
                text = text.removesuffix("\n...").strip()
                lines.append(f"{indent}{f.name}: {text}{tail}")

    emit(config, "", "")
    return "\n".join(lines) + "\n"


def _field_comments(cls: type) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The comment lines right above each field of ``cls``'s source and its trailing
    ``# comment``."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # a class made at run time (the Model/Method sections)
        return {}, {}
    above: dict[str, list[str]] = {}
    trailing: dict[str, str] = {}
    block: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        field_line = re.match(r"\s+(\w+): [^=]+=", line)
        if field_line:
            name = field_line.group(1)
            if block:
                above[name] = block
            tail = re.match(r"\s+\w+: [^#]*?#\s*(.+)$", line)
            if tail:
                trailing[name] = tail.group(1).strip()
        block = []
    return above, trailing


def _choice_note(comment: str, options: tuple[str, ...] | None) -> str:
    """A field's comment, led by its allowed values unless the comment lists exactly them."""
    if not options:
        return comment
    if "|" in comment:
        listed = {part.strip().split()[0] for part in comment.split("|") if part.strip()}
        if listed == set(options):
            return comment
        comment = ""
    return " | ".join(options) + (f"; {comment}" if comment else "")


def config_yaml(config: Config) -> str:
    """The resolved config as YAML, in the dataclasses' key order (what a run saves)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def save_config(config: Config, path: Path) -> None:
    path.write_text(config_yaml(config), encoding="utf-8")


def all_keys(cls: type | None = None, prefix: str = "") -> list[str]:
    """Every valid dotted key (leaves and sections) of a config dataclass."""
    cls = cls or config_class()
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
    for dotted, options in choices().items():
        value: Any = config
        for key in dotted.split("."):
            value = getattr(value, key)
        if value not in options:
            raise ConfigError(f"config key '{dotted}' must be one of {options}, got {value!r}")
    _check_finite(config, "")
    for dotted, rule in ranges().items():
        value: Any = config
        for key in dotted.split("."):
            value = getattr(value, key)
        test, wording = _RULES[rule]
        if value is not None and not test(value):
            raise ConfigError(f"config key '{dotted}' must be {wording}, got {value!r}")


def _check_finite(node: Any, prefix: str) -> None:
    """Every float setting must be a finite number (``nan``/``inf`` parse as floats)."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            _check_finite(value, f"{prefix}{f.name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key '{prefix}{f.name}' must be a finite number, got {value}")


def _registered_classes() -> tuple[type, type, type]:
    return _config_classes(tuple(BACKBONES.items()), tuple(METHODS.items()))


def __getattr__(name: str) -> type:
    """``RegisteredConfig``, ``ModelConfig``, ``MethodConfig``: the classes of the backbones and
    methods registered when asked (a plug-in or a test may register one after this module
    loaded); pickle finds a config's classes here when a run is sent to a worker process."""
    names = ("RegisteredConfig", "ModelConfig", "MethodConfig")
    if name in names:
        return _registered_classes()[names.index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
