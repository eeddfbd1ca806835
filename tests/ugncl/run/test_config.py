"""Config files: chains of bases, dotted overrides, strict keys with suggestions."""

import dataclasses
import re
from pathlib import Path

import pytest

from ugncl.core.config import Config
from ugncl.run.config import (
    CONFIG_DIR,
    ConfigError,
    apply_overrides,
    build_config,
    load_config,
    resolve_config_path,
    save_config,
)

SHIPPED = [
    "ugncl_flickr",
    "ugncl_coco",
    "ugncl_cc152k",
    "triplet_flickr",
    "ugncl_synthetic",
    "triplet_synthetic",
    "clean_synthetic",
]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_validate(name: str) -> None:
    config, path = load_config(f"{name}.yaml")
    assert isinstance(config, Config)
    assert path == CONFIG_DIR / f"{name}.yaml"


def test_paper_settings_per_dataset() -> None:
    coco, _ = load_config("ugncl_coco")
    cc, _ = load_config("ugncl_cc152k")
    flickr, _ = load_config("ugncl_flickr")
    triplet, _ = load_config("triplet_flickr")
    assert (coco.train.epochs, coco.train.warmup_epochs, coco.data.test_split) == (20, 2, "testall")
    assert (cc.data.captions_per_image, cc.data.noise_ratio) == (1, 0.0)
    assert (flickr.model.sgraf.num_views, flickr.method.name, flickr.train.lr) == (2, "ugncl", 2e-4)
    assert (triplet.model.sgraf.num_views, triplet.method.name) == (1, "triplet")
    # SGRAF's released word-embedding dropout, set for 300-dimensional embeddings
    assert {c.model.sgraf.word_dropout for c in (coco, cc, flickr, triplet)} == {0.4}


def test_demo_rows_train_one_model_on_one_split() -> None:
    # make demo reads UGNCL against a clean reference and a triplet baseline (and OSA on SGRAF
    # against the same baseline): the rows must be the same SGRAF (UGNCL's W image views aside)
    # on the same images, batch and lr, so a change to one row's network cannot slip in alone.
    names = ("clean_synthetic", "triplet_synthetic", "ugncl_synthetic", "osa_sgraf_synthetic")
    rows = [load_config(n)[0] for n in names]
    models = {dataclasses.astuple(dataclasses.replace(c.model.sgraf, num_views=1)) for c in rows}
    assert len(models) == 1
    data = {(c.data.root, c.data.train_images, c.data.dev_images) for c in rows}
    assert len(data) == 1
    assert {(c.train.batch_size, c.train.lr, c.train.seed) for c in rows} == {(32, 1e-3, 0)}


def test_clean_reference_trains_as_long_as_ugncl() -> None:
    # UGNCL/clean is a demo target: a reference trained for fewer epochs than UGNCL would
    # flatter the ratio (docs/methods/ugncl.md).
    clean, ugncl = (load_config(n)[0].train for n in ("clean_synthetic", "ugncl_synthetic"))
    assert clean.warmup_epochs + clean.epochs == ugncl.warmup_epochs + ugncl.epochs


def test_bare_name_and_extension_resolve() -> None:
    assert resolve_config_path("ugncl_flickr") == resolve_config_path("ugncl_flickr.yaml")


def test_missing_config_lists_available() -> None:
    with pytest.raises(ConfigError, match="ugncl_flickr.yaml"):
        resolve_config_path("ugncl_flikr")


def test_overrides_win_and_parse_yaml_scalars() -> None:
    config, _ = load_config(
        "ugncl_flickr", ["model.sgraf.head=saf", "train.lr=1e-4", "data.vocab=null", "train.seed=3"]
    )
    assert config.model.sgraf.head == "saf"
    assert config.train.lr == pytest.approx(1e-4)
    assert config.data.vocab is None
    assert config.train.seed == 3


def test_typo_suggests_the_right_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.epohcs'.*'train\.epochs'"):
        load_config("ugncl_flickr", ["train.epohcs=3"])
    with pytest.raises(ConfigError, match=r"did you mean 'method\.ugncl\.trl_weight'"):
        build_config({"method": {"ugncl": {"trl_wieght": 0.2}}})


def test_wrong_types_and_choices_are_errors() -> None:
    with pytest.raises(ConfigError, match="train.batch_size' expects int"):
        build_config({"train": {"batch_size": "big"}})
    with pytest.raises(ConfigError, match="model.sgraf.head' must be one of"):
        build_config({"model": {"sgraf": {"head": "sgraf"}}})
    with pytest.raises(ConfigError, match=r"data.noise_ratio' must be in \[0, 1\)"):
        build_config({"data": {"noise_ratio": 1.0}})


