"""Bad and unusual inputs to the trace-reading commands (``analyze``, ``diagnose``), as a user types
them: one line on stderr that says what is wrong and where, exit status 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

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
    common = ["x.parquet", "--format", "csv", "--meta", "m.yaml", "--dp", "2", "--pp", "4", "--tp", "2"]
    common += ["--cp", "1", "--vpp", "2", "--gpus-per-host", "4", "--layers-per-stage", "9,9,9,9"]
    a = parser.parse_args(["analyze", *common])
    d = parser.parse_args(["diagnose", *common])
    from server.cli.commands.trace_args import read_options

    assert read_options(a) == read_options(d)
    opts = read_options(d)
    assert (opts.dp, opts.pp, opts.tp, opts.vpp, opts.gpus_per_host) == (2, 4, 2, 2, 4)
    assert opts.layers_per_stage == [9, 9, 9, 9] and str(opts.meta_path) == "m.yaml"


ST_META = "trial_name: ST\nrun_id: 0\ndp_size: 2\ndsp_size: 1\npp_size: 4\ntp_size: 1\nvpp_size: 1\n"


def st_csv(folder: Path) -> Path:
    """The ST sample as CSV (optype as text), written with pyarrow."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    table = pq.read_table(artifact_trace("ST"))
    table = table.set_column(
        table.column_names.index("optype"), "optype", table.column("optype").cast(pa.string())
    )
    out = folder / "ops.csv"
    pcsv.write_csv(table, out)
    return out


