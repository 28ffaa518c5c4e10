"""One word for the user's choice: an estimator name (``ebpo.available_estimators()``), a class or
a named method of one (``ebpo_batch``: ``ebpo`` with options), and the layers that read it: the
TRL presets, the CPU bench's methods and the verl plug-in build the same estimator for a name."""

from __future__ import annotations

import pytest

import ebpo
from ebpo.estimators import available_estimators, estimator_spec, make_estimator
from ebpo.integrations.verl.advantage import VERL_OWN_NAMES, plugin_names, resolve_options
from ebpo.lab.bench.methods import METHODS

CPU = {"output_dir": "unused", "use_cpu": True, "bf16": False, "report_to": "none"}


def options_of(est: ebpo.AdvantageEstimator) -> tuple[str, dict]:
    """``(registered name, the value of every constructor option)`` of a built estimator."""
    return est.name, {key: getattr(est, key) for key in ebpo.estimator_options(est.name)}


# ---------------------------------------------------------------------- the names
@pytest.mark.parametrize("name", available_estimators())
def test_every_name_builds_its_class_with_the_options_it_fixes(name):
    estimator, options = estimator_spec(name)
    assert options_of(make_estimator(name)) == (
        estimator,
        {**ebpo.estimator_options(estimator), **options},
    )
    assert ebpo.estimator_options(name) == {**ebpo.estimator_options(estimator), **options}


def test_the_named_methods_of_the_paper_and_of_our_experiments():
    assert estimator_spec("ebpo") == ("ebpo", {})
    assert estimator_spec("ebpo_batch") == (
        "ebpo",
        {"prior": "batch", "prior_mean_from": "group_means"},
    )
    assert estimator_spec("ebpo_ema") == ("ebpo", {"prior": "ema", "half_life": 20.0})
    assert estimator_spec("ebpo_within") == (
        "ebpo",
        {"within_variance": "within", "tau2_mode": "corrected"},
    )
    assert estimator_spec("ebpo_cluster") == ("ebpo", {"per_cluster": True})
    assert estimator_spec("ebpo_center") == ("ebpo", {"normalize": "center"})
    assert estimator_spec("ebpo_none") == ("ebpo", {"normalize": "none"})
    assert estimator_spec("reinforce_pp") == ("reinforce_pp_baseline", {})
    # issue #21 item 13: "as verl" whitens over tokens
    assert estimator_spec("reinforce_pp_verl") == ("reinforce_pp_baseline", {"whiten": "tokens"})
    assert estimator_spec("reinforce_pp_baseline") == ("reinforce_pp_baseline", {})
    # a named method's state is its class's: a state file names the class
    assert make_estimator("ebpo_batch").state_dict()["estimator"] == "ebpo"


def test_options_given_win_over_the_options_the_name_fixes():
    est = make_estimator("ebpo_ema", half_life=5)
    assert (est.prior, est.half_life) == ("ema", 5.0)
    est = make_estimator("ebpo_batch", prior="history")
    assert (est.prior, est.prior_mean_from) == ("history", "group_means")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['halflife'\]"):
        make_estimator("ebpo_ema", halflife=5)


@pytest.mark.parametrize("name", ["nope", "EBPO", 3, None])
def test_an_unknown_name_is_an_error_naming_the_choices(name):
    with pytest.raises(ValueError, match=f"unknown estimator {name!r}; expected one of") as info:
        make_estimator(name)
    assert all(repr(known) in str(info.value) for known in available_estimators())


def test_readers_cannot_change_the_options_of_a_name():
    _, options = estimator_spec("ebpo_ema")
    options["half_life"] = 1.0
    assert estimator_spec("ebpo_ema")[1]["half_life"] == 20.0


def test_a_named_method_takes_options_its_class_has_on_a_class_with_a_name():
    with pytest.raises(ValueError, match=r"EBPO has no option\(s\) \['halflife'\]"):
        ebpo.register_estimator("ebpo_typo", {"halflife": 3})(ebpo.EBPO)
    nameless = type("Nameless", (ebpo.EBPO,), {})
    with pytest.raises(ValueError, match="under a name of its own first"):
        ebpo.register_estimator("nameless_batch", {"prior": "batch"})(nameless)
    with pytest.raises(ValueError, match="already registered"):
        ebpo.register_estimator("ebpo_batch", {"prior": "ema"})(ebpo.EBPO)
    assert "ebpo_typo" not in available_estimators()
    assert "nameless_batch" not in available_estimators()


# ---------------------------------------------------------------------- every layer reads it
def trl_estimator(preset: str, **overrides) -> ebpo.AdvantageEstimator:
    """The estimator EBPOTrainer builds for TRL preset ``preset`` (its options, without the
    trainer's NaN masking)."""
    make_config = pytest.importorskip("ebpo.integrations.trl").make_config
    config = make_config(preset, **CPU, **overrides)
    return ebpo.make_estimator(config.advantage_estimator, **config.estimator_options)


@pytest.mark.trl
@pytest.mark.parametrize("name", available_estimators())
def test_every_name_is_a_trl_preset_training_that_estimator(name):
    cluster = {"cluster_column": "topic"} if make_estimator(name).uses_clusters else {}
    assert options_of(trl_estimator(name, **cluster)) == options_of(make_estimator(name))


@pytest.mark.trl
def test_the_papers_trl_presets_train_their_estimator():
    presets = pytest.importorskip("ebpo.integrations.trl.paper_methods")
    for preset, (name, _) in presets.PAPER_METHODS.items():
        assert options_of(trl_estimator(preset)) == options_of(make_estimator(name)), preset


@pytest.mark.trl
def test_every_bench_method_trains_its_estimator():
    for name, method in METHODS.items():
        job = method.train_options()
        est = trl_estimator(
            job["estimator"],
            estimator_options=job["estimator_options"],
            cluster_column=job["cluster_column"],
        )
        assert options_of(est) == options_of(make_estimator(method.estimator)), name


@pytest.mark.trl
def test_trl_preset_and_bench_method_ebpo_within_give_equal_estimators():
    job = METHODS["ebpo_within"].train_options()
    bench = trl_estimator(job["estimator"], estimator_options=job["estimator_options"])
    preset = trl_estimator("ebpo_within")
    assert options_of(bench) == options_of(preset)
    assert (preset.within_variance, preset.tau2_mode) == ("within", "corrected")


def test_verl_registers_every_name_but_verls_own_and_applies_its_options():
    assert set(plugin_names()) == set(available_estimators()) - VERL_OWN_NAMES
    assert {"ebpo", "ebpo_batch", "ebpo_ema", "jspo_plus_plus", "dr_grpo"} <= set(plugin_names())
    for name, estimator in plugin_names().items():
        _, options = estimator_spec(name)
        assert estimator == estimator_spec(name)[0]
        resolved, _ = resolve_options(name, None)
        assert resolved.items() >= options.items()
        # beyond the name's options: verl's defaults (eps, nan_policy, normalize)
        assert options_of(ebpo.make_estimator(estimator, **resolved)) == options_of(
            make_estimator(name, **resolved)
        )
