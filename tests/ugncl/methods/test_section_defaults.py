"""Methods take their defaults from their config section (one source): a method built with no
arguments equals the one built from the default section. A method takes the section whole
(``config``, UGNCL) or names its fields as keyword arguments without repeating their values;
a keyword argument that is not a field of the section must carry its own default."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import pytest

from ugncl.core.method import Method, section_defaults
from ugncl.methods import METHODS


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_method_s_defaults_are_its_config_section_s(name: str) -> None:
    spec = METHODS[name]
    params = inspect.signature(spec.cls.__init__).parameters
    section = spec.config()
    if "config" in params:  # the section whole, validated once
        plain, built = spec.cls(), spec.cls.from_config(section, eval_score="raw")
        assert plain.config == built.config == section and built.config is not section
        return
    fields = {f.name for f in dataclasses.fields(section)}
    assert fields <= set(params), f"{name}: fields missing from __init__"
    # no default is written twice: the signature names the section's fields without values
    assert not [n for n in fields if params[n].default is not inspect.Parameter.empty]
    plain, built = spec.cls(), spec.cls.from_config(section, eval_score="raw")
    for field in fields:
        assert getattr(plain, field, None) == getattr(built, field, None)


def test_section_defaults_fill_only_what_is_not_given() -> None:
    @dataclass
    class ToyConfig:
        margin: float = 0.3
        hard: bool = True

    class Toy(Method):
        @section_defaults(ToyConfig)
        def __init__(self, *, margin: float, hard: bool, eval_score: str = "raw") -> None:
            super().__init__(eval_score=eval_score)
            self.margin, self.hard = margin, hard

    toy = Toy(hard=False)
    assert (toy.margin, toy.hard) == (0.3, False)
    assert Toy.from_config(ToyConfig(margin=0.5), eval_score="sigmoid").margin == 0.5

    with pytest.raises(TypeError, match=r"\['stray'\] are not fields of ToyConfig"):

        class Bad(Method):
            @section_defaults(ToyConfig)
            def __init__(self, *, margin: float, stray: int) -> None:
                super().__init__()
