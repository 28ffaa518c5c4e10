"""The fields of a pickled ``TrainingArguments`` (``training_args.bin``), read without unpickling.

transformers' ``Trainer`` saves its arguments with ``torch.save(args, "training_args.bin")``: a zip
archive whose ``*/data.pkl`` is a pickle of the dataclass instance (``GRPOConfig`` for ``trl
grpo``, ``EBPOConfig`` for ``ebpo grpo``). It is the only file of a TRL run that holds the seed,
the learning rate or the group size. Unpickling it would run whatever the file names, so this
module never does: it walks the pickle's opcodes (:func:`pickletools.genops`, a disassembler) on
a stack of plain values — strings, numbers, None, booleans, lists, tuples, dicts — and stands an
:class:`Opaque` placeholder (the dotted name, no import) for every class, function or persistent
reference. Nothing is imported, called or constructed; an opcode outside this set makes the file
unreadable (ValueError), and the caller asks for the run's label on the command line instead.

Bounded in time, memory and depth whatever the file holds: at most :data:`MAX_PICKLE_BYTES` are
read (the zip member's declared size checked, and its actual size, whatever it declares); any
error of the zip archive (a bad CRC, a broken central directory, the encrypted flag, an unknown
compression method) is a ValueError; and the value built is refused when, its shared references
(the pickle's memo) expanded, it holds more than :data:`MAX_VALUES` values or nests deeper than
:data:`MAX_DEPTH` — one list referred to 2^40 times through the memo is 2^40 values to render.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_CHARACTERS", "MAX_DEPTH", "MAX_PICKLE_BYTES", "MAX_VALUES", "Opaque", "pickled_fields",
]  # fmt: skip

#: the largest ``training_args.bin`` (and pickle inside it) read: a few kB in practice
MAX_PICKLE_BYTES = 2**20
#: the most values the pickled object may hold, its shared references expanded (TRL's: ~400)
MAX_VALUES = 100_000
#: the deepest nesting of lists, dicts and objects read (TRL's: 4)
MAX_DEPTH = 64
#: the most characters of text the object may hold, its shared references expanded
MAX_CHARACTERS = 4 * 2**20
#: the largest integer kept (bits): a longer one is no setting, and its text alone is slow
_MAX_INT_BITS = 1024
#: the most values of a dict key read as text (an enum member: a handful)
_MAX_KEY_VALUES = 100

_STRINGS = {
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING",
    "STRING", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8",
}  # fmt: skip
_NUMBERS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG", "BINFLOAT", "FLOAT"}
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_MEMO_PUT = {"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"}
_MEMO_GET = {"BINGET", "LONG_BINGET", "GET"}
_IGNORED = {"PROTO", "FRAME", "STOP"}
#: how protocols 0 and 1 make an instance of a class (``copyreg._reconstructor(cls, object, None)``)
_RECONSTRUCTORS = {"copy_reg._reconstructor", "copyreg._reconstructor", "copyreg.__newobj__"}
_MARK = object()


@dataclass
class Opaque:
    """What a class, function or object of the pickle stands for: its dotted ``name`` and, once
    built, its ``state`` (a dict for a dataclass instance); never imported."""

    name: str
    args: tuple = ()
    state: Any = field(default=None)

    def __repr__(self) -> str:
        plain = ", ".join(repr(a) for a in self.args)
        return f"{self.name}({plain})"


def pickled_fields(path: str | Path) -> tuple[str, dict[str, Any]]:
    """``(class name, fields)`` of the object pickled in ``path`` (a ``torch.save`` zip archive
    or a bare pickle): e.g. ``("trl.trainer.grpo_config.GRPOConfig", {"seed": 42, ...})``.
    ValueError (naming the file) when it is not such a pickle of an object with a dict state."""
    where = f"{str(path)!r}"
    data = _pickle_bytes(Path(path), where)
    try:
        root = _walk(data)
        _check_size(root)
    except (ValueError, IndexError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"{where} is not a pickle this reader follows ({error})") from None
    if not (isinstance(root, Opaque) and isinstance(root.state, dict)):
        raise ValueError(f"{where} does not hold a pickled object with fields")
    return root.name, {str(k): v for k, v in root.state.items()}


def _pickle_bytes(path: Path, where: str) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(MAX_PICKLE_BYTES + 1)
    if len(raw) > MAX_PICKLE_BYTES:
        raise ValueError(f"{where}: more than the {MAX_PICKLE_BYTES:,} bytes read")
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        return raw
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            names = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(names) != 1:
                raise ValueError(f"a torch.save archive holds one data.pkl, found {names[:4]}")
            info = archive.getinfo(names[0])
            if info.file_size > MAX_PICKLE_BYTES:
                raise ValueError(f"its data.pkl declares {info.file_size:,} bytes")
            with archive.open(info) as member:
                data = member.read(MAX_PICKLE_BYTES + 1)
    except Exception as error:  # a damaged zip: zipfile raises BadZipFile, RuntimeError (the
        # encrypted flag), NotImplementedError (a compression method), EOFError, zlib.error ...
        raise ValueError(f"{where}: a damaged zip archive ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:200]})") from None  # fmt: skip
    if len(data) > MAX_PICKLE_BYTES:
        raise ValueError(f"{where}: its data.pkl holds more than {MAX_PICKLE_BYTES:,} bytes")
    return data


def _check_size(root: Any, most: int = MAX_VALUES) -> None:
    """ValueError when ``root``, its shared references expanded, holds more than ``most`` values
    or :data:`MAX_CHARACTERS` characters of text, or nests deeper than :data:`MAX_DEPTH` (a
    reference cycle nests without end); iterative, visiting at most ``most`` values."""
    pending: list[tuple[Any, int]] = [(root, 0)]
    count = characters = 0
    while pending:
        value, depth = pending.pop()
        count += 1
        if isinstance(value, (str, bytes)):
            characters += len(value)
        if count > most or characters > MAX_CHARACTERS:
            what = f"{most:,} values" if count > most else f"{MAX_CHARACTERS:,} characters"
            raise ValueError(f"more than {what} once its shared references are expanded")
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise ValueError(f"an integer of more than {_MAX_INT_BITS} bits")
        pending.extend((child, depth + 1) for child in _children(value))


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        yield from value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield item
    elif isinstance(value, Opaque):
        yield from value.args
        yield value.state


def _walk(data: bytes) -> Any:
    """The value the pickle ``data`` builds, on plain values and :class:`Opaque` placeholders."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    arg: Any  # the opcode's argument, of the type its opcode takes (typeshed: Any | None)
    for opcode, arg, _ in pickletools.genops(data):
        name = opcode.name
        if name in _IGNORED:
            continue
        if name in _STRINGS or name in _NUMBERS:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name == "MARK":
            stack.append(_MARK)
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE"):
            stack.append(_collection(name, stack))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = tuple(stack[-count:])
            del stack[-count:]
            stack.append(items)
        elif name in ("APPEND", "APPENDS", "SETITEM", "SETITEMS"):
            _fill(name, stack)
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            _pop_to_mark(stack)
        elif name in _MEMO_PUT:
            memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]
        elif name in _MEMO_GET:
            stack.append(memo[int(arg)])
        elif name == "GLOBAL":
            stack.append(Opaque(str(arg).replace(" ", ".")))
        elif name == "STACK_GLOBAL":
            qualname = stack.pop()
            stack.append(Opaque(f"{stack.pop()}.{qualname}"))
        elif name in ("REDUCE", "NEWOBJ"):
            args = tuple(stack.pop())
            callable_ = _name(stack.pop())
            if callable_ in _RECONSTRUCTORS and args and isinstance(args[0], Opaque):
                stack.append(Opaque(args[0].name))  # protocols 0-1: an instance of args[0]
            else:
                stack.append(Opaque(callable_, args))
        elif name == "BUILD":
            state = stack.pop()
            if isinstance(stack[-1], Opaque):
                stack[-1].state = state
        elif name in ("BINPERSID", "PERSID"):
            stack.pop() if name == "BINPERSID" else None
            stack.append(Opaque("persistent"))
        else:
            raise ValueError(f"opcode {name} is not followed")
    if len(stack) != 1:
        raise ValueError("the pickle leaves no single value")
    return stack[0]


