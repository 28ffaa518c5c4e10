"""The one place the supported framework releases are kept
(:mod:`ebpo.integrations.supported_versions`), and everything that states them: README's table,
the compat legs' requirement files, the extras' pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ebpo.integrations.supported_versions import (
    COMPAT_LEGS,
    SUPPORTED,
    SupportedRange,
    markdown_table,
    release_tuple,
)

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)$")


def pins(path: Path) -> dict[str, str]:
    """``{package: version}`` of the ``package==version`` lines of a requirements file."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return {m[1].lower(): m[2] for line in lines if (m := PIN.match(line))}


def test_readme_install_section_holds_the_table_of_the_supported_releases() -> None:
    readme = (REPO / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert markdown_table() in install


@pytest.mark.parametrize("leg", sorted(COMPAT_LEGS))
def test_each_compat_leg_pins_the_releases_named_for_it(leg: str) -> None:
    assert pins(REPO / "requirements" / f"compat-{leg}.txt") == COMPAT_LEGS[leg]


def test_every_requirements_file_of_a_compat_leg_is_a_leg() -> None:
    files = {p.name for p in (REPO / "requirements").glob("compat-*.txt")}
    assert files == {f"compat-{leg}.txt" for leg in COMPAT_LEGS}


def test_the_legs_run_the_ends_of_the_trl_range_and_the_newest_transformers_and_torch() -> None:
    trl = SUPPORTED["trl"]
    legs = COMPAT_LEGS.values()
    assert {leg.get("trl") for leg in legs} >= {trl.oldest, trl.newest}
    newest = [leg for leg in legs if leg.get("trl") == trl.newest]
    assert any(leg["transformers"] == SUPPORTED["transformers"].newest for leg in newest)
    assert any(leg["torch"] == SUPPORTED["torch"].newest for leg in newest)
    for leg in legs:  # every leg runs supported releases, each one stated as tested
        for package, version in leg.items():
            assert SUPPORTED[package].contains(version), (package, version)
            assert version in dict(SUPPORTED[package].tested), (package, version)


def test_the_extras_pin_the_newest_supported_trl_and_verl() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert f"trl=={SUPPORTED['trl'].newest}" in extras["trl"]
    assert f"verl[verl-core]=={SUPPORTED['verl'].newest}" in extras["verl"]


def test_the_extras_cap_no_framework_below_the_newest_supported_transformers() -> None:
    # a cap of our own would refuse a user's transformers that the TRL range accepts
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for name in ("trl", "verl"):
        for requirement in extras[name]:
            assert not re.match(r"transformers.*<", requirement), (name, requirement)


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("1.9.0", False),
        ("1.9.9", False),
        ("1.10.0", True),
        ("1.14.2", True),
        ("1.16.0", True),
        ("1.16.3", True),  # a patch release of the newest minor series
        ("1.16.0.dev0", True),
        ("1.17.0", False),
        ("2.0.0", False),
    ],
)
def test_a_range_holds_its_ends_and_the_newest_minor_series(version: str, inside: bool) -> None:
    assert SupportedRange("trl", "1.10.0", "1.16.0", ()).contains(version) is inside


@pytest.mark.parametrize(
    ("version", "release"),
    [("1.14.2", (1, 14, 2)), ("0.8", (0, 8, 0)), ("2.13.0+cpu", (2, 13, 0)), ("5", (5, 0, 0))],
)
def test_release_tuple_reads_the_leading_numbers(version: str, release: tuple[int, ...]) -> None:
    assert release_tuple(version) == release


def test_release_tuple_refuses_a_version_without_a_number() -> None:
    with pytest.raises(ValueError, match=r"version: expected a release number .* got 'dev'"):
        release_tuple("dev")
