"""What ``ebpo bench`` compares: a declared list of :class:`Contrast` ``(method, baseline)`` pairs,
each read seed by seed as ``method − baseline`` (:mod:`ebpo.lab.bench.summary`).

The default pairs every method of the matrix with GRPO
(:data:`~ebpo.lab.bench.methods.REFERENCE_METHOD`). A named preset of :data:`CONTRAST_PRESETS`
brings its own methods and contrasts; ``shrinkage`` splits EBPO's gain over GRPO in two
(GRPO-BN keeps GRPO's group-mean baseline and applies EBPO's batch normalisation)::

    EBPO − GRPO = (EBPO − GRPO-BN) + (GRPO-BN − GRPO)
                =   shrinkage      +  normalisation

and adds SPO − GRPO-BN (SPO's per-prompt tracker in place of the group mean, both normalised over
the batch as GRPO-BN). On the command line (``--contrasts``) a contrast is written
``METHOD-BASELINE`` (``ebpo-grpo_bn``), several separated by commas, or a preset's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ebpo.lab.bench.methods import REFERENCE_METHOD

__all__ = [
    "CONTRAST_PRESETS",
    "Contrast",
    "ContrastPreset",
    "contrast_methods",
    "default_contrasts",
    "parse_contrasts",
]


@dataclass(frozen=True)
class Contrast:
    """``method − baseline``, paired seed by seed at the same G; ``label`` names what the
    difference isolates (empty: the difference is its own name)."""

    method: str
    baseline: str
    label: str = ""

    def __post_init__(self) -> None:
        for role in ("method", "baseline"):
            value = getattr(self, role)
            if not isinstance(value, str) or not value:
                raise ValueError(f"contrast {role} must be a method name, got {value!r}")
        if self.method == self.baseline:
            raise ValueError(f"a contrast needs two different methods, got {self.method!r} twice")

    @property
    def name(self) -> str:
        """``"ebpo − grpo_bn"``, with ``" (label)"`` when there is one."""
        return f"{self.method} − {self.baseline}" + (f" ({self.label})" if self.label else "")


@dataclass(frozen=True)
class ContrastPreset:
    """A named comparison: the methods it trains and the contrasts it reads."""

    methods: tuple[str, ...]
    contrasts: tuple[Contrast, ...]
    description: str


CONTRAST_PRESETS = MappingProxyType(
    {
        "shrinkage": ContrastPreset(
            methods=("grpo", "grpo_bn", "ebpo", "spo"),
            contrasts=(
                Contrast("ebpo", "grpo_bn", "shrinkage"),
                Contrast("grpo_bn", "grpo", "normalisation"),
                Contrast("spo", "grpo_bn", "tracker baseline"),
            ),
            description="shrinkage or normalisation? EBPO − GRPO-BN, GRPO-BN − GRPO, SPO − GRPO-BN",
        ),
    }
)


def default_contrasts(methods: Sequence[str]) -> tuple[Contrast, ...]:
    """Every method of ``methods`` against GRPO, in their order (none when GRPO is not among
    them)."""
    if REFERENCE_METHOD not in methods:
        return ()
    return tuple(Contrast(m, REFERENCE_METHOD) for m in methods if m != REFERENCE_METHOD)


def contrast_methods(contrasts: Iterable[Contrast]) -> tuple[str, ...]:
    """The methods the contrasts name, each once, baselines before the methods compared with them."""
    names: dict[str, None] = {}
    for contrast in contrasts:
        names.update(dict.fromkeys((contrast.baseline, contrast.method)))
    return tuple(names)


def parse_contrasts(text: str) -> tuple[tuple[str, ...] | None, tuple[Contrast, ...]]:
    """``--contrasts``: a preset's name -> ``(its methods, its contrasts)``; a comma-separated list
    of ``METHOD-BASELINE`` -> ``(None, contrasts)`` (the methods are the matrix's). ValueError
    naming the argument and the expected form otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            f"--contrasts must be a preset {list(CONTRAST_PRESETS)} or METHOD-BASELINE,...; got {text!r}"
        )
    if text.strip() in CONTRAST_PRESETS:
        preset = CONTRAST_PRESETS[text.strip()]
        return preset.methods, preset.contrasts
    contrasts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        method, dash, baseline = item.partition("-")
        if not dash or "-" in baseline:
            raise ValueError(
                f"--contrasts: expected METHOD-BASELINE (one '-') or a preset "
                f"{list(CONTRAST_PRESETS)}, got {item!r}"
            )
        contrasts.append(Contrast(method.strip(), baseline.strip()))
    if not contrasts:
        raise ValueError(f"--contrasts names no contrast: {text!r}")
    if len(set(contrasts)) != len(contrasts):
        raise ValueError(f"--contrasts has duplicates: {text!r}")
    return None, tuple(contrasts)
