"""The meta file's ``key: value`` fast path (``validate.flat_yaml``) against ``yaml.safe_load``.

Whenever the fast path answers, its mapping must be the one PyYAML builds, value types included;
anything it declines goes to PyYAML, so declining is always safe.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosers.model import JobMeta
from diagnosers.readers import validate
from diagnosers.samples import ARTIFACT_DIR
from diagnosers.writers import write_meta_yaml

# pieces that include YAML's special words and number forms, so the strategy reaches them
WORDS = ["ST", "job", "run-1", "a.b", "x_y", "yes", "No", "TRUE", "off", "On", "null", "Null", "~",
         "y", "n", "inf", ".inf", "NaN", ".nan", "e5", "0x1F", "0o7", "1_000", "1e3", "1.5", "012",
         "-0", "+3", "0", "7", "-12", "123456789012345678901234567890", "1:20", "2001-12-14",
         "'q'", '"q"', "[1, 2]", "{}", "&a", "*a", "# c", "a b", "<<", "="]
KEYS = ["dp_size", "pp_size", "trial_name", "run_id", "on", "yes", "null", "_k", "k9", "9k", "a-b"]


def line() -> st.SearchStrategy[str]:
    value = st.one_of(st.sampled_from(WORDS), st.integers(-10**6, 10**6).map(str))
    sep = st.sampled_from([": ", ":  ", ":", " : ", ": \t"])
    tail = st.sampled_from(["", " ", "  # note", "\r"])
    return st.builds(lambda k, s, v, t: f"{k}{s}{v}{t}", st.sampled_from(KEYS), sep, value, tail)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            line(),
            st.sampled_from(["", "---", "# header", "  ", "layers_per_stage:", "k9:", "on:", "x: "]),
            st.builds(lambda v, ind: f"{ind}- {v}", st.sampled_from([*WORDS[-20:], "7", "-1", "0"]),
                      st.sampled_from(["", "", " ", "  "])),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_fast_path_reads_what_yaml_reads(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    flat = validate.flat_yaml(text)
    if flat is None:
        return
    want = yaml.safe_load(text)
    assert flat == want
    assert [type(v) for v in flat.values()] == [type(v) for v in want.values()]


def test_written_and_bundled_meta_files_take_the_fast_path(tmp_path: Path) -> None:
    for path in sorted(ARTIFACT_DIR.glob("meta-*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert validate.flat_yaml(text) == yaml.safe_load(text), path
    meta = JobMeta(trial_name="gen", dp=4, pp=2, layers_per_stage=[7, 8])
    out = write_meta_yaml(meta, tmp_path / "meta.yaml")
    text = out.read_text(encoding="utf-8")
    assert validate.flat_yaml(text) == yaml.safe_load(text)
    assert validate.flat_yaml(text)["layers_per_stage"] == [7, 8]  # type: ignore[index]
    assert validate.load_yaml(out) == yaml.safe_load(text)


def test_declines_what_yaml_reads_differently() -> None:
    for text in ("on: 1\n", "dp_size: yes\n", "dp_size: 012\n", "dp_size: 1\ndp_size: 2\n",
                 "dp_size: 1 # two\n", "run_id: 1e3\n", "a: b\r\n", "layers_per_stage: [1, 2]\n", "",
                 "layers_per_stage:\n", "layers_per_stage:\ndp_size: 2\n", "k:\n- 1.5\n",
                 "k:\n  - 1\n - 2\n"):
        assert validate.flat_yaml(text) is None, text
