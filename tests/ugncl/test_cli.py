"""The tools' error contract: a UserError is one ``error:`` line and exit code 2."""

import pytest

from precomputed.errors import CheckpointError, DataFormatError, UserError
from ugncl.cli import cli_main
from ugncl.config import ConfigError


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
