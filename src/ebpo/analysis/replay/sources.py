"""From the user's paths to steps: which files, in which order, and the groups of each step.

**verl rollout dumps.** With ``trainer.rollout_data_dir=DIR`` verl 0.9.1 writes ``DIR/{step}.jsonl``
after every training step (``_log_rollout_data`` → ``_write_generations``, in the v1 trainer and
in the legacy ``RayPPOTrainer``): one line per response with ``input``, ``output``, ``gts``,
``score`` (the response's summed reward), ``step`` and the reward function's extra fields. The v1
trainer adds ``uid`` = ``{prompt uid}_{session}_{output}`` (its TransferQueue key, lines sorted by
it); the legacy trainer writes no uid at all. So a step's groups are:

* v1: the rows sharing a prompt uid (the key's first part). A session — one of the ``rollout.n``
  samples of a prompt — counts once, with the reward of its last output, as verl's GRPO computes
  advantages for multi-output agent sessions. The rows verl adds to balance the batch over its
  workers (prompt uid ``pad`` + 32 hex digits, score 0, empty response) are dropped, as the
  estimators mask them in training.
* legacy: the rows sharing the prompt text ``input`` (every sample of a prompt decodes to the same
  text; a prompt drawn twice into one step would make one group of both draws).

A directory stands for its ``{step}.jsonl`` files; each file holds one step.

**Tables** (other trainers): JSON lines, CSV or Parquet files with a prompt id, a reward and a
step column, named by the caller; a directory stands for its ``.jsonl``, ``.csv`` and
``.parquet`` files. A file may hold many steps; it is read in chunks and only the current step is
kept in memory, so each step's rows must be together, steps increasing.

**Order.** Files are replayed in the order of their first step (numeric: 2 before 10), and every
step must come after the previous one: a step that appears twice, or a file whose steps overlap
another's, is an error naming both places. Nothing is replayed from a file until all files have
been found and ordered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.analysis.replay.readers import (
    FORMATS,
    INT64_MAX,
    Chunk,
    Columns,
    InputFile,
    input_file,
)

__all__ = [
    "INPUT_FORMATS",
    "PADDING_PROMPT",
    "VERL_FILE",
    "VERL_KEY",
    "Source",
    "StepBatch",
    "verl_groups",
]

INPUT_FORMATS = ("verl", "table")
#: the names verl gives its rollout dumps
VERL_FILE = re.compile(r"^\d+\.jsonl$")
#: the v1 trainer's uid: ``{prompt uid}_{session}_{output}``
VERL_KEY = r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<output>\d+)$"
#: the prompt uid of the rows verl's v1 trainer adds to balance a batch (padding_utils)
PADDING_PROMPT = r"^pad[0-9a-f]{32}$"
VERL_REWARD, VERL_STEP = "score", "step"


@dataclass(frozen=True)
class StepBatch:
    """One step's responses: ``rewards[i]`` in group ``group_index[i]`` (dense, ``[0, K)``),
    whose prompt id is ``group_labels[group_index[i]]``.

    ``rows``: lines read for the step; ``padding_rows``: verl's balancing rows dropped;
    ``merged_outputs``: rows of multi-output sessions other than the session's last output."""

    step: int
    rewards: np.ndarray
    group_index: np.ndarray
    group_labels: Any
    source: str
    rows: int
    padding_rows: int = 0
    merged_outputs: int = 0

    @property
    def num_groups(self) -> int:
        return len(self.group_labels)


# ------------------------------------------------------------------------------ files
def find_files(paths: Sequence[str], fmt: str) -> list[InputFile]:
    """The input files of ``paths`` (files, or directories standing for their files; see the
    module doc). ValueError for a missing path, a directory without input files, a file of the
    wrong kind, or a file named twice."""
    files: list[InputFile] = []
    for text in paths:
        path = Path(text).expanduser()
        if not path.exists():
            raise ValueError(f"input {text!r} does not exist")
        if path.is_dir():
            found = _directory_files(path, fmt)
            if not found:
                raise ValueError(_empty_directory(text, fmt))
            files.extend(found)
        elif not path.is_file():
            raise ValueError(f"input {text!r} is not a regular file (a device or a pipe?)")
        else:
            if fmt == "verl" and path.suffix.lower() != ".jsonl":
                raise ValueError(
                    f"input {text!r}: verl's rollout dumps are .jsonl files; for another "
                    "trainer's table pass --format table and the column flags"
                )
            files.append(input_file(path))
    identities: set[tuple[int, int]] = set()
    for file in files:
        info = file.path.stat()  # a file's identity, whatever path or link names it
        if (info.st_dev, info.st_ino) in identities:
            raise ValueError(f"input file {str(file.path)!r} is given twice")
        identities.add((info.st_dev, info.st_ino))
    return files


def _directory_files(path: Path, fmt: str) -> list[InputFile]:
    names = sorted(p for p in path.iterdir() if p.is_file())
    if fmt == "verl":
        return [InputFile(p, "jsonl") for p in names if VERL_FILE.match(p.name)]
    return [input_file(p) for p in names if p.suffix.lower() in FORMATS]