def test_bases_chain_and_the_chain_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("_base_: b.yaml\n")
    (tmp_path / "b.yaml").write_text("_base_: c.yaml\n")
    (tmp_path / "c.yaml").write_text("train: {epochs: 1}\n")
    assert load_config(tmp_path / "a.yaml")[0].train.epochs == 1
    for k in range(7):
        (tmp_path / f"d{k}.yaml").write_text(f"_base_: d{k + 1}.yaml\n")
    (tmp_path / "d7.yaml").write_text("train: {epochs: 1}\n")
    with pytest.raises(ConfigError, match="longer than"):
        load_config(tmp_path / "d0.yaml")


def test_override_needs_equals() -> None:
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, ["train.epochs"])


def test_duplicate_yaml_keys_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("_base_: null\ntrain:\n  lr: 1.0e-4\n  epochs: 3\n  lr: 2.0e-4\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml: key 'lr' is given twice .*lines 3 and 5"):
        load_config(path)
    path.write_text("data:\n  name: x\ntrain:\n  epochs: 3\ndata:\n  root: y\n")
    with pytest.raises(ConfigError, match="key 'data' is given twice"):
        load_config(path)


def test_config_without_base_gets_base_yaml_defaults(tmp_path: Path) -> None:
    """A file without ``_base_`` must not fall back to other defaults than base.yaml's."""
    (tmp_path / "mine.yaml").write_text("train:\n  epochs: 3\n")
    (tmp_path / "explicit.yaml").write_text(
        f"_base_: {CONFIG_DIR / 'base.yaml'}\ntrain:\n  epochs: 3\n"
    )
    implicit, _ = load_config(tmp_path / "mine.yaml")
    explicit, _ = load_config(tmp_path / "explicit.yaml")
    assert implicit == explicit and implicit.train.epochs == 3
    base, _ = load_config("base")
    assert dataclasses.replace(implicit.train, epochs=base.train.epochs) == base.train
    # a complete file (a run's saved config.yaml) loads to itself
    saved = tmp_path / "saved.yaml"
    save_config(implicit, saved)
    assert load_config(saved)[0] == implicit


def test_relative_data_paths_are_stored_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config, _ = load_config(
        "ugncl_synthetic", ["data.vocab=v/vocab.json", "data.noise_file=~/n.npy"]
    )
    assert config.data.root == str(tmp_path / "data" / "synthetic")
    assert config.data.vocab == str(tmp_path / "v" / "vocab.json")
    assert config.data.noise_file == str(Path.home() / "n.npy")
    absolute, _ = load_config("ugncl_synthetic", ["data.root=/srv/scan"])
    assert absolute.data.root == "/srv/scan"


def test_registry_names_are_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"train.optimizer' must be one of \('adam', 'adamw'\)"):
        build_config({"train": {"optimizer": "sgd"}})
    from ugncl.backbones.registry import BACKBONES
    from ugncl.methods import METHODS

    backbones = re.escape(str(tuple(BACKBONES)))
    with pytest.raises(ConfigError, match=rf"model.backbone' must be one of {backbones}"):
        build_config({"model": {"backbone": "blip"}})
    assert {"sgraf", "clip"} <= set(BACKBONES)

    assert {"ugncl", "triplet", "infonce", "npc", "sdd", "osa"} <= set(METHODS)
    choices = re.escape(str(tuple(METHODS)))  # the registry's names, a new method included
    with pytest.raises(ConfigError, match=rf"method.name' must be one of {choices}"):
        build_config({"method": {"name": "dividemix"}})
    with pytest.raises(ConfigError, match=r"did you mean 'model\.sgraf\.embed_dim'"):
        build_config({"model": {"sgraf": {"embed_dimm": 8}}})


def test_base_yaml_is_written_from_the_dataclasses() -> None:
    """One source of defaults: configs/base.yaml is the dataclasses' text (regenerate it with
    tools/write_base_config.py), so a config built without a file gets the same values."""
    from ugncl.run.config import DEFAULT_BASE, defaults_yaml, load_yaml_tree

    assert DEFAULT_BASE.read_text(encoding="utf-8") == defaults_yaml(), (
        "configs/base.yaml is stale: run python tools/write_base_config.py"
    )
    assert build_config({}).to_dict() == build_config(load_yaml_tree(DEFAULT_BASE)).to_dict()


