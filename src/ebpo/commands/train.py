"""``ebpo train``: the main job (see :mod:`ebpo.lab.train.job`). With no arguments it runs the built-in
default: the tiny model on the built-in arithmetic task, warm start, then EBPO with G = 4.

The options come from one source, :class:`~ebpo.lab.train.config.TrainJobConfig`: one flag per
field, ``--field-name`` (underscores as hyphens), typed by the field's annotation, its help the
field's ``metadata["help"]`` word for word and its default the field's; the metadata's other keys
(``choices``) go to ``add_argument`` as ``HfArgumentParser`` passes them. :data:`FLAG_EXCEPTIONS`
lists the few fields whose flag departs from that, each with its reason. ``--config job.yaml``
gives a YAML mapping of field names to values; the flags given on the command line win over it.

The parser is generated here over ``dataclasses.fields`` rather than by transformers'
``HfArgumentParser`` (the model for the field metadata), because ``HfArgumentParser`` is a
whole ArgumentParser and ``ebpo train`` is a subcommand of ``ebpo``'s parser (its one-line
errors); and because it would change today's command lines: tuples have no type there (today's
``--tiers 1,2`` / ``--topics add,sub`` are comma-separated), it has no mutually exclusive flags
(``--resume`` / ``--overwrite``), no inverted flag (``--quiet``), no JSON for dict fields, and
its YAML reading builds the dataclass from the file's values without checking their types.

Values on the command line:

* ``int`` / ``float`` / ``str`` fields (``X | None`` too; None comes from the default or a YAML
  ``null``): one value;
* ``bool`` fields: ``--flag`` is true, ``--flag false`` (or no / 0) false;
* ``tuple`` fields: comma-separated (``--tiers 1,2``; YAML: a list, ``tiers: [1, 2]``);
* ``dict`` fields: a JSON object (``--extra '{"epsilon_high": 0.28}'``; YAML: a mapping).

Ranges and combinations are checked by :meth:`TrainJobConfig.check_values` before TRL and
transformers are imported (the job module is imported only then: building this parser imports
neither), the rest by :meth:`TrainJobConfig.validate` when the job starts; the YAML file's keys
and value types are checked here (:func:`read_config_file`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import reprlib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ebpo.lab.train.config import TrainJobConfig
from ebpo.utils.field_values import check_field_value
from ebpo.utils.files import storage_error
from ebpo.utils.structured_input import parse_json, read_yaml_file

__all__ = ["FLAG_EXCEPTIONS", "add_job_options", "job_config", "read_config_file"]

#: the fields whose flag is not the generic ``--field-name``, and why. Keys: ``flag`` (its
#: spelling), ``action`` / ``help`` (``{doc}`` is the field's help), ``exclusive`` (a group of
#: flags that exclude each other on the command line; ``validate()`` checks the merged config)
FLAG_EXCEPTIONS: dict[str, dict[str, str]] = {
    "progress": {
        "flag": "--quiet",
        "action": "store_false",
        "help": "do not {doc}",
        "why": "on by default, so the flag turns it off (the spelling ebpo train always had)",
    },
    "resume": {
        "exclusive": "run directory",
        "why": "continue the run in output_dir or replace it, not both",
    },
    "overwrite": {
        "exclusive": "run directory",
        "why": "continue the run in output_dir or replace it, not both",
    },
}

DESCRIPTION = (
    "Warm start (built-in model), held-out Pass@1 before, RL on TRL with the chosen estimator, "
    "held-out Pass@1 after. Writes metrics.jsonl, TensorBoard logs, PNG plots, checkpoints, the "
    "final model and the estimator state to the run directory. Ctrl-C / SIGTERM saves a "
    "checkpoint; continue with --resume. Every option is a field of "
    "ebpo.lab.train.config.TrainJobConfig; --config FILE takes them from a YAML mapping (field "
    "names with underscores as keys) and the flags given here win over it."
)


class HelpFormatter(argparse.HelpFormatter):
    """Appends each option's default, the dataclass field's: argparse's own default is
    ``SUPPRESS``, so that the parsed arguments hold only the flags given (they override
    ``--config``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = getattr(action, "field_default", argparse.SUPPRESS)
        if default is argparse.SUPPRESS:
            return text
        return f"{text} (default: {_percent(_shown(default))})"


class GivenOnce(argparse.Action):
    """An option that may be given once: a second ``--config`` would silently replace the first
    file (argparse keeps the last value), so it is refused."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(
                f"argument {option_string}: given twice ({getattr(namespace, self.dest)!r} and "
                f"{values!r}); give one file"
            )
        setattr(namespace, self.dest, values)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="RL-train a causal LM with an ebpo estimator (no arguments: the built-in CPU default)",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        default=None,
        action=GivenOnce,
        help="a YAML mapping of TrainJobConfig field names (e.g. group_size) to values; the "
        "flags given on the command line win over it",
    )
    add_job_options(parser)
    parser.set_defaults(func=run)
    return parser


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`TrainJobConfig` (see the module docstring)."""
    annotations = typing.get_type_hints(TrainJobConfig)
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for item in dataclasses.fields(TrainJobConfig):
        special = FLAG_EXCEPTIONS.get(item.name, {})
        doc = item.metadata.get("help")
        if not doc:
            raise TypeError(f"TrainJobConfig.{item.name} needs its documentation: metadata help")
        target: Any = parser
        if "exclusive" in special:
            if special["exclusive"] not in groups:
                groups[special["exclusive"]] = parser.add_mutually_exclusive_group()
            target = groups[special["exclusive"]]
        options: dict[str, Any] = {"dest": item.name, "default": argparse.SUPPRESS}
        if "action" in special:
            options["action"] = special["action"]
        else:
            options.update(_value_options(item.name, annotations[item.name]))
            options.update({k: v for k, v in item.metadata.items() if k != "help"})
        options["help"] = _percent(special.get("help", "{doc}").format(doc=doc))
        flag = special.get("flag", "--" + item.name.replace("_", "-"))
        action = target.add_argument(flag, **options)
        if "action" not in special:
            action.field_default = _field_default(item)  # shown by HelpFormatter


def job_config(args: argparse.Namespace) -> TrainJobConfig:
    """The job's config: the field defaults, then ``--config``'s file, then the flags given."""
    values = read_config_file(args.config_file) if args.config_file is not None else {}
    for item in dataclasses.fields(TrainJobConfig):
        if hasattr(args, item.name):  # given on the command line (the default is SUPPRESS)
            values[item.name] = getattr(args, item.name)
    return TrainJobConfig(**values)


def read_config_file(path: str) -> dict[str, Any]:
    """The options of the YAML file ``path``: a mapping of :class:`TrainJobConfig` field names to
    values of the field's type (lists for tuples). An empty file is no options. ValueError
    naming the file, and the key, for anything else (:mod:`ebpo.utils.structured_input` reads
    it: size, depth, repeated keys and aliases are bounded there)."""
    where = f"--config {path!r}"
    if not path.strip():
        raise ValueError(f"--config must be a path to a YAML file, got {path!r}")
    file = Path(path)
    if not file.exists():
        raise ValueError(f"{where} does not exist")
    if not file.is_file():
        raise ValueError(f"{where} is not a file, expected a YAML file")
    try:
        data = read_yaml_file(file, where)
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.strerror or error})") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{where} should hold a mapping of TrainJobConfig field names to values, "
            f"got {_kind(data)}"
        )
    annotations = typing.get_type_hints(TrainJobConfig)
    values = {}
    for key, value in data.items():
        if key not in annotations:
            raise ValueError(f"{where}: unknown key {key!r}; expected {_field_hint(key)}")
        values[key] = check_field_value(f"{where}: {key}", value, annotations[key])
    return values


