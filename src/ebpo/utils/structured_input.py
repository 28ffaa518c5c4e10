"""One reader for every JSON and YAML document ebpo loads — configs, command-line options, run
manifests, checkpoint markers, state files — with the same limits everywhere:

* **size** — at most ``max_bytes`` (default :data:`MAX_BYTES`; a config file: :data:`MAX_CONFIG_BYTES`);
* **depth** — at most ``max_depth`` levels of nested lists and mappings (default :data:`MAX_DEPTH`):
  deeper documents would exhaust Python's recursion in whoever walks them (``json.dumps``,
  ``copy.deepcopy``, ``dataclasses.asdict``), so they are refused here, in one line;
* **repeated keys** — a key given twice in one mapping is an error (JSON and YAML), instead of the
  last one winning silently;
* **YAML aliases** — an alias is a reference: ``&a [x, x]`` used ten times ten levels deep is a
  document of 9 lines that expands to 10**10 values in the first ``json.dumps`` of it (an alias
  bomb). The values a document holds once its aliases are expanded are counted before anything
  is built (at most ``max_values``, default :data:`MAX_VALUES`), and an alias inside its own anchor
  (a recursive document) is refused;
* **YAML floats** — ``3e-4`` is a number as in YAML 1.2 and JSON (PyYAML's YAML 1.1 reads a
  string); YAML tags beyond the safe ones are refused (``yaml.SafeLoader``: nothing is executed).

Every problem with the content raises ``ValueError`` with a message of one line, prefixed with
``where`` (the file or option it came from) when one is given; a file that cannot be opened
raises its ``OSError``. The command line turns the ValueError into one line and exit code 2.

    value = parse_json(text, "--extra")                # a JSON text (an option's value)
    value = read_json_file(path)                       # a JSON file (ValueError: no prefix)
    value = read_yaml_file(path, "--config 'a.yaml'")  # a YAML file
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MAX_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "RepeatedKeyError",
    "parse_json",
    "parse_yaml",
    "read_json_file",
    "read_yaml_file",
    "unique_keys",
]

#: the most nested levels (lists and mappings) of any document
MAX_DEPTH = 100
#: the largest JSON document read (a run manifest, an estimator state with per-cluster priors)
MAX_BYTES = 256 * 2**20
#: the largest YAML config file (a recipe is a few kB; PyYAML reads about 1 MB a second)
MAX_CONFIG_BYTES = 4 * 2**20
#: the most values (scalars, lists, mappings) a YAML document may hold once its aliases expand
MAX_VALUES = 1_000_000


def parse_json(
    text: str | bytes,
    where: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int = MAX_BYTES,
) -> Any:
    """The value of the JSON ``text``; ValueError (one line) when it is too large, not JSON,
    nested deeper than ``max_depth`` or holds a key twice in one object."""
    size = len(text)
    if size > max_bytes:
        raise _error(where, f"{size:,} bytes, more than the {max_bytes:,} this reader takes")
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except RecursionError:
        raise _error(where, _too_deep(max_depth)) from None
    except RepeatedKeyError as error:
        raise _error(where, str(error)) from None
    except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
        raise _error(where, " ".join(str(error).split())) from error
    if _depth(value, max_depth) > max_depth:
        raise _error(where, _too_deep(max_depth))
    return value


def read_json_file(
    path: str | os.PathLike[str],
    where: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int = MAX_BYTES,
) -> Any:
    """:func:`parse_json` of the file ``path``, its size checked before it is read. OSError when
    the file cannot be read."""
    return parse_json(
        _read(path, where, max_bytes), where, max_depth=max_depth, max_bytes=max_bytes
    )


def parse_yaml(
    text: str,
    where: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
    max_bytes: int = MAX_CONFIG_BYTES,
) -> Any:
    """The value of the YAML ``text`` (``None`` for an empty document); ValueError (one line) when
    it is too large, not valid YAML (a key twice in one mapping included), nested deeper than
    ``max_depth``, recursive, or holds more than ``max_values`` values once its aliases expand."""
    import yaml  # optional dependency (PyYAML comes with the trl, verl and data extras)

    if len(text) > max_bytes:
        raise _error(
            where, f"{len(text):,} bytes, more than the {max_bytes:,} a YAML file may have"
        )
    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problem = _node_problem(node, max_depth, max_values)
        if problem:
            raise _error(where, problem)
        return loader.construct_document(node)
    except RecursionError:
        raise _error(where, _too_deep(max_depth)) from None
    except yaml.YAMLError as error:
        raise _error(where, f"not valid YAML ({_yaml_problem(error)})") from None
    finally:
        loader.dispose()


def read_yaml_file(
    path: str | os.PathLike[str],
    where: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
    max_bytes: int = MAX_CONFIG_BYTES,
) -> Any:
    """:func:`parse_yaml` of the UTF-8 file ``path``, its size checked before it is read."""
    data = _read(path, where, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _error(where, f"not UTF-8 text ({error.reason})") from None
    return parse_yaml(text, where, max_depth=max_depth, max_values=max_values, max_bytes=max_bytes)


# ---------------------------------------------------------------------------------- helpers
class RepeatedKeyError(ValueError):
    """A key given twice in one JSON object (:func:`unique_keys`)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The ``object_pairs_hook`` of every JSON reader (``json.loads(text,
    object_pairs_hook=unique_keys)``): the object, or :class:`RepeatedKeyError` ``key 'a' appears
    twice in one object`` where ``json`` would keep the last value without a word. Readers with
    their own messages (data files, rollout dumps) use it directly; the others call
    :func:`parse_json`."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKeyError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return value


