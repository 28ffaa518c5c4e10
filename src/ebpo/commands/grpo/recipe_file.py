"""``ebpo grpo --config recipe.yaml``: the file checked before TRL's parser reads it.

TRL's ``TrlParser`` reads the YAML with ``yaml.safe_load`` and hands every value to argparse as
the default of its flag. argparse converts a string default with the flag's type, and takes any
other value as it is: ``num_generations: [2]`` or ``reward_funcs: [5]`` reach the trainer and fail
there as a TypeError, ``reward_funcs: math_reward`` (a string where a list belongs) is iterated
letter by letter, and a key written twice silently takes its last value. So the file is first
read by :mod:`ebpo.utils.structured_input` (size, depth, repeated keys, aliases bounded) and each
known key's value checked against its dataclass field's annotation
(:func:`ebpo.utils.field_values.check_field_value`, with strings left to argparse for scalar
fields, as TRL's parser converts them); ``datasets:`` entries against ``DatasetConfig``'s fields.
Unknown keys are left to TRL's parser, which refuses them. Then TRL reads the file as before.
"""

from __future__ import annotations

import dataclasses
import stat
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ebpo.utils.field_values import check_field_value
from ebpo.utils.structured_input import read_yaml_file

__all__ = ["ALSO_ACCEPTED", "check_recipe_file"]


def check_recipe_file(path: str, dataclass_types: Sequence[type]) -> None:
    """Raise ValueError (one line naming ``--config`` and the key) when the YAML file ``path``
    cannot be read or a value has the wrong type for its field of ``dataclass_types``."""
    where = f"--config {path!r}"
    kind = _not_a_file(Path(path))
    if kind is not None:
        raise ValueError(
            f"{where}: {kind}, expected a YAML file or a shipped recipe's name (ebpo grpo recipe --list)"
        )
    try:
        data = read_yaml_file(path, where)
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.strerror or error})") from error
    if not isinstance(data, dict):
        kind = "nothing" if data is None else type(data).__name__
        raise ValueError(f"{where} should hold a mapping of option names to values, got {kind}")
    annotations: dict[str, Any] = {}
    for cls in dataclass_types:
        hints = typing.get_type_hints(cls)
        annotations.update({f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init})
    annotations["env"] = dict[str, Any]  # TRL's own key: environment variables to set
    for name, also in ALSO_ACCEPTED.items():
        annotations[name] = annotations[name] | also
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"{where}: key {key!r} must be a string (an option name)")
        if key not in annotations:
            continue  # TRL's parser names every unknown key
        entries = _dataclass_items(annotations[key])
        if entries is None:
            check_field_value(f"{where}: {key}", value, annotations[key], strings_convert=True)
        else:
            _check_entries(f"{where}: {key}", value, entries)


#: fields whose class takes more than its annotation (the command line's type) says: TRL's
#: ``scale_rewards`` takes ``true`` / ``false`` for "group" / "none" (open-r1's recipes write them);
#: ``resume_from_checkpoint: true`` resumes from the newest checkpoint of ``output_dir``
#: (transformers' ``Trainer.train`` takes True)
ALSO_ACCEPTED: dict[str, Any] = {"scale_rewards": bool, "resume_from_checkpoint": bool}


#: what a path that is not a regular file is, by its ``stat`` type
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO), not read: it could block forever"),
    (stat.S_ISCHR, "a character device (such as /dev/null)"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (followed through links), else None. Never
    opens it: a FIFO would block the reader."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file" + (" (a broken symbolic link)" if path.is_symlink() else "")
    except NotADirectoryError:
        return "no such file (a part of its path is a file, not a directory)"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    for test, kind in _KINDS:
        if test(mode):
            return f"is {kind}"
    return None


def _dataclass_items(annotation: Any) -> type | None:
    """``X`` for a ``list[X]`` field whose items are dataclasses (TRL's ``datasets``)."""
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        if dataclasses.is_dataclass(item) and isinstance(item, type):
            return item
    return None


def _check_entries(where: str, value: Any, cls: type) -> None:
    """Each item of ``value`` a mapping of ``cls``'s fields with values of their types."""
    if not isinstance(value, list):
        raise ValueError(
            f"{where} must be a list of mappings of {cls.__name__} fields "
            f"({', '.join(f.name for f in dataclasses.fields(cls))}), got {value!r:.80}"
        )
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for index, entry in enumerate(value):
        here = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(
                f"{here} must be a mapping of {cls.__name__} fields, got {entry!r:.80}"
            )
        for key, item in entry.items():
            if key not in names:
                raise ValueError(f"{here}: unknown key {key!r}; expected one of {names}")
            check_field_value(f"{here}.{key}", item, hints[key])
        missing = [name for name in _required(cls) if name not in entry]
        if missing:
            raise ValueError(f"{here} lacks {', '.join(missing)}")


def _required(cls: type) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
