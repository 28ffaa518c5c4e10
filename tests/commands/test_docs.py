"""``ebpo docs``: the pages a wheel user has, and no message that names a file only a checkout has."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from ebpo.cli import main
from ebpo.commands.docs import PAGES, page_path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "ebpo"


def test_every_users_page_is_listed_and_exists() -> None:
    users_pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    users_pages -= {"docs/DEVELOPING.md"}  # the developers' page: in the repository and the sdist
    listed = {relative for relative, _ in PAGES.values()}
    assert users_pages <= listed
    for relative in listed:
        assert (REPO / relative).is_file(), relative


def test_the_wheel_installs_every_page_where_ebpo_docs_looks() -> None:
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "data-files"
    ]
    installed = {
        f"{target.removeprefix('share/ebpo/docs').strip('/')}/{path.name}".lstrip("/")
        for target, patterns in data_files.items()
        for pattern in patterns
        for path in REPO.glob(pattern)
    }
    assert {relative for relative, _ in PAGES.values()} <= installed


def test_list_and_print(capsys) -> None:
    assert main(["docs"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(PAGES)
    assert main(["docs", "compare"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "compare.md").read_text()
    assert page_path("verl") == REPO / "recipes" / "verl" / "README.md"


def test_an_unknown_page_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["docs", "nope"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


#: a path only a checkout has, named in a string the user sees
CHECKOUT_PATH = re.compile(r"\b(docs/[A-Za-z_]+\.md|recipes/(trl|verl)/|shared/spec)")


def _message_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are not docstrings (help texts, messages)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_no_help_text_or_message_names_a_file_only_a_checkout_has() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {text[:80]!r}"
        for path in SRC.rglob("*.py")
        if path.name != "docs.py"  # the table of pages itself
        for line, text in _message_strings(path)
        if CHECKOUT_PATH.search(text)
    ]
    assert found == []
