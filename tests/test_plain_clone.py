"""The suite must run on a plain clone: no test may read files outside the repository."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_reads_outside_the_repository():
    offenders = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path.name != Path(__file__).name and '"shared"' in path.read_text(encoding="utf-8")
    ]
    assert offenders == [], f"tests reading files outside the repository: {offenders}"


def test_fixtures_are_in_the_repository_with_their_source():
    fixtures = TESTS / "fixtures"
    readme = (fixtures / "README.md").read_text(encoding="utf-8")
    for name in ("f30k_precomp_vocab.json", "coco_precomp_vocab.json", "cc152k_test_caps.tsv"):
        assert (fixtures / name).stat().st_size > 0
        assert name in readme and "Apache-2.0" in readme
