"""A seeded sample of config keys, each set to a wrong type, -1, 0, inf, nan and a huge
number: every probe ends in one error line or a valid run, never a traceback (load_config and a
new run's pre-flight checks; nothing trains). The sample changes with the day
(``UGNCL_FUZZ_SEED`` fixes it); ``python tools/fuzz_config.py`` sweeps every key."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ugncl.run import config_fuzz

KEYS_PER_RUN = 5
SEED = int(os.environ.get("UGNCL_FUZZ_SEED", time.strftime("%Y%m%d")))

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return config_fuzz.make_world(tmp_path_factory.mktemp("fuzz_world"))


def test_a_sample_of_keys_never_ends_in_a_traceback(world: Path) -> None:
    outcomes = config_fuzz.sweep(world, KEYS_PER_RUN, SEED)
    assert len(outcomes) == KEYS_PER_RUN * 6
    tracebacks = [f"{o.key}={o.value}: {o.message}" for o in outcomes if o.kind == "traceback"]
    assert not tracebacks, (
        f"UGNCL_FUZZ_SEED={SEED}: {tracebacks} (python tools/fuzz_config.py --keys "
        f"{KEYS_PER_RUN} --seed {SEED} repeats the sample)"
    )
    assert any(o.kind == "error" for o in outcomes)


def test_the_probes_tell_the_three_outcomes_apart(world: Path) -> None:
    assert config_fuzz.probe(world, "method.ugncl.p", "2").kind == "error"
    assert config_fuzz.probe(world, "method.ugncl.p", "0.4").kind == "valid"
    kinds = {k: t for k, t in config_fuzz.leaf_keys()}
    assert kinds["train.lr"] is float and kinds["train.seed"] is int
    assert kinds["train.amp"] is str and kinds["data.allow_nonfinite"] is bool