def _name(value: Any) -> str:
    return value.name if isinstance(value, Opaque) else f"<{type(value).__name__}>"


def _pop_to_mark(stack: list[Any]) -> list[Any]:
    index = max(i for i, v in enumerate(stack) if v is _MARK)
    items = stack[index + 1 :]
    del stack[index:]
    return items


def _collection(name: str, stack: list[Any]) -> Any:
    if name.startswith("EMPTY_"):
        return {"EMPTY_DICT": {}, "EMPTY_LIST": [], "EMPTY_TUPLE": ()}[name]
    items = _pop_to_mark(stack)
    if name == "DICT":
        return {_key(k): v for k, v in zip(items[::2], items[1::2], strict=True)}
    return list(items) if name == "LIST" else tuple(items)


def _fill(name: str, stack: list[Any]) -> None:
    if name in ("APPEND", "SETITEM"):
        items = stack[-2:] if name == "SETITEM" else stack[-1:]
        del stack[-len(items) :]
    else:
        items = _pop_to_mark(stack)
    target = stack[-1]
    if name.startswith("APPEND"):
        target.extend(items)
    else:
        target.update({_key(k): v for k, v in zip(items[::2], items[1::2], strict=True)})


def _key(key: Any) -> Any:
    """A dict key as a hashable value: an Opaque key (an enum member) by its text, once it is
    known to be small (its text could be any size)."""
    if isinstance(key, (Opaque, list, dict)):
        _check_size(key, _MAX_KEY_VALUES)
        return repr(key)
    return key
