"""The two-output agent loop's names (:data:`TWO_OUTPUT_LOOP`, :data:`OUTPUTS`) and the agent
sessions that the smoke makes fail on purpose, as a value (:class:`SessionFault`) and as the
environment variable that carries them to verl's agent-loop workers (:data:`FAULTS_ENV`,
:func:`format_faults`, :func:`parse_faults`). Imports nothing from verl: the smoke writes the
variable, the agent loop (:mod:`~ebpo.lab.verl_cpu.v1.two_output`) reads it in a Ray worker.

A session is named by its prompt's ``extra_info.id`` and verl's ``session_id`` (0 ..
``rollout.n`` - 1): with a fixed training file and data order, that is the same session in the
uninterrupted and the resumed run, whatever order the agent loop's tasks run in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "FAULTS_ENV",
    "FAULT_KINDS",
    "OUTPUTS",
    "TWO_OUTPUT_LOOP",
    "SessionFault",
    "format_faults",
    "parse_faults",
]

#: ``actor_rollout_ref.rollout.agent.default_agent_loop`` of the two-output loop
TWO_OUTPUT_LOOP = "ebpo_cpu_two_output"
#: outputs per session of the two-output loop; the last one scores
OUTPUTS = 2

#: the process environment variable (forwarded to every Ray worker) that lists the faults
FAULTS_ENV = "EBPO_CPU_AGENT_FAULTS"
#: ``empty``: the session's agent loop returns no output (verl warns and stores no row);
#: ``fail``: it raises (verl marks the prompt's group ``failure`` and keeps its other sessions)
FAULT_KINDS = ("empty", "fail")


@dataclass(frozen=True)
class SessionFault:
    """One session made to fail: ``kind`` (:data:`FAULT_KINDS`), the prompt id, the session."""

    kind: str
    prompt_id: str
    session: int

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}; got {self.kind!r}")
        if not self.prompt_id or any(c in self.prompt_id for c in " @#"):
            raise ValueError(
                f"prompt_id must be non-empty without ' ', '@', '#'; got {self.prompt_id!r}"
            )
        if self.session < 0:
            raise ValueError(f"session must be >= 0; got {self.session}")


def format_faults(faults: Iterable[SessionFault]) -> str:
    """``kind@prompt_id#session`` items separated by spaces (the value of :data:`FAULTS_ENV`)."""
    return " ".join(f"{f.kind}@{f.prompt_id}#{f.session}" for f in faults)


def parse_faults(text: str) -> dict[tuple[str, int], str]:
    """``{(prompt_id, session): kind}`` from :func:`format_faults`' text (empty: none).

    Raises:
        ValueError: an item not of the form ``kind@prompt_id#session``.
    """
    out: dict[tuple[str, int], str] = {}
    for item in text.split():
        kind, _, rest = item.partition("@")
        prompt_id, _, session = rest.rpartition("#")
        if not session.isdigit():
            raise ValueError(f"{FAULTS_ENV}: expected kind@prompt_id#session, got {item!r}")
        fault = SessionFault(kind, prompt_id, int(session))
        out[(fault.prompt_id, fault.session)] = fault.kind
    return out
