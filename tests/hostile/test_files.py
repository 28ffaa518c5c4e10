"""Hostile inputs for the files ``ebpo data`` and ``ebpo simulate`` write (issue #21, items 3, 10
and 11): every value comes out as it went in, a replaced file keeps its mode and its symbolic
link, and a full disk ends in one line with the old file intact — tried on a real full disk (a
tiny tmpfs, when the user namespace allows mounting one) and on a real write limit
(``RLIMIT_FSIZE``: the kernel's EFBIG), each in a separate ``ebpo`` process.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import os
import random
import resource
import shutil
import stat
import string
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.hostile.harness import run_cli

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# ---------------------------------------------------------------------------- value for value
#: name -> the JSON text of a value. Each is written into a row next to a row holding null and
#: a row holding 1, then sorted and labelled; what comes out must parse to the same Python
#: values, types included (``repr``: 1 is not 1.0).
JSON_VALUES = {
    "int-2**53+1": "9007199254740993",
    "int-beyond-uint64": "12345678901234567891",
    "int-below-int64": "-9223372036854775809",
    "int-400-digits": "1" + "0" * 400,
    "int-4300-digits": "9" * 4300,
    "one": "1",
    "zero": "0",
    "float-whole": "1.0",
    "float-tenth": "0.1",
    "float-denormal": "5e-324",
    "float-max": "1.7976931348623157e+308",
    "float-negative-zero": "-0.0",
    "float-exponent": "1E+2",
    "string-digit": '"1"',
    "string-leading-zeros": '"007"',
    "string-exponent": '"1e3"',
    "string-nan": '"NaN"',
    "string-null": '"null"',
    "string-true": '"true"',
    "string-blank": '" "',
    "string-empty": '""',
    "true": "true",
    "false": "false",
    "null": "null",
    "empty-list": "[]",
    "empty-object": "{}",
    "list-mixed": '[1, "1", 1.0, null, true, [], {}]',
    "nested-big-ints": '{"ids": [9007199254740993, null], "deep": {"n": 12345678901234567891}}',
    "nested-900-deep": "[" * 900 + "]" * 900,
    "unicode": '"héllo — 𝔼[R] ∑ 日本 👩‍🔬"',
    "unicode-escaped": '"\\u00e9\\ud83d\\ude00"',
    "line-separator-u2028": '"a\u2028b"',
    "next-line-u0085": '"a\u0085b"',
    "file-separator-x1c": '"a\\u001cb"',
    "lone-surrogate": '"\\ud800"',
    "nul-character": '"a\\u0000b"',
    "escaped-newline": '"a\\nb\\r\\n"',
    "quotes-backslashes": '"\\"\\\\"',
    "rtl-and-zero-width": '"\u202eabc\u200b"',
    "key-empty-and-unicode": '{"": 1, "ключ": 2, "a.b": 3}',
}


def _rows_text(token: str) -> str:
    return (
        '{"topic": "b", "v": ' + token + ', "answer": 1}\n'
        '{"topic": "a", "v": null, "answer": null}\n'
        '{"topic": "c", "v": 1, "answer": "1"}\n'
    )


@pytest.mark.parametrize("token", JSON_VALUES.values(), ids=JSON_VALUES.keys())
@pytest.mark.parametrize(
    "command",
    [["order", "--order", "topic"], ["label", "--topic", "none", "--difficulty", "none"]],
    ids=["order", "label"],
)
def test_json_values_come_out_as_they_went_in(tmp_path, token, command):
    source = tmp_path / "in.jsonl"
    source.write_text(_rows_text(token), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = run_cli(["data", command[0], str(source), *command[1:], "-o", str(out)])
    assert result.code == 0, result.err
    read = [json.loads(line) for line in source.read_text(encoding="utf-8").split("\n") if line]
    wrote = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    by_topic = {row["topic"]: row for row in wrote}
    assert repr([by_topic[row["topic"]] for row in read]) == repr(read)
    if command[0] == "order":
        assert [row["topic"] for row in wrote] == ["a", "b", "c"]


PARQUET_COLUMNS = {
    "int64-with-null": ([9007199254740993, None, -(2**63)], pa.int64()),
    "int8": ([1, None, -128], pa.int8()),
    "uint64": ([2**64 - 1, None, 0], pa.uint64()),
    "int32-all-null": ([None, None, None], pa.int32()),
    "float16": ([None, None, None], pa.float16()),
    "float32": ([0.1, None, float("nan")], pa.float32()),
    "float64-nan-and-null": ([float("nan"), None, -0.0], pa.float64()),
    "bool-with-null": ([True, None, False], pa.bool_()),
    "decimal": ([decimal.Decimal("1.10"), None, decimal.Decimal("-0.01")], pa.decimal128(5, 2)),
    "date": ([datetime.date(2020, 1, 1), None, datetime.date(1, 1, 1)], pa.date32()),
    "timestamp-tz": (
        [datetime.datetime(2020, 1, 1, 1, 2, 3, 4, tzinfo=datetime.UTC), None, None],
        pa.timestamp("us", tz="UTC"),
    ),
    "binary": ([b"\x00\xff", None, b""], pa.binary()),
    "large-string": (["é", None, ""], pa.large_string()),
    "list-of-int": ([[1, None], [], None], pa.list_(pa.int64())),
    "chat-messages": (
        [[{"role": "user", "content": "hi"}], [], None],
        pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    ),
    "struct": (
        [{"a": 1, "b": "x"}, None, {"a": None, "b": None}],
        pa.struct([("a", pa.int64()), ("b", pa.string())]),
    ),
    "map": ([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
}


@pytest.mark.parametrize(("values", "kind"), PARQUET_COLUMNS.values(), ids=PARQUET_COLUMNS.keys())
def test_parquet_columns_keep_their_type_and_values(tmp_path, values, kind):
    source = tmp_path / "in.parquet"
    column = pa.array(values, kind)
    pq.write_table(pa.table({"v": column, "level": ["Level 2", "Level 1", "Level 3"]}), source)
    stored = pq.read_table(source)
    assert run_cli(["data", "label", str(source), "--in-place", "--topic", "none"]).code == 0
    result = run_cli(["data", "order", str(source), "--in-place", "--order", "difficulty"])
    assert result.code == 0, result.err
    back = pq.read_table(source)
    assert back.schema.field("v").type == stored.schema.field("v").type
    assert repr(back["v"].to_pylist()) == repr(stored["v"].take([1, 0, 2]).to_pylist())
    assert back["difficulty"].to_pylist() == [1.0, 2.0, 3.0]


# ------------------------------------------------------------------ what a replaced file keeps
def _sorted_topics(path: Path) -> list[str]:
    return [json.loads(line)["topic"] for line in path.read_text().splitlines()]


ROWS = "".join(json.dumps({"prompt": p, "topic": t}) + "\n" for p, t in [("a", "y"), ("b", "x")])


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o640, 0o664, 0o444, 0o755, 0o700])
@pytest.mark.parametrize("command", ["order-in-place", "label-in-place", "order-over-output"])
def test_a_replaced_file_keeps_its_mode(tmp_path, mode, command):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    target = tmp_path / "out.jsonl" if command == "order-over-output" else source
    if target != source:
        target.write_text("old")
    target.chmod(mode)
    argv = {
        "order-in-place": ["order", str(source), "--order", "topic", "--in-place"],
        "label-in-place": ["label", str(source), "--in-place", "--difficulty", "none"],
        "order-over-output": ["order", str(source), "--order", "topic", "-o", str(target)],
    }[command]
    result = run_cli(["data", *argv])
    assert result.code == 0, result.err
    assert stat.S_IMODE(target.stat().st_mode) == mode
    if command == "label-in-place":
        assert [json.loads(line)["topic"] for line in target.read_text().splitlines()] == ["y", "x"]
    else:
        assert _sorted_topics(target) == ["x", "y"]


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_new_output_gets_the_mode_of_the_umask(tmp_path, mask, suffix):
    """Every output was 0600 whatever the umask (the temporary file of mkstemp)."""
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    saved = os.umask(mask)
    try:
        out = tmp_path / f"out{suffix}"
        assert run_cli(["data", "order", str(source), "--order", "topic", "-o", str(out)]).code == 0
    finally:
        os.umask(saved)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


LINKS = {
    "absolute": lambda tmp: (
        tmp / "data" / "in.jsonl",
        [(tmp / "in.jsonl", tmp / "data" / "in.jsonl")],
    ),
    "relative": lambda tmp: (
        tmp / "data" / "in.jsonl",
        [(tmp / "in.jsonl", Path("data/in.jsonl"))],
    ),
    "chain": lambda tmp: (
        tmp / "data" / "in.jsonl",
        [(tmp / "mid.jsonl", tmp / "data" / "in.jsonl"), (tmp / "in.jsonl", tmp / "mid.jsonl")],
    ),
    "linked-directory": lambda tmp: (tmp / "data" / "in.jsonl", [(tmp / "d", tmp / "data")]),
}


@pytest.mark.parametrize("make", LINKS.values(), ids=LINKS.keys())
@pytest.mark.parametrize("command", ["order", "label"])
def test_in_place_through_a_symlink_sorts_the_target_and_keeps_the_link(tmp_path, make, command):
    """--in-place replaced a symlinked input by a regular file; the target stayed unsorted."""
    target, links = make(tmp_path)
    target.parent.mkdir()
    target.write_text(ROWS)
    target.chmod(0o640)
    for link, points_to in links:
        link.symlink_to(points_to)
    name = tmp_path / ("d/in.jsonl" if links[-1][0].name == "d" else "in.jsonl")
    argv = (
        ["order", str(name), "--order", "topic", "--in-place"]
        if command == "order"
        else ["label", str(name), "--in-place", "--topic-column", "topic", "--difficulty", "none"]
    )
    result = run_cli(["data", *argv])
    assert result.code == 0, result.err
    for link, points_to in links:
        assert link.is_symlink() and os.readlink(link) == str(points_to)
    assert target.is_file() and not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    if command == "order":
        assert _sorted_topics(target) == ["x", "y"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["in.jsonl"]  # no temporary left


@pytest.mark.parametrize("links", [1, 3])
def test_in_place_on_a_hard_linked_file_says_the_other_names_keep_the_old_content(tmp_path, links):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    others = [tmp_path / f"other{i}.jsonl" for i in range(links)]
    for other in others:
        os.link(source, other)
    result = run_cli(["data", "order", str(source), "--order", "topic", "--in-place"])
    assert result.code == 0 and _sorted_topics(source) == ["x", "y"]
    assert result.err == (
        f"note: {str(source)!r} had {links} other hard link(s); they keep the previous content "
        "(the new file replaced this name only)\n"
    )
    assert all(other.read_text() == ROWS for other in others)


# ------------------------------------------------------------------ a full disk, for real
def _big_rows(n: int = 500) -> str:
    rng = random.Random(0)  # random letters: Parquet cannot compress them much
    return "".join(
        json.dumps(
            {
                "prompt": "".join(rng.choice(string.ascii_lowercase) for _ in range(180)),
                "answer": str(i),
                "topic": f"t{i % 3}",
                "difficulty": i % 7,
            }
        )
        + "\n"
        for i in range(n)
    )


#: name -> (ebpo arguments run in the full directory, the file that must stay as it was)
DISK_FULL = {
    "order-in-place": (["data", "order", "in.jsonl", "--order", "topic", "--in-place"], "in.jsonl"),
    "order-to-parquet": (
        ["data", "order", "in.jsonl", "--order", "topic", "-o", "out.parquet"],
        "out.parquet",
    ),
    "order-to-jsonl": (
        ["data", "order", "in.jsonl", "--order", "difficulty", "-o", "out.jsonl"],
        "out.jsonl",
    ),
    "label-in-place": (["data", "label", "in.jsonl", "--in-place"], "in.jsonl"),
    "label-to-jsonl": (
        ["data", "label", "in.jsonl", "-o", "out.jsonl", "--topic", "none"],
        "out.jsonl",
    ),
    "simulate": (
        ["simulate", "--quick", "--experiments", "saturation", "--output-dir", "."],
        "results.md",
    ),
}


def _stage(directory: Path, argv: list[str]) -> dict[str, bytes]:
    """The files a command finds in the directory that fills up: what it must leave as they were."""
    directory.mkdir()
    if argv[0] == "simulate":
        files = {"results.md": b"old results"}
    else:
        files = {"in.jsonl": _big_rows().encode(), "out.parquet": b"old", "out.jsonl": b"old\n"}
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return files


def _check_disk_full(
    name: str, code: int, err: str, after: dict[str, bytes], before: dict[str, bytes]
):
    argv, kept = DISK_FULL[name]
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    prog = "ebpo simulate" if argv[0] == "simulate" else f"ebpo data {argv[1]}"
    assert code == 2, f"{name}: exit {code}: {err}"
    assert "Traceback" not in err, err
    errors = [line for line in lines if line.startswith(f"{prog}: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    assert "cannot write" in errors[0] and "the previous file, if any, is unchanged" in errors[0]
    assert after[kept] == before[kept], f"{name}: {kept} changed"
    assert {k: v for k, v in after.items() if k in before} == before  # every old file intact
    assert not [k for k in after if k.endswith(".tmp")], after  # no temporary left


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def _can_mount_tmpfs() -> bool:
    """Whether this machine lets a user namespace mount a tmpfs (``unshare -rm``)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as point:
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs '{point}'"],
            capture_output=True,
            timeout=30,
        )
    return probe.returncode == 0


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EBPO_DEBUG"}
    return env | {"HF_HUB_OFFLINE": "1"}


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="cannot mount a tmpfs in a user namespace here")
@pytest.mark.parametrize("name", DISK_FULL, ids=DISK_FULL.keys())
def test_a_full_tmpfs_ends_in_one_line_and_keeps_the_old_files(tmp_path, name):
    """ENOSPC from the kernel: the input fills most of a 160 KiB tmpfs and the new file cannot
    fit; ebpo simulate gets 8 KiB, less than one plot."""
    argv, _ = DISK_FULL[name]
    before = _stage(tmp_path / "stage", argv)
    mount, result = tmp_path / "mnt", tmp_path / "after"
    mount.mkdir()
    result.mkdir()
    script = (
        'set -e; mount -t tmpfs -o size="$SIZE" tmpfs "$MNT"; cp -a "$STAGE"/. "$MNT"/; '
        'cd "$MNT"; set +e; '
        '"$PY" -m ebpo.cli "$@" 2>"$OUT/stderr"; echo $? >"$OUT/rc"; cp -a "$MNT"/. "$OUT"/'
    )
    env = _environment() | {
        "SIZE": "8k" if argv[0] == "simulate" else "160k",
        "MNT": str(mount),
        "STAGE": str(tmp_path / "stage"),
        "OUT": str(result),
        "PY": sys.executable,
    }
    subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *argv], env=env, timeout=300, check=True
    )
    code = int((result / "rc").read_text())
    err = (result / "stderr").read_text()
    after = {k: v for k, v in _files(result).items() if k not in ("rc", "stderr")}
    _check_disk_full(name, code, err, after, before)


def _limit_file_size(size: int) -> None:
    # The kernel refuses to grow a file past ``size`` bytes (EFBIG; Python ignores SIGXFSZ).
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="no RLIMIT_FSIZE")
@pytest.mark.parametrize("name", DISK_FULL, ids=DISK_FULL.keys())
def test_a_file_size_limit_ends_in_one_line_and_keeps_the_old_files(tmp_path, name):
    """EFBIG from the kernel, in a real ebpo process: no namespace needed. Every output here is
    larger than the limit (60 kB; a plot of ebpo simulate more than 5 kB)."""
    argv, _ = DISK_FULL[name]
    directory = tmp_path / "work"
    before = _stage(directory, argv)
    done = subprocess.run(
        [sys.executable, "-m", "ebpo.cli", *argv],
        cwd=directory,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=functools.partial(_limit_file_size, 5_000 if argv[0] == "simulate" else 60_000),
    )
    _check_disk_full(name, done.returncode, done.stderr, _files(directory), before)