def _empty_directory(text: str, fmt: str) -> str:
    if fmt == "verl":
        return (
            f"input directory {text!r} holds no {{step}}.jsonl files (what verl writes with "
            "trainer.rollout_data_dir); for another trainer's table pass --format table"
        )
    return f"input directory {text!r} holds no {', '.join(FORMATS)} files"


# ------------------------------------------------------------------------------ source
class Source:
    """The steps of the input ``paths`` in ``fmt`` (``"verl"`` or ``"table"``; a table needs
    ``columns``). Finding and ordering the files happens here; :meth:`steps` reads them."""

    def __init__(self, paths: Sequence[str], fmt: str, columns: Columns | None = None) -> None:
        if fmt not in INPUT_FORMATS:
            raise ValueError(f"format must be one of {list(INPUT_FORMATS)}, got {fmt!r}")
        if fmt == "table" and columns is None:
            raise ValueError("a table needs its column names (prompt id, reward, step)")
        self.format = fmt
        self.files: list[InputFile] = []
        self.columns: list[Columns] = []
        first_steps: list[int] = []
        for file in find_files(paths, fmt):
            file_columns = self._file_columns(file) if fmt == "verl" else columns
            assert file_columns is not None
            first_steps.append(file.first_step(file_columns))
            self.files.append(file)
            self.columns.append(file_columns)
        order = sorted(
            range(len(self.files)), key=lambda i: (first_steps[i], str(self.files[i].path))
        )
        self.files = [self.files[i] for i in order]
        self.columns = [self.columns[i] for i in order]

    @staticmethod
    def _file_columns(file: InputFile) -> Columns:
        """verl's columns; the key is ``uid`` (v1 trainer) or ``input`` (legacy trainer)."""
        row = file.first_row(())
        missing = [name for name in (VERL_REWARD, VERL_STEP) if name not in row]
        key = "uid" if "uid" in row else "input"
        if missing or key not in row:
            absent = missing + ([] if key in row else ["uid or input"])
            raise ValueError(
                f"{file.where(0)}: no {' / '.join(absent)} field: not a verl rollout dump "
                "(verl writes input, output, gts, score, step[, uid]); for another trainer's "
                "table pass --format table and the column flags"
            )
        return Columns(key=key, reward=VERL_REWARD, step=VERL_STEP)

    @property
    def one_step_per_file(self) -> bool:
        return self.format == "verl"

    def steps(self) -> Iterator[StepBatch]:
        """Every step in order (module doc), one at a time: memory holds one step and a chunk."""
        seen: dict[int, tuple[InputFile, int]] = {}
        last: tuple[int, InputFile, int] | None = None
        for file, columns in zip(self.files, self.columns, strict=True):
            kind = "string" if self.format == "verl" else ""
            parts: list[Chunk] = []
            current: int | None = None
            empty = True
            for chunk in file.chunks(columns, kind=kind):
                empty = False
                steps = chunk.steps
                cuts = np.flatnonzero(steps[1:] != steps[:-1]) + 1
                for begin, end in zip([0, *cuts], [*cuts, len(steps)], strict=True):
                    step, row = int(steps[begin]), chunk.start + int(begin)
                    if step != current:
                        if current is not None:
                            if self.one_step_per_file:
                                raise ValueError(
                                    f"{file.where(row)}: step {step}, but the file began with "
                                    f"step {current}: a verl rollout dump holds one step"
                                )
                            yield self._batch(current, parts, file, columns)
                            parts = []
                        _check_order(step, file, row, seen, last)
                        seen[step] = (file, row)
                        last = (step, file, row)
                        current = step
                    parts.append(_slice(chunk, int(begin), int(end)))
            if empty:
                raise ValueError(f"{file.path}: holds no rows")
            assert current is not None
            yield self._batch(current, parts, file, columns)

    def _batch(self, step: int, parts: list[Chunk], file: InputFile, columns: Columns) -> StepBatch:
        import pyarrow as pa  # optional heavy dependency (ebpo[data])

        keys = pa.concat_arrays([part.keys for part in parts])
        rewards = np.concatenate([part.rewards for part in parts])
        rows = len(rewards)
        padding = merged = 0
        if self.format == "verl" and columns.key == "uid":
            try:
                keys, rewards, padding, merged = verl_groups(keys, rewards)
            except UidNumberError as error:  # the step's rows are consecutive rows of the file
                raise ValueError(f"{file.where(parts[0].start + error.row)}: {error}") from None
            if not len(rewards):
                raise ValueError(
                    f"{file.path}: step {step} holds only verl's padding rows (uid pad…)"
                )
        encoded = keys.dictionary_encode()
        group_index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        return StepBatch(
            step, rewards, group_index, encoded.dictionary, str(file.path), rows, padding, merged
        )


def _slice(chunk: Chunk, begin: int, end: int) -> Chunk:
    if begin == 0 and end == len(chunk.steps):
        return chunk
    return Chunk(
        chunk.keys.slice(begin, end - begin),
        chunk.rewards[begin:end],
        chunk.steps[begin:end],
        chunk.start + begin,
    )