def st_jsonl(folder: Path) -> Path:
    import pyarrow.parquet as pq

    rows = pq.read_table(artifact_trace("ST")).to_pylist()
    out = folder / "ops.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_a_readme_next_to_the_traces_is_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(artifact_trace("ST"), tmp_path / "trace-ST.parquet")
    (tmp_path / "meta-ST.yaml").write_text(ST_META)
    (tmp_path / "README.md").write_text("# how this trace was recorded\n")
    assert main(["analyze", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["trial_name"] == "ST" and out["slowdown"] == pytest.approx(1.1787, abs=1e-3)
    assert any("skipped 1 file(s)" in n and "README.md" in n for n in out["notes"])


def test_a_generated_job_folder_analyses_as_the_docs_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/GENERATOR.md: "straggler-lens analyze out/st"; the folder also holds labels.json
    out_dir = tmp_path / "st"
    assert main(["generate", "--dp", "2", "--pp", "2", "--microbatches", "4", "--steps", "2",
                 "--scenario", "stage-imbalance", "--format", "native", "-o", str(out_dir)]) == 0
    capsys.readouterr()
    assert {p.name for p in out_dir.iterdir()} >= {"labels.json", "trace.parquet", "trace.jsonl"}
    assert main(["analyze", str(out_dir), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("labels.json" in n and "trace.parquet" in n for n in notes)


def test_empty_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "ops.csv"
    empty.write_bytes(b"")
    assert main(["analyze", str(empty)]) == 2
    assert one_error_line(capsys).endswith(f"the file is empty (file={empty})")
    assert main(["analyze", ""]) == 2
    assert "an empty path was given" in one_error_line(capsys)


def test_a_broken_jsonl_line_is_named_by_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = st_jsonl(tmp_path)
    lines = good.read_text().splitlines(keepends=True)
    lines[76] = '{"dp_rank": 0, "stage": 0, broken\n'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines))
    assert main(["analyze", str(bad)]) == 2
    line = one_error_line(capsys)
    assert "on line 77" in line and f"file={bad}" in line


def test_a_truncated_gzip_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(st_jsonl(tmp_path).read_bytes())
    cut = tmp_path / "ops.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    assert main(["analyze", str(cut)]) == 2
    assert one_error_line(capsys).endswith(f"the gzip file is truncated (it ends before its compressed "
                                           f"stream does) (file={cut})")


@pytest.mark.parametrize(
    ("index", "column", "value", "expect"),
    [
        (1, "duration", "-0.5", "negative duration -0.5"),
        (1, "optype", '"forward-compuet"', "unknown op type 'forward-compuet'"),
        (49, "duration", "abc", "column 'duration' holds 'abc', not a number"),
        (49, "stage", "1.5", "column 'stage' holds 1.5, not an integer"),
    ],
)
def test_a_bad_csv_cell_is_named_by_file_rank_step_op(
    index: int, column: str, value: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = st_csv(tmp_path).read_text().splitlines()
    header = lines[0].replace('"', "").split(",")
    row = lines[index].split(",")
    rank, step = row[header.index("rank")], row[header.index("step")]
    row[header.index(column)] = value
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([*lines[:index], ",".join(row), *lines[index + 1 :]]) + "\n")
    meta = tmp_path / "meta.yaml"
    meta.write_text(ST_META)
    assert main(["analyze", str(bad), str(meta)]) == 2
    line = one_error_line(capsys)
    assert expect in line and f"(file={bad}, rank={rank}, step={step}, op=" in line


def test_a_short_csv_row_is_named_by_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = st_csv(tmp_path).read_text().splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join([*lines[:49], "1,2,3", *lines[50:]]) + "\n")
    assert main(["analyze", str(short)]) == 2
    assert "Expected 11 columns, got 3: 1,2,3 (line 50)" in one_error_line(capsys)


def test_a_csv_missing_a_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.csv as pcsv

    table = pcsv.read_csv(st_csv(tmp_path)).drop_columns(["duration"])
    bad = tmp_path / "nodur.csv"
    pcsv.write_csv(table, bad)
    assert main(["analyze", str(bad)]) == 2
    assert one_error_line(capsys).endswith(f"missing columns: duration (file={bad})")


@pytest.mark.parametrize(
    ("meta", "expect"),
    [
        ("dp_size: 0\npp_size: 4\n", "dp: Input should be greater than or equal to 1 (got 0)"),
        ("dp_size: two\n", "bad job metadata: dp: Input should be a valid integer"),
        ("dp_size: 2\npp_szie: 4\n", "unknown meta key(s) pp_szie (did you mean pp_size?)"),
        ("dp_size: [2\n", "meta yaml is not valid YAML at line 2, column 1"),
        ("- 2\n- 4\n", "meta yaml is not a mapping"),
        ("dp_size: 2\npp_size: 4\nlayers_per_stage: [9, 9, 9]\n", "layers_per_stage has 3 entries but pp=4"),
    ],
)
def test_a_bad_meta_yaml_gets_one_line_naming_it(
    meta: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "meta.yaml"
    path.write_text(meta)
    assert main(["analyze", str(artifact_trace("ST")), "--meta", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert expect in err and f"(file={path})" in err


DLRM = Path("/work/shared/data/kineto/param-dlrm-8rank")
EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "kineto_example" / "slow-rank" / "traces"


def test_kineto_reads_the_job_keys_of_a_meta_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text("dp_size: 2\npp_size: 2\ngpus_per_host: 2\nlayers_per_stage: [3, 3]\n")
    assert main(["analyze", str(EXAMPLE), str(meta), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert (job["dp"], job["pp"], job["gpus_per_host"], job["layers_per_stage"]) == (2, 2, 2, [3, 3])
    # the command line wins over the meta yaml, as for the other readers
    assert main(["analyze", str(EXAMPLE), str(meta), "--gpus-per-host", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"]["gpus_per_host"] == 4
    meta.write_text("dp_size: two\n")
    assert main(["analyze", str(EXAMPLE), str(meta)]) == 2
    assert "meta key dp_size must be a positive integer, got 'two'" in one_error_line(capsys)


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared Kineto data not present")
def test_kineto_layout_flags_that_do_not_fit_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    # a plain data-parallel trace cannot be split into pipeline stages
    assert main(["analyze", str(DLRM), "--dp", "2", "--pp", "4"]) == 2
    line = one_error_line(capsys)
    assert "the layout has pp=4" in line and "a plain data-parallel trace needs pp = 1" in line
    assert main(["analyze", str(DLRM), "--dp", "3"]) == 2
    assert "world size 8 does not split into dp 3 x tp 1 x cp 1 x the rest" in one_error_line(capsys)


def test_an_output_path_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert main(["diagnose", str(artifact_trace("ST")), "--no-similar", "--heatmap", str(folder)]) == 2
    assert one_error_line(capsys).endswith(f"error: Is a directory: {folder}")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["generate", "--steps", "1", "-o", str(a_file)]) == 2
    assert one_error_line(capsys).endswith(f"error: File exists: {a_file}")


@pytest.mark.parametrize(
    ("fmt", "expect"),
    [
        ("csv", "cannot parse as csv (--format csv): the file looks like parquet; drop --format or pass "
         "--format parquet"),
        ("native", "--format native does not match the file, which looks like artifact input"),
        ("kineto", "--format kineto does not match the file, which looks like artifact input"),
        ("ndtimeline", "--format ndtimeline does not match the file, which looks like artifact input"),
    ],
)
def test_a_wrong_format_flag_says_what_the_file_looks_like(
    fmt: str, expect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(artifact_trace("ST")), "--format", fmt]) == 2
    assert expect in one_error_line(capsys)


def test_a_meta_yaml_of_another_job_points_at_the_meta(capsys: pytest.CaptureFixture[str]) -> None:
    other = artifact_trace("AR").with_name("meta-AR.yaml")  # dp 4 x pp 4 for the dp 2 x pp 4 ST trace
    assert main(["analyze", str(artifact_trace("ST")), "--meta", str(other)]) == 2
    assert "8 of 16 workers missing; check --dp/--pp or the meta yaml" in one_error_line(capsys)
    assert main(["analyze", str(artifact_trace("ST")), "--pp", "2"]) == 2
    assert "stage 2 is outside the job's pp size 2 (check --pp or the meta yaml)" in one_error_line(capsys)