def test_written_defaults_list_the_registries_choices(monkeypatch) -> None:
    """A choice key's comment is its allowed values, from the registry, even where the field's
    own comment lists others (a stale list is replaced, not repeated)."""
    from ugncl.methods import METHODS
    from ugncl.run.config import _choice_note, defaults_yaml

    text = defaults_yaml()
    assert "  name: ugncl  # " + " | ".join(METHODS) in text
    assert "  optimizer: adamw  # adam | adamw" in text
    assert "evidence: tanh  # tanh | softplus" in text
    assert _choice_note("a | b (old)", ("a", "c")) == "a | c"
    assert _choice_note("a (x) | c", ("a", "c")) == "a (x) | c"
    assert _choice_note("why", ("a", "c")) == "a | c; why"


def test_eval_score_choices_come_from_the_evaluation_registry() -> None:
    from ugncl.core.evaluation import EVAL_SCORES
    from ugncl.run.config import choices

    assert choices()["eval.eval_score"] == EVAL_SCORES
    assert build_config({"eval": {"eval_score": "evidence_mean_exp"}}).eval.eval_score == (
        "evidence_mean_exp"
    )


@pytest.mark.parametrize(
    ("tree", "key"),
    [
        ({"train": {"lr": float("nan")}}, "train.lr"),
        ({"train": {"lr": 0.0}}, "train.lr"),
        ({"train": {"threads": 0}}, "train.threads"),
        ({"data": {"train_images": 0}}, "data.train_images"),
        ({"model": {"sgraf": {"num_views": 0}}}, "model.sgraf.num_views"),
        ({"train": {"grad_clip": float("inf")}}, "train.grad_clip"),
    ],
)
def test_out_of_range_values_name_the_key(tree: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}' must be"):
        build_config(tree)


@pytest.mark.parametrize("name", ["ugncl_flickr", "ugncl_coco", "ugncl_cc152k", "ugncl_synthetic"])
def test_ugncl_configs_keep_the_papers_per_anchor_loss_balance(name: str) -> None:
    # The trusted robust loss is summed over the batch's anchors and the evidential loss is
    # averaged over its queries, so each anchor's TRL weighs xi2 against 1/K of L_e: the
    # paper's xi2 = 0.8 at K = 128 is xi2 * K = 102.4. ugncl_synthetic (K = 32) with xi2 = 0.8
    # gave a quarter of that, and xi1 = 0.1 then held every score down even on the true
    # clean/noisy split (docs/methods/ugncl.md, "The KL brake").
    config, _ = load_config(name)
    ugncl = config.method.ugncl
    assert (ugncl.kl_weight, ugncl.tau) == (0.1, 0.1)
    from ugncl.methods.ugncl.method import UGNCLMethod

    method = UGNCLMethod(trl_weight=ugncl.trl_weight)
    assert method.trl_weight_at(config.train.batch_size) * config.train.batch_size == (
        pytest.approx(0.8 * 128)
    )
    assert UGNCLMethod(trl_weight=0.5).trl_weight_at(32) == 0.5


def _restated_defaults(
    tree: dict, defaults: dict, prefix: str = "", held: frozenset[str] = frozenset()
) -> list[str]:
    found = []
    for key, value in tree.items():
        if key in ("_base_", "reading") or key not in defaults or f"{prefix}{key}" in held:
            continue  # a reading is stated even where it is the default: it names what runs
        default = defaults[key]
        if isinstance(value, dict) and value and isinstance(default, dict):
            found += _restated_defaults(value, default, f"{prefix}{key}.", held)
        elif (value == default and type(value) is type(default)) or (
            isinstance(value, float | int) and not isinstance(value, bool)
            and isinstance(default, float) and value == default
        ):  # fmt: skip
            found.append(f"{prefix}{key}")
    return found


def _reading_keys(tree: dict) -> frozenset[str]:
    """The dotted keys any reading of the config's method sets on its backbone."""
    from ugncl.methods import METHODS
    from ugncl.run.config import reading_layer

    name = tree.get("method", {}).get("name")
    backbone = tree.get("model", {}).get("backbone")
    readings = getattr(getattr(METHODS.get(name), "config", None), "READINGS", None) or {}
    return frozenset(k for r in readings for k in reading_layer(name, r, backbone))


def test_config_files_state_only_what_differs_from_their_bases() -> None:
    """A value equal to what a file's bases already give (the dataclasses' defaults under
    configs/base.yaml, then each track) is said once, in the lowest file that needs it. A key
    some reading of the file's method sets is exempt: stated in the file, it holds under every
    reading (``npc_synthetic``'s lr against the paper reading's ViT-B/32 rate)."""
    from ugncl.run.config import DEFAULT_BASE, config_chain, config_class, merge_trees

    defaults = config_class()().to_dict()
    restated = {}
    for path in sorted(CONFIG_DIR.rglob("*.yaml")):
        if path == DEFAULT_BASE:
            continue
        *bases, (_, own) = config_chain(path)
        below = defaults
        for _, tree in bases:
            below = merge_trees(below, tree)
        found = _restated_defaults(own, below, held=_reading_keys(merge_trees(below, own)))
        if found:
            restated[str(path.relative_to(CONFIG_DIR))] = found
    assert not restated, f"keys at the value their bases give (delete them): {restated}"
    assert _restated_defaults({"train": {"lr": 2e-4, "epochs": 3}}, defaults) == ["train.lr"]


