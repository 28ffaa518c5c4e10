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


#: what a wheel install lacks, named on a page: the checkout's folders and files, make targets
WHEEL_LACKS = re.compile(
    r"(?<![\w/.-])(?:tests|benchmarks|tools|\.ci|src/ebpo)/[\w./-]*|`make [a-z][\w-]*|DEVELOPING\.md"
)
HEADING = re.compile(r"#{1,6} ")
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: the words that tell a reader a path is not in their install
SDIST = "source distribution"


def _sections(text: str) -> list[list[str]]:
    """The page as sections (a heading to the next), each a list of paragraphs (a fenced code
    block stays in one paragraph); the preamble before the first heading is the first section."""
    sections: list[list[str]] = [[]]
    block: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        fenced ^= line.startswith("```")
        heading = HEADING.match(line)
        if not fenced and (not line.strip() or heading):
            if block:
                sections[-1].append("\n".join(block))
            block = []
            if heading:
                sections.append([line])
        else:
            block.append(line)
    return sections


def _says(paragraph: str) -> bool:
    return SDIST in " ".join(paragraph.split())


def _lacking(page: Path, paragraph: str, shipped: set[str]) -> list[str]:
    found = [match.group(0) for match in WHEEL_LACKS.finditer(paragraph)]
    for match in MARKDOWN_LINK.finditer(paragraph):
        target = match.group(1)
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        resolved = (page.parent / target.split("#")[0]).resolve()
        if (
            not resolved.is_relative_to(REPO)
            or resolved.relative_to(REPO).as_posix() not in shipped
        ):
            found.append(target)
    return found


def test_shipped_pages_name_only_what_a_wheel_has() -> None:
    """Every page ``ebpo docs`` prints (issue #52 item 6): a path a wheel install lacks (test
    files, benchmarks, tools, ``make`` targets, the developers' page, a link to a file that is not
    a shipped page) appears only where the reader is told it is in the source distribution — in
    its paragraph, its section, or the page's opening lines."""
    shipped = {relative for relative, _ in PAGES.values()}
    found = []
    for relative in sorted(shipped):
        page = REPO / relative
        sections = _sections(page.read_text(encoding="utf-8"))
        # the opening lines: before the first heading, or under the page's title
        page_says = any(_says(paragraph) for section in sections[:2] for paragraph in section)
        for section in sections:
            section_says = page_says or any(_says(paragraph) for paragraph in section)
            for paragraph in section:
                lacking = _lacking(page, paragraph, shipped)
                if lacking and not section_says:
                    found.append(f"{relative}: {lacking} in {paragraph[:70]!r}")
    assert found == [], "\n".join(found)
