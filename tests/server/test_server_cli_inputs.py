"""Bad and unusual inputs to the trace-reading commands (``analyze``, ``diagnose``), as a user types
them: one line on stderr that says what is wrong and where, exit status 2, never a traceback."""

from __future__ import annotations

import pytest

from diagnosers.samples import artifact_trace
from server.cli import main


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert "error:" in last
    return last


@pytest.mark.parametrize("command", ["analyze", "diagnose"])
@pytest.mark.parametrize("flag", ["--dp", "--pp", "--tp", "--cp", "--vpp", "--gpus-per-host"])
def test_sizes_must_be_positive(command: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, str(artifact_trace("ST")), flag, "0"])
    assert exc.value.code == 2
    line = one_error_line(capsys)
    assert f"argument {flag}: expected a positive integer, got 0" in line


def test_analyze_and_diagnose_share_the_reading_arguments() -> None:
    from server.cli import build_parser

    parser = build_parser()
    common = ["x.parquet", "--format", "csv", "--meta", "m.yaml", "--dp", "2", "--pp", "4", "--tp", "2",
              "--cp", "1", "--vpp", "2", "--gpus-per-host", "4", "--layers-per-stage", "9,9,9,9"]
    a = parser.parse_args(["analyze", *common])
    d = parser.parse_args(["diagnose", *common])
    from server.commands.trace_args import read_options

    assert read_options(a) == read_options(d)
    opts = read_options(d)
    assert (opts.dp, opts.pp, opts.tp, opts.vpp, opts.gpus_per_host) == (2, 4, 2, 2, 4)
    assert opts.layers_per_stage == [9, 9, 9, 9] and str(opts.meta_path) == "m.yaml"