@pytest.mark.parametrize(
    ("name", "reading"),
    [("ugncl_synthetic", "package"), ("ugncl_flickr", "paper"), ("ugncl_coco", "paper"),
     ("ugncl_cc152k", "paper")],
)  # fmt: skip
def test_ugncl_configs_take_the_method_and_optimiser_from_their_reading(name, reading) -> None:
    # A UGNCL config states data, schedule, model size and its reading only: the real-data configs
    # run the paper as printed (the only reading with published evidence on real features), the
    # synthetic one the package's decisions measured on those worlds.
    reference, _ = load_config("base", [f"method.ugncl.reading={reading}"])
    config, _ = load_config(name)
    assert config.method.ugncl == reference.method.ugncl
    assert config.prefilter == reference.prefilter
    optimiser = ("optimizer", "weight_decay", "image_decay_per_rms", "grad_clip", "schedule", "amp")
    assert [getattr(config.train, k) for k in optimiser] == [
        getattr(reference.train, k) for k in optimiser
    ]


@pytest.mark.parametrize(
    ("method", "home", "other"),
    [("npc", "clip_synthetic", "clean_synthetic"), ("sdd", "clip_synthetic", "clean_synthetic"),
     ("osa", "clip_synthetic", "clean_synthetic"), ("ugncl", "clean_synthetic", "clip_synthetic"),
     ("decl", "clean_synthetic", "clip_synthetic")],
)  # fmt: skip
def test_a_reading_gives_its_training_recipe_on_its_papers_backbone_only(method, home, other):
    """NPC's paper fine-tunes CLIP at lr 2e-7: on SGRAF (trained from scratch) its paper
    reading sets NPC's keys and leaves the training to the SGRAF track, and UGNCL's Adam recipe
    is not CLIP's; the method's own keys follow the reading on both backbones."""
    sets = (f"method.name={method}", f"method.{method}.reading=paper")
    at_home = load_config(home, sets)[0]
    away, track = load_config(other, sets)[0], load_config(other, (f"method.name={method}",))[0]
    assert away.train == track.train
    assert at_home.train != load_config(home, (f"method.name={method}",))[0].train
    assert getattr(away.method, method) == getattr(at_home.method, method)


def test_plain_baselines_keep_the_releases_optimiser() -> None:
    # The plain SGRAF baselines train as SGRAF/NCR do (Adam, no decay): UGNCL's decay is its own
    # decision, and a baseline sharing it would no longer be the plain model.
    for name in ("clean_synthetic", "triplet_synthetic", "triplet_flickr", "osa_sgraf_synthetic"):
        train = load_config(name)[0].train
        assert (train.optimizer, train.weight_decay, train.image_decay_per_rms) == (
            "adam",
            0.0,
            None,
        )


def _numeric_keys() -> list[str]:
    import typing

    from ugncl.run.config import config_class

    def walk(cls: type, prefix: str):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                yield from walk(hint, f"{prefix}{f.name}.")
            elif {int, float} & set(typing.get_args(hint) or (hint,)):
                yield f"{prefix}{f.name}"

    return list(walk(config_class(), ""))


def test_every_numeric_key_has_a_range_or_is_unbounded_on_purpose() -> None:
    from ugncl.run.config import UNBOUNDED, ranges

    keys = _numeric_keys()
    assert "method.ugncl.p" in keys and "train.lr" in keys
    missing = [k for k in keys if k not in ranges() and k not in UNBOUNDED]
    assert not missing, f"numeric keys with neither a range nor an UNBOUNDED entry: {missing}"
    assert not set(ranges()) & set(UNBOUNDED)


@pytest.mark.parametrize(
    "override, wording",
    [
        ("method.ugncl.p=2", r"method.ugncl.p' must be in \[0, 1\], got 2.0"),
        ("train.seed=-1", r"train.seed' must be in \[0, 2\*\*32\)"),
        ("method.npc.clean_threshold=1.5", r"in \[0, 1\]"),
        ("prefilter.fdr=0", r"in \(0, 1\)"),
    ],
)
def test_documented_ranges_are_checked(override: str, wording: str) -> None:
    with pytest.raises(ConfigError, match=wording):
        load_config("ugncl_synthetic", [override])
