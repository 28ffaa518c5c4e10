"""Table-driven hostile-input checks (issue #11), shared by every ``tests/hostile/test_*.py``.

A hostile input must end in a clear error that names the problem, and must change nothing:

* API calls: :func:`check_api_error` — the call raises the expected type with a message matching
  a regex, and every estimator / object given in ``unchanged`` has the same ``state_dict()``
  afterwards.
* CLI calls: :func:`check_cli_error` — ``ebpo ...`` run in-process in a scratch directory exits
  with 2 and writes exactly one line to stderr, matching a regex, no traceback; no file in the
  scratch directory was created, deleted or modified.

Each test module holds a table (a list of :class:`ApiCase` / :class:`CliCase`) and parametrises
one test over it, so that the number of hostile inputs the suite tries is the number of rows
(``pytest --collect-only -q tests/hostile``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class ApiCase:
    """``call()`` must raise ``error`` with a message matching ``match`` (re.search)."""

    id: str
    call: Callable[[], Any]
    error: type[BaseException] | tuple[type[BaseException], ...]
    match: str


@dataclass(frozen=True)
class CliCase:
    """``ebpo *argv`` run in a scratch directory must exit 2 with one stderr line matching ``match``.

    ``argv`` items may contain ``{tmp}`` (the scratch directory). ``setup(tmp)`` creates the input
    files first. ``code`` is the expected exit code (2 for a user error).
    """

    id: str
    argv: Sequence[str]
    match: str
    setup: Callable[[Path], None] | None = None
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)


def cli_rows(
    argv: Sequence[str],
    prefix: str,
    rows: Iterable[tuple[str, str | Sequence[str], str]],
    setup: Callable[[Path], None] | None = None,
    env: dict[str, str] | None = None,
) -> list[CliCase]:
    """One :class:`CliCase` per row ``(id, extra, match)`` that share their command and setup:
    ``ebpo *argv *extra`` (``extra``: a shell-quoted string, or a list of arguments) must end in
    one stderr line matching ``prefix + match`` (``env``: the environment variables set)."""
    return [
        CliCase(
            id,
            [*argv, *(shlex.split(extra) if isinstance(extra, str) else extra)],
            prefix + match,
            setup,
            env=dict(env or {}),
        )
        for id, extra, match in rows
    ]


def table_rows(table: str, columns: int) -> list[list[str]]:
    """The rows of a text table, one a line, cells split on " | " (the last cell keeps any further
    " | "); blank lines are skipped. A long row goes on below: a line starting with "| " begins
    its next cell, a line starting with "+ " continues its last cell (what follows "+ ", joined
    as it is)."""
    lines: list[str] = []
    for line in (line.strip() for line in table.splitlines()):
        if line.startswith("| ") and lines:
            lines[-1] += " " + line
        elif line.startswith("+ ") and lines:
            lines[-1] += line[2:]
        elif line:
            lines.append(line)
    rows = [line.split(" | ", columns - 1) for line in lines]
    assert all(len(row) == columns for row in rows), f"a row has not {columns} cells: {rows}"
    return rows


def cli_table(
    argv: Sequence[str],
    prefix: str,
    table: str,
    setup: Callable[[Path], None] | None = None,
    env: dict[str, str] | None = None,
) -> list[CliCase]:
    """:func:`cli_rows` from a text table, one case a line: ``id | arguments | message`` (arguments
    shell-quoted; the message is a regex without the shared ``prefix``)."""
    return cli_rows(
        argv, prefix, [(id, extra, match) for id, extra, match in table_rows(table, 3)], setup
    )


def state_of(obj: Any) -> str:
    """A comparable snapshot of ``obj.state_dict()`` (JSON text; NaN kept visible)."""
    return json.dumps(obj.state_dict(), sort_keys=True, default=repr)


def check_api_error(case: ApiCase, unchanged: Iterable[Any] = ()) -> BaseException:
    """Run ``case.call`` and check the error; return it for further checks."""
    objects = list(unchanged)
    before = [state_of(o) for o in objects]
    try:
        case.call()
    except case.error as error:  # noqa: B030 (a tuple of types is allowed)
        message = str(error)
        assert re.search(case.match, message), (
            f"{case.id}: message {message!r} does not match {case.match!r}"
        )
        after = [state_of(o) for o in objects]
        assert after == before, f"{case.id}: state changed by a call that raised"
        return error
    raise AssertionError(f"{case.id}: no {case.error} raised")


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``root`` (directories as 'dir')."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            out[rel] = "special"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def run_cli(argv: Sequence[str]) -> CliResult:
    """``ebpo *argv`` in-process; SystemExit (argparse) becomes the exit code."""
    from ebpo.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return CliResult(int(code), out.getvalue(), err.getvalue())


def assert_user_error(result: CliResult, match: str, *, code: int = 2, label: str = "") -> None:
    """Exit ``code``, exactly one non-empty stderr line matching ``match``, no traceback."""
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code == code, (
        f"{label}: exit code {result.code}, expected {code}; stderr: {result.err!r}"
    )
    assert "Traceback" not in result.err, f"{label}: traceback on stderr: {result.err}"
    assert len(lines) == 1, f"{label}: expected one stderr line, got {len(lines)}: {result.err!r}"
    assert re.search(match, lines[0]), f"{label}: {lines[0]!r} does not match {match!r}"


def check_cli_error(case: CliCase, tmp: Path, monkeypatch: Any) -> CliResult:
    """Run a :class:`CliCase` in ``tmp`` (the working directory) and check it; see the module doc."""
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("EBPO_CACHE", str(tmp / ".ebpo-cache"))
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    if case.setup is not None:
        case.setup(tmp)
    before = snapshot(tmp)
    result = run_cli([a.replace("{tmp}", str(tmp)) for a in case.argv])
    assert_user_error(result, case.match, code=case.code, label=case.id)
    after = snapshot(tmp)
    created = sorted(set(after) - set(before))
    lost = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (created or lost or changed), (
        f"{case.id}: files created {created}, lost {lost}, changed {changed}"
    )
    return result


def ids(cases: Iterable[ApiCase | CliCase]) -> list[str]:
    names = [c.id for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    assert not duplicates, f"duplicate case ids: {duplicates}"
    return names


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path``, or skip (mounting needs privileges)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()