def _read(path: str | os.PathLike[str], where: str | None, max_bytes: int) -> bytes:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise _error(where, f"{size:,} bytes, more than the {max_bytes:,} this reader takes")
        data = handle.read(max_bytes + 1)  # a file that grows meanwhile is still bounded
    if len(data) > max_bytes:
        raise _error(where, f"more than the {max_bytes:,} bytes this reader takes")
    return data


def _error(where: str | None, problem: str) -> ValueError:
    return ValueError(f"{where}: {problem}" if where else problem)


def _too_deep(max_depth: int) -> str:
    return f"nested too deeply (more than {max_depth} levels of lists and mappings)"


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of a parsed JSON value (a scalar: 0), stopping once past ``limit``;
    iterative, so that no depth exhausts the stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _node_problem(root: Any, max_depth: int, max_values: int) -> str | None:
    """Why the composed YAML document ``root`` may not be built, or None: too deep, recursive
    (an alias inside its own anchor), or more than ``max_values`` values with aliases expanded.
    One pass over the distinct nodes (an alias is the same node object), without recursion."""
    import yaml  # optional dependency, see parse_yaml

    size: dict[int, int] = {}  # node id -> values below it, itself included, aliases expanded
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            children = list(_children(node))
            size[key] = 1 + sum(size[id(c)] for c in children)
            collection = not isinstance(node, yaml.ScalarNode)
            depth[key] = collection + max((depth[id(c)] for c in children), default=0)
            if size[key] > max_values:
                return (
                    f"it holds more than {max_values:,} values once its aliases are expanded "
                    "(an alias bomb?)"
                )
            if depth[key] > max_depth:
                return _too_deep(max_depth)
            continue
        if key in size:
            continue
        if key in open_nodes:
            return "an alias refers to its own anchor (a recursive document)"
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
        if len(open_nodes) > max_depth + 1:
            return _too_deep(max_depth)
    return None


def _children(node: Any) -> Iterator[Any]:
    import yaml  # optional dependency, see parse_yaml

    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


_LOADER: Any = None


def _yaml_loader() -> Any:
    """PyYAML's safe loader with a repeated key refused and YAML 1.2 floats (built once)."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml  # optional dependency, see parse_yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys may repeat
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: SafeLoader's own error names it
                    break
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    _LOADER = Loader
    return Loader


def _yaml_problem(error: Any) -> str:
    """The problem and where, from PyYAML's multi-line message."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())