def _check_order(
    step: int,
    file: InputFile,
    row: int,
    seen: dict[int, tuple[InputFile, int]],
    last: tuple[int, InputFile, int] | None,
) -> None:
    """A step must be new and come after the previous one (module doc)."""
    if step in seen:
        first, first_row = seen[step]
        raise ValueError(
            f"{file.where(row)}: step {step} repeats (its rows began at {first.where(first_row)}); "
            "each step's rows must be together, in one file"
        )
    if last is not None and step < last[0]:
        previous, file_of, row_of = last
        raise ValueError(
            f"{file.where(row)}: step {step} comes after step {previous} "
            f"({file_of.where(row_of)}); steps must increase: sort the table by step"
        )


def verl_groups(keys: Any, rewards: np.ndarray) -> tuple[Any, np.ndarray, int, int]:
    """``(prompt uids, rewards, padding rows dropped, outputs merged)`` of a v1 dump's rows.

    ``keys`` are verl's uids. A key of the form ``{prompt}_{session}_{output}`` (:data:`VERL_KEY`)
    belongs to prompt ``prompt``; of each session only the row with the highest output index
    stays (its reward is the session's). Another key is a prompt uid of its own row. Rows whose
    prompt uid is verl's padding uid are dropped. The rows that stay keep their order.
    """
    import pyarrow as pa  # optional heavy dependency (ebpo[data])
    import pyarrow.compute as pc  # optional heavy dependency (ebpo[data])

    # The key's last two "_"-separated fields (a split is ten times faster than the regex).
    parts = pc.split_pattern(keys, "_", max_splits=2, reverse=True)
    first = parts.offsets.to_numpy()[:-1]
    three = np.diff(parts.offsets.to_numpy()) == 3
    fields = parts.values
    session_text = fields.take(pa.array(np.where(three, first + 1, first)))
    output_text = fields.take(pa.array(np.where(three, first + 2, first)))
    is_v1 = three & _all_digits(session_text) & _all_digits(output_text)
    prompts = pc.if_else(pa.array(is_v1), fields.take(pa.array(first)), keys)
    padding = pc.starts_with(prompts, "pad").to_numpy(zero_copy_only=False)
    if padding.any():  # only then the exact test (a uuid never starts with "pad")
        padding = pc.match_substring_regex(prompts, PADDING_PROMPT).to_numpy(zero_copy_only=False)
    num_padding = int(padding.sum())
    rows_kept = np.arange(len(rewards))  # each remaining row's index among the step's rows
    if num_padding:
        keep = ~padding
        rows_kept = rows_kept[keep]
        prompts, rewards, is_v1 = prompts.filter(pa.array(keep)), rewards[keep], is_v1[keep]
        session_text, output_text = (
            session_text.filter(pa.array(keep)),
            output_text.filter(pa.array(keep)),
        )
    if not is_v1.any():
        return prompts, rewards, num_padding, 0
    rows = len(rewards)
    # rows that are not v1 keys are sessions of their own: a number no v1 session has
    try:
        sessions = _integers(session_text, is_v1, "session")
        output = _integers(output_text, is_v1, "output")
    except UidNumberError as error:
        raise UidNumberError(str(error), int(rows_kept[error.row])) from None
    session = np.where(is_v1, sessions, -1 - np.arange(rows))
    prompt_index = prompts.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    order = np.lexsort((output, session, prompt_index))
    p, s = prompt_index[order], session[order]
    last = np.ones(rows, dtype=bool)
    last[:-1] = (p[1:] != p[:-1]) | (s[1:] != s[:-1])
    kept = np.sort(order[last])
    merged = rows - len(kept)
    if merged:
        prompts, rewards = prompts.take(pa.array(kept)), rewards[kept]
    return prompts, rewards, num_padding, merged


def _all_digits(text: Any) -> np.ndarray:
    """Whether each string is a non-empty run of ASCII digits."""
    import pyarrow.compute as pc  # optional heavy dependency (ebpo[data])

    return pc.ascii_is_decimal(text).to_numpy(zero_copy_only=False)


class UidNumberError(ValueError):
    """A verl uid whose session or output number does not fit 64 bits; ``row``: its index among
    the rows given to :func:`verl_groups`."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


def _integers(text: Any, valid: np.ndarray, name: str) -> np.ndarray:
    """``text`` (digits where ``valid``) as int64, 0 elsewhere; :class:`UidNumberError` naming the
    first number beyond 64 bits."""
    import pyarrow as pa  # optional heavy dependency (ebpo[data])
    import pyarrow.compute as pc  # optional heavy dependency (ebpo[data])

    digits = pc.if_else(pa.array(valid), text, "0")
    try:
        return pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:  # more digits than 64 bits hold: find the first such number
        values = digits.to_pylist()
        row = next(i for i, v in enumerate(values) if _beyond_int64(v))
        raise UidNumberError(
            f"the uid {name} number {_short_digits(values[row])} does not fit 64 bits", row
        ) from None


def _beyond_int64(digits: str) -> bool:
    significant = digits.lstrip("0")  # no int() of thousands of digits: Python refuses those
    return len(significant) > 19 or (len(significant) == 19 and int(significant) > INT64_MAX)


def _short_digits(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} digits)"