def run(args: argparse.Namespace) -> int:
    config = job_config(args)
    # Refused before TRL and transformers are imported (seconds of CPU): every check that needs
    # neither; run_train_job validates the rest (the estimator preset, extra) before any work.
    config.check_values()
    from ebpo.lab.train.job import run_train_job  # heavy: TRL, transformers (the trl extra)

    try:
        result = run_train_job(config)  # a ValueError is a user error: one line, exit 2 (ebpo.cli)
    except OSError as error:  # a full disk is one line too; anything else is a bug
        if storage_error(error) is None:
            raise
        where = f" {error.filename!r}" if error.filename else ""
        raise ValueError(
            f"cannot write{where}: {error.strerror or error}; once there is space, continue the run "
            "with --resume"
        ) from error
    return 130 if result["status"] == "interrupted" else 0


# ---- field types -> argparse options and YAML checks


def _value_options(name: str, annotation: Any) -> dict[str, Any]:
    """``add_argument``'s type / nargs / metavar for a field of type ``annotation``."""
    kind = _without_none(annotation)
    if kind is bool:
        return {"type": _to_bool, "nargs": "?", "const": True, "metavar": "BOOL"}
    if kind in (int, float, str):
        return {"type": kind}
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return {"type": _comma_list(item), "metavar": f"{item.__name__.upper()},..."}
    if typing.get_origin(kind) is dict or kind is dict:
        return {"type": _json_object, "metavar": "JSON"}
    raise TypeError(f"TrainJobConfig.{name}: no command-line form for type {annotation}")


def _to_bool(text: str) -> bool:
    """A ``bool`` flag's value: the words transformers' ``HfArgumentParser`` takes (its
    ``string_to_bool``, without importing transformers to parse a flag)."""
    word = text.lower()
    if word in ("yes", "true", "t", "y", "1"):
        return True
    if word in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {text} but expected one of yes/no, true/false, t/f, y/n, "
        "1/0 (case insensitive)."
    )


def _comma_list(item: type) -> Callable[[str], tuple[Any, ...]]:
    """Comma-separated values of type ``item`` (blanks around them and empty items ignored)."""

    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(item(v.strip()) for v in text.split(",") if v.strip())
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {_NAMES[item]}s, got {text!r}"
            ) from error

    parse.__name__ = f"comma-separated {_NAMES[item]}s"
    return parse


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = parse_json(text)  # size, depth and repeated keys checked
    except ValueError as error:
        shown = text if len(text) <= 80 else f"{text[:60]}..."
        raise argparse.ArgumentTypeError(
            f"expected a JSON object such as '{{\"key\": 1}}', got {shown!r} ({error})"
        ) from error
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {_kind(value)}")
    return value


_NAMES = {int: "integer", float: "number", str: "string", bool: "true or false"}


def _without_none(annotation: Any) -> Any:
    """``X`` for ``X | None``; ``annotation`` otherwise."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _field_default(item: dataclasses.Field) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def _shown(default: Any) -> str:
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    if isinstance(default, dict):
        return json.dumps(default)
    return str(default)


def _percent(text: str) -> str:
    """``text`` escaped for argparse, which %-formats help strings."""
    return text.replace("%", "%%")


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {list: "a list", dict: "a mapping", str: "a string"}
    return kinds.get(type(value), f"{type(value).__name__} {reprlib.repr(value)}")


def _field_hint(key: Any) -> str:
    names = [item.name for item in dataclasses.fields(TrainJobConfig)]
    close = difflib.get_close_matches(str(key).replace("-", "_"), names, n=1)
    if close:
        return f"a TrainJobConfig field name (did you mean {close[0]!r}?)"
    return "a TrainJobConfig field name (the flags of ebpo train --help, with _ for -)"
