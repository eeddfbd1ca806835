"""The tools' error contract: a UserError is one ``error:`` line and exit code 2."""

import sys

import pytest

from precomputed.errors import CheckpointError, DataFormatError, UserError
from ugncl.run.cli import cli_main
from ugncl.run.config import ConfigError


@pytest.mark.parametrize("error", [DataFormatError, CheckpointError, ConfigError, UserError])
def test_user_errors_become_one_line_and_exit_2(error, capsys):
    @cli_main
    def main(argv=None) -> int:
        raise error("x.npy is broken\n  copy it again")

    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.err == "error: x.npy is broken; copy it again\n" and captured.out == ""


def test_bugs_keep_their_traceback():
    @cli_main
    def main(argv=None) -> int:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        main([])
    assert cli_main(lambda argv=None: 0)([]) == 0


def test_setup_logging_drops_an_implicit_basicconfig_handler(capsys):
    """A library's module-level ``logging.info`` installs basicConfig's console handler before
    the run configures logging; every line then printed twice (seen with open_clip). After
    ``setup_logging`` one line is printed, and a test framework's handlers are kept."""
    import logging

    from ugncl.core.engine.recorder import _HANDLER_TAG, setup_logging

    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        for handler in list(root.handlers):
            if type(handler) is logging.StreamHandler:
                root.removeHandler(handler)
        # pytest's capture handlers (ours from earlier tests are replaced by design)
        foreign = [h for h in root.handlers if not getattr(h, _HANDLER_TAG, False)]
        implicit = logging.StreamHandler(sys.stderr)
        root.addHandler(implicit)
        setup_logging(None)
        logging.getLogger("ugncl.test").info("once")
        out = capsys.readouterr()
        assert (out.out + out.err).count("once") == 1
        assert implicit not in root.handlers
        assert all(h in root.handlers for h in foreign)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
