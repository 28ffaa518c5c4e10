"""The releases of the frameworks ebpo supports, and those CI runs: the one place they are kept.

README's "Install" table is checked against :data:`SUPPORTED` (tests/test_supported_versions.py),
``make test-compat`` runs the legs named in :data:`COMPAT_LEGS` from ``requirements/compat-*.txt``
(checked against it too), and :mod:`ebpo.integrations.trl.trl_version` refuses a TRL outside
:data:`SUPPORTED` ``["trl"]`` in one line at import.

A range holds every release from ``oldest`` to ``newest``, the patch releases of ``newest``'s minor
series included (``1.16.1`` is inside ``1.10.0``–``1.16.0``; ``1.17.0`` is not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COMPAT_LEGS", "SUPPORTED", "SupportedRange", "markdown_table", "release_tuple"]


@dataclass(frozen=True)
class SupportedRange:
    """The releases of ``package`` ebpo supports (``oldest`` to ``newest``) and those CI runs."""

    package: str
    oldest: str
    newest: str
    #: the releases CI runs, oldest first, each with where (a README cell)
    tested: tuple[tuple[str, str], ...]

    def contains(self, version: str) -> bool:
        """Whether ``version`` (e.g. ``"1.14.2"``, ``"1.16.0.dev0"``) lies inside the range."""
        release = release_tuple(version)
        newest = release_tuple(self.newest)
        return release_tuple(self.oldest) <= release and release[:2] <= newest[:2]

    def span(self) -> str:
        """``"1.10.0–1.16.0"``: the range as the one-line messages and the README write it."""
        return f"{self.oldest}–{self.newest}"


def release_tuple(version: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a version string: ``"1.14.2"`` → ``(1, 14, 2)``, ``"0.8"`` →
    ``(0, 8, 0)``, ``"2.13.0+cpu"`` → ``(2, 13, 0)``; a pre-release counts as its release.

    Raises:
        ValueError: ``version`` does not start with a number.
    """
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"version: expected a release number such as 1.14.2, got {version!r}")
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


_FULL = "`make test`"
_COMPAT = "`make test-compat`"

#: the supported ranges, by package
SUPPORTED: dict[str, SupportedRange] = {
    "trl": SupportedRange(
        "trl",
        oldest="1.10.0",
        newest="1.16.0",
        tested=(
            ("1.10.0", _COMPAT),
            ("1.14.2", _COMPAT),
            (
                "1.15.0",
                f"`make test-unsloth`, and {_COMPAT} shows TRL's own GRPOTrainer fail on a CPU: it "
                "calls a triton kernel it could not import",
            ),
            (
                "1.16.0",
                f"{_FULL}, the `trl` extra, and {_COMPAT} with transformers 5.24.0, torch 2.15.0",
            ),
        ),
    ),
    "transformers": SupportedRange(
        "transformers",
        oldest="5.5.3",
        newest="5.24.0",
        tested=(("5.10.4", _FULL), ("5.24.0", _COMPAT)),
    ),
    "verl": SupportedRange(
        "verl",
        oldest="0.7.1",
        newest="0.9.1",
        tested=(
            ("0.8.0", f"{_COMPAT}: the plug-in through `VERL_USE_EXTERNAL_MODULES`"),
            ("0.9.1", f"{_FULL}, the `verl` extra: the plug-in's entry point, `ebpo verl smoke`"),
        ),
    ),
    "torch": SupportedRange(
        "torch",
        oldest="2.4.0",
        newest="2.15.0",
        tested=(("2.13.0", f"{_FULL}, {_COMPAT}"), ("2.15.0", f"{_COMPAT}, its newest leg")),
    ),
}

#: ``make test-compat``'s legs (requirements/compat-<leg>.txt) and the release of each package
#: they pin
COMPAT_LEGS: dict[str, dict[str, str]] = {
    "trl-oldest": {"torch": "2.13.0", "trl": "1.10.0", "transformers": "5.24.0"},
    "trl-middle": {"torch": "2.13.0", "trl": "1.14.2", "transformers": "5.24.0"},
    "newest": {"torch": "2.15.0", "trl": "1.16.0", "transformers": "5.24.0"},
    "trl-1.15": {"torch": "2.13.0", "trl": "1.15.0", "transformers": "5.24.0"},
    "verl-0.8": {"torch": "2.13.0", "verl": "0.8.0"},
}


def markdown_table() -> str:
    """README's table of :data:`SUPPORTED` (its "Install" section holds exactly this text)."""
    rows = ["| package | supported | tested (by) |", "|---|---|---|"]
    for supported in SUPPORTED.values():
        tested = "; ".join(f"{version} ({where})" for version, where in supported.tested)
        rows.append(f"| {supported.package} | {supported.span()} | {tested} |")
    return "\n".join(rows) + "\n"
