"""The one JSON / YAML reader: what the standard readers give for a valid document, and one-line
ValueErrors for the documents they would choke on (too deep, too large, repeated keys, alias
bombs, recursive aliases)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from ebpo.utils import structured_input
from ebpo.utils.structured_input import (
    MAX_DEPTH,
    parse_json,
    parse_yaml,
    read_json_file,
    read_yaml_file,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_a_valid_json_document_reads_as_json_loads_reads_it(value):
    text = json.dumps(value)
    assert parse_json(text) == json.loads(text)


# The one difference from safe_load, on purpose: a plain scalar in exponent form (``3e-4``,
# ``0E0``) is a float, as in YAML 1.2 and JSON; PyYAML's YAML 1.1 reads such a scalar as a string
# (and its dumper writes such a string bare).
EXPONENT_FORM = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def strings_in(value) -> Iterator[str]:
    """Every string a JSON-like value holds, dictionary keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)


@given(JSON_VALUES)
def test_a_valid_yaml_document_reads_as_safe_load_reads_it(value):
    assume(not any(EXPONENT_FORM.match(text) for text in strings_in(value)))
    text = yaml.safe_dump(value)
    assert parse_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize("scalar", ["0E0", "3e-4", "1E+3", "-2e1"])
def test_a_scalar_in_exponent_form_is_the_float_of_yaml_1_2(scalar):
    assert yaml.safe_load(f"x: {scalar}") == {"x": scalar}  # YAML 1.1: a string
    assert parse_yaml(f"x: {scalar}") == {"x": float(scalar)}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def bomb(levels: int) -> str:
    """A YAML document of ``levels + 1`` lines that expands to 10**(levels + 1) values."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        ref = f"*l{level - 1}"
        lines.append(f"l{level}: &l{level} [{', '.join([ref] * 10)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, match",
    [
        (nested(MAX_DEPTH), None),
        (nested(MAX_DEPTH + 1), r"^--x: nested too deeply \(more than 100 levels"),
        (nested(5000), r"^--x: nested too deeply"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, r"^--x: nested too deeply"),
        ('{"a": 1, "b": {"c": 2, "c": 3}}', r"^--x: key 'c' appears twice in one object$"),
        ('{"a": 1,}', r"^--x: Expecting property name enclosed in double quotes"),
        (b"\xff", r"^--x: 'utf-8' codec can't decode"),
    ],
)
def test_json_limits(text, match):
    if match is None:
        assert parse_json(text, "--x") is not None
    else:
        with pytest.raises(ValueError, match=match):
            parse_json(text, "--x")


def test_a_json_file_larger_than_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(list(range(1000))))
    assert read_json_file(path, max_bytes=10_000) == list(range(1000))
    with pytest.raises(ValueError, match=r"^'big\.json': 4,890 bytes, more than the 1,000"):
        read_json_file(path, "'big.json'", max_bytes=1000)
    with pytest.raises(FileNotFoundError):
        read_json_file(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "text, match",
    [
        ("a: " + nested(MAX_DEPTH - 1), None),
        ("a: " + nested(MAX_DEPTH), r"^f: nested too deeply"),
        ("a: " + nested(5000), r"^f: nested too deeply"),
        (
            "a: 1\nb: 2\na: 3\n",
            r"^f: not valid YAML \(key 'a' appears twice at line 3, column 1\)$",
        ),
        (bomb(5), r"^f: it holds more than 1,000,000 values once its aliases are expanded"),
        (bomb(8), r"^f: it holds more than 1,000,000 values once its aliases are expanded"),
        ("a: &a [1, *a]\n", r"^f: an alias refers to its own anchor \(a recursive document\)$"),
        ("a: !!python/object/apply:os.system [ls]\n", r"^f: not valid YAML \(could not determine"),
        ("a: [1,\n", r"^f: not valid YAML \(.* at line 2, column 1\)$"),
    ],
)
def test_yaml_limits(text, match, monkeypatch):
    # refused before anything expands, shown by counting work: each node of the document is
    # visited at most twice (an alias is one node, not its expansion), and nothing of a bomb or
    # of a recursive document is built
    visits, built = [], []
    children = structured_input._children
    monkeypatch.setattr(
        structured_input, "_children", lambda node: (visits.append(1), children(node))[1]
    )
    loader = structured_input._yaml_loader()
    construct = loader.construct_document
    monkeypatch.setattr(
        loader, "construct_document", lambda self, node: (built.append(1), construct(self, node))[1]
    )
    if match is None:
        assert parse_yaml(text, "f") is not None
    else:
        with pytest.raises(ValueError, match=match):
            parse_yaml(text, "f")
    assert len(visits) <= 2 * len(text)
    if match is not None and ("aliases are expanded" in match or "own anchor" in match):
        assert built == []


def test_yaml_keeps_what_users_write():
    # an anchor used a few times, a merge key overriding a key, a YAML 1.2 float, an empty file
    text = "base: &b {lr: 3e-4, g: 4}\nrun:\n  <<: *b\n  g: 8\nsteps: [*b, *b]\n"
    assert parse_yaml(text) == {
        "base": {"lr": 3e-4, "g": 4},
        "run": {"lr": 3e-4, "g": 8},
        "steps": [{"lr": 3e-4, "g": 4}] * 2,
    }
    assert parse_yaml(bomb(4)) is not None  # 100,000 values: a big document, not a bomb
    assert parse_yaml("# nothing\n") is None


def test_a_yaml_file_is_utf8_and_bounded(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ValueError, match=r"^'a\.yaml': not UTF-8 text \(invalid start byte\)$"):
        read_yaml_file(tmp_path / "a.yaml", "'a.yaml'")
    (tmp_path / "b.yaml").write_text("a: 1\n" * 100)
    with pytest.raises(ValueError, match=r"^b: 500 bytes, more than the 100 this reader takes$"):
        read_yaml_file(tmp_path / "b.yaml", "b", max_bytes=100)
