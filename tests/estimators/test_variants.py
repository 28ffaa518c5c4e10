"""The one table of named variants (``ebpo.estimators.VARIANTS``), and the layers that read it: the
TRL presets, the CPU bench's methods and the verl plug-in build the same estimator for a name."""

from __future__ import annotations

import pytest

import ebpo
from ebpo.estimators import VARIANTS, available_variants, make_variant, variant_spec
from ebpo.integrations.verl.advantage import REGISTERED, REGISTERED_NAMES, resolve_options
from ebpo.lab.bench.methods import METHODS

CPU = {"output_dir": "unused", "use_cpu": True, "bf16": False, "report_to": "none"}


def options_of(est: ebpo.AdvantageEstimator) -> tuple[str, dict]:
    """``(registered name, the value of every constructor option)`` of a built estimator."""
    return est.name, {key: getattr(est, key) for key in ebpo.estimator_options(est.name)}


# ---------------------------------------------------------------------- the table
@pytest.mark.parametrize("name", available_variants())
def test_every_variant_builds_its_estimator_with_the_declared_options(name):
    estimator, options = variant_spec(name)
    assert options_of(make_variant(name)) == (
        estimator,
        {**ebpo.estimator_options(estimator), **options},
    )


def test_the_table_lists_named_variants_then_every_other_estimator():
    names = available_variants()
    assert names[: len(VARIANTS)] == list(VARIANTS)
    assert len(set(names)) == len(names)
    assert set(names) == set(VARIANTS) | set(ebpo.available_estimators())
    for name, variant in VARIANTS.items():
        assert variant.name == name and variant.description
        assert variant.estimator in ebpo.available_estimators()


def test_the_variants_of_the_paper_and_of_our_experiments():
    assert variant_spec("ebpo") == ("ebpo", {})
    assert variant_spec("ebpo_batch") == (
        "ebpo",
        {"prior": "batch", "prior_mean_from": "group_means"},
    )
    assert variant_spec("ebpo_ema") == ("ebpo", {"prior": "ema", "half_life": 20.0})
    assert variant_spec("ebpo_within") == (
        "ebpo",
        {"within_variance": "within", "tau2_mode": "corrected"},
    )
    assert variant_spec("ebpo_cluster") == ("ebpo", {"per_cluster": True})
    assert variant_spec("reinforce_pp") == ("reinforce_pp_baseline", {})
    # issue #21 item 13: "as verl" whitens over tokens
    assert variant_spec("reinforce_pp_verl") == ("reinforce_pp_baseline", {"whiten": "tokens"})
    # a registered estimator that is not in the table is a variant of itself, without options
    assert "reinforce_pp_baseline" not in VARIANTS
    assert variant_spec("reinforce_pp_baseline") == ("reinforce_pp_baseline", {})


def test_overrides_win_over_the_options_of_the_variant():
    est = make_variant("ebpo_ema", half_life=5)
    assert (est.prior, est.half_life) == ("ema", 5.0)
    est = make_variant("ebpo_batch", prior="history")
    assert (est.prior, est.prior_mean_from) == ("history", "group_means")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['halflife'\]"):
        make_variant("ebpo_ema", halflife=5)


@pytest.mark.parametrize("name", ["nope", "EBPO", 3, None])
def test_an_unknown_name_is_an_error_naming_the_choices(name):
    with pytest.raises(ValueError, match=f"unknown variant {name!r}; expected one of") as info:
        make_variant(name)
    assert all(repr(known) in str(info.value) for known in available_variants())


def test_readers_cannot_change_the_table():
    _, options = variant_spec("ebpo_ema")
    options["half_life"] = 1.0
    assert variant_spec("ebpo_ema")[1]["half_life"] == 20.0
    with pytest.raises(TypeError):
        VARIANTS["ebpo_ema"].options["half_life"] = 1.0
    with pytest.raises(TypeError):
        VARIANTS["mine"] = VARIANTS["ebpo"]


# ---------------------------------------------------------------------- every layer reads it
def trl_estimator(preset: str, **overrides) -> ebpo.AdvantageEstimator:
    """The estimator EBPOTrainer builds for TRL preset ``preset`` (its options, without the
    trainer's NaN masking)."""
    make_config = pytest.importorskip("ebpo.integrations.trl").make_config
    config = make_config(preset, **CPU, **overrides)
    return ebpo.make_estimator(config.advantage_estimator, **config.estimator_options)


@pytest.mark.trl
@pytest.mark.parametrize("name", available_variants())
def test_every_variant_is_a_trl_preset_training_that_variant(name):
    cluster = {"cluster_column": "topic"} if make_variant(name).uses_clusters else {}
    assert options_of(trl_estimator(name, **cluster)) == options_of(make_variant(name))


@pytest.mark.trl
def test_the_papers_trl_presets_train_their_variant():
    presets = pytest.importorskip("ebpo.integrations.trl.paper_methods")
    for preset, (variant, _) in presets.PAPER_METHODS.items():
        assert options_of(trl_estimator(preset)) == options_of(make_variant(variant)), preset


@pytest.mark.trl
def test_every_bench_method_trains_its_variant():
    for name, method in METHODS.items():
        job = method.train_options()
        est = trl_estimator(
            job["estimator"],
            estimator_options=job["estimator_options"],
            cluster_column=job["cluster_column"],
        )
        assert options_of(est) == options_of(make_variant(method.variant)), name


@pytest.mark.trl
def test_trl_preset_and_bench_method_ebpo_within_give_equal_estimators():
    job = METHODS["ebpo_within"].train_options()
    bench = trl_estimator(job["estimator"], estimator_options=job["estimator_options"])
    preset = trl_estimator("ebpo_within")
    assert options_of(bench) == options_of(preset)
    assert (preset.within_variance, preset.tau2_mode) == ("within", "corrected")


def test_verl_registers_variants_of_the_table_and_applies_their_options():
    for name in REGISTERED:
        estimator, options = variant_spec(name)
        assert REGISTERED_NAMES[name] == estimator
        resolved, _ = resolve_options(name, None)
        assert resolved.items() >= options.items()
        # beyond the variant's options: verl's defaults (eps, nan_policy, normalize)
        assert options_of(ebpo.make_estimator(estimator, **resolved)) == options_of(
            make_variant(name, **resolved)
        )
