"""The pieces of ``ebpo.lab.verl_cpu`` that need no Ray: settings checks, the CPU platform, the
sampling seeds, the topic-block test (the loop itself: tests/integrations/verl/test_verl_fit_cpu.py)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from ebpo.lab.verl_cpu.settings import ESTIMATORS, SmokeSettings

pytest.importorskip("verl")
pytestmark = pytest.mark.verl


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"estimators": ("grpo",)},
            r"--estimator must be some of ebpo, jspo_plus_plus, ebpo_topic",
        ),
        ({"estimators": ()}, r"--estimator must be some of"),
        ({"steps": 0}, r"--steps must be a positive integer"),
        ({"group_size": 1}, r"--group-size"),
        ({"save_step": 4}, r"--save-step must be below --steps"),
        ({"train_size": 8}, r"--train-size must hold --steps × --batch-size = 16"),
        ({"agent_loop": "multi"}, r"--agent-loop must be one of single_turn, two_output"),
        ({"agent_loop": "two_output", "trainer": "legacy"}, r"--trainer v1\) only"),
        ({"agent_loop": "two_output", "recipes": ("ebpo",)}, r"not --recipe"),
        ({"agent_loop": "two_output", "batch_size": 1, "train_size": 4}, r"--batch-size >= 2"),
    ],
)
def test_smoke_settings_refuse_bad_values(changes, match):
    with pytest.raises(ValueError, match=match):
        SmokeSettings(work_dir=".", **changes).check()


def test_smoke_settings_defaults_are_valid():
    SmokeSettings(work_dir=".", estimators=tuple(ESTIMATORS)).check()


def test_a_smoke_of_n_steps_has_one_epoch_and_its_checkpoint_two_steps_before_the_end():
    """``ebpo verl smoke --steps N``; the defaults are a smoke of 4 steps."""
    assert SmokeSettings.of_length(4, work_dir=".") == SmokeSettings(work_dir=".")
    longer = SmokeSettings.of_length(40, work_dir=".", batch_size=2)
    assert (longer.steps, longer.save_step, longer.train_size) == (40, 38, 80)
    longer.check()
    SmokeSettings.of_length(3, work_dir=".").check()
    with pytest.raises(ValueError, match=r"^--steps must be an integer >= 3, got 2$"):
        SmokeSettings.of_length(2, work_dir=".")


def test_the_longest_smoke_is_one_epoch_of_the_tasks_distinct_training_problems(tmp_path):
    """``ebpo verl prepare-data`` drops repeated prompts: the smoke's epoch is drawn without
    repeats, and ``--steps`` stops where the task's one-digit training problems run out."""
    from ebpo.lab.cpu_task.task import TOPICS, problem_split
    from ebpo.lab.verl_cpu.shared.assets import distinct, prepare_data
    from ebpo.lab.verl_cpu.shared.task import training_problems

    # reference: every one-digit problem the stream can draw (mul's second operand is 2..9)
    cells = {
        "add": (range(10), range(10)),
        "sub": (range(10), range(10)),
        "mul": (range(10), range(2, 10)),
    }
    every = {
        (topic, max(a, b) if topic == "sub" else a, min(a, b) if topic == "sub" else b)
        for topic in TOPICS
        for a in cells[topic][0]
        for b in cells[topic][1]
    }
    assert training_problems() == sum(problem_split(*p) == "train" for p in every) == 191
    SmokeSettings.of_length(47, work_dir=".").check()
    with pytest.raises(
        ValueError, match=r"^--steps 48 needs 192 distinct prompts .* at most --steps 47$"
    ):
        SmokeSettings.of_length(48, work_dir=".").check()
    assert list(distinct(iter([3, 1, 3, 2, 1]))) == [3, 1, 2]
    import pandas as pd

    written = prepare_data(tmp_path, train_size=188, val_size=6)
    frame = pd.read_parquet(written["train.file"])
    assert len(frame) == 188 == len(set(frame["prompt"].map(str)))


def test_cpu_platform_is_registered_with_gloo_and_no_accelerator():
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from ebpo.lab.verl_cpu.shared.platform import PLATFORM_NAME, PlatformCPU

    assert PlatformRegistry.get(PLATFORM_NAME) is PlatformCPU
    platform = PlatformCPU()
    assert platform.device_name == "cpu"
    assert platform.communication_backend_name() == "gloo"
    assert platform.ray_resource_name() == "CPU" and platform.ray_resource_options(1.0) == {}
    assert not platform.is_platform_available(use_smi_check=True)  # never auto-selected


def test_generation_seed_depends_on_the_step_only():
    from ebpo.lab.verl_cpu.shared.sampling import generation_seed

    seeds = {generation_seed(0, step, validate) for step in range(50) for validate in (0, 1)}
    assert len(seeds) == 100
    assert generation_seed(3, 7, False) == generation_seed(3, 7, False)


def test_contiguous_blocks():
    from ebpo.lab.verl_cpu.checks import contiguous_blocks

    assert contiguous_blocks(["add", "add", "mul", "sub", "sub"])
    assert not contiguous_blocks(["add", "mul", "add"])


def test_cpu_platform_is_put_back_after_the_block(monkeypatch):
    """The smoke switches the driver to the CPU platform; verl code running later in the same
    process (e.g. a dry run's auto_set_device) must see the platform it would have seen."""
    from verl.plugin.platform.platform_manager import get_platform

    from ebpo.lab.verl_cpu.shared.platform import PLATFORM_NAME, PlatformCPU, cpu_platform

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    before = get_platform()
    with cpu_platform() as platform:
        assert isinstance(platform, PlatformCPU) and get_platform() is platform
        assert os.environ["VERL_PLATFORM"] == PLATFORM_NAME
    assert get_platform() is before and "VERL_PLATFORM" not in os.environ


def test_the_curriculum_checks_take_a_step_in_any_row_order_but_not_another_batch(tmp_path):
    """verl's balance_batch reorders a step's rows by length: the checks must pass on any order
    inside a step and fail when a step trained on prompts of another batch."""
    from types import SimpleNamespace

    import pandas as pd

    from ebpo.integrations.verl.curriculum_sampler import CurriculumSampler
    from ebpo.lab.verl_cpu.checks import contiguous_blocks, curriculum_checks
    from ebpo.lab.verl_cpu.shared.results import StepTrace

    topics = ["mul", "add", "sub", "add", "sub", "mul", "add", "mul"] * 2
    frame = pd.DataFrame({"extra_info": [{"id": i, "topic": t} for i, t in enumerate(topics)]})
    frame.to_parquet(tmp_path / "train.parquet")
    files = {"train.shuffle": str(tmp_path / "train.parquet")}
    sampler = CurriculumSampler(frame, order="topic", seed=0)
    order = [str(i) for i in sampler.indices(0)]  # the ids are the row numbers
    assert contiguous_blocks([topics[int(i)] for i in order])
    batches = [order[k * 4 : (k + 1) * 4] for k in range(4)]
    settings = SmokeSettings(work_dir=".", steps=4, save_step=2, batch_size=4)
    run = ESTIMATORS["ebpo_topic"]

    def result(steps):  # each prompt of a step twice (G = 2), in the given order
        return SimpleNamespace(
            trace=[
                StepTrace(0, None, None, None, prompt_ids=s + s, uids=["u"] * 2 * len(s))
                for s in steps
            ]
        )

    reordered = [list(reversed(b)) for b in batches]
    checks = curriculum_checks(settings, run, files, result(reordered), result(reordered[2:]))
    assert [c.ok for c in checks] == [True, True], checks

    swapped = [batches[0][:3] + batches[1][:1], batches[1][1:] + batches[0][3:], *batches[2:]]
    checks = curriculum_checks(settings, run, files, result(swapped), result(batches[:0:-1][:2]))
    assert [c.ok for c in checks] == [False, False], checks


# ---------------------------------------------------------------------- verl's default path (v1)
def test_the_trainer_choice_and_what_v1_runs_instead_of_the_sampler():
    with pytest.raises(ValueError, match="--trainer must be one of v1, legacy"):
        SmokeSettings(work_dir=".", trainer="v2").check()
    topic = ESTIMATORS["ebpo_topic"]
    assert topic.for_trainer("legacy") is topic and topic.curriculum_sampler
    v1 = topic.for_trainer("v1")  # verl's v1 create_rl_sampler ignores custom samplers
    assert v1.order == "topic" and not v1.curriculum_sampler and v1.topic_order
    assert not [o for o in v1.overrides if o.startswith("+data.curriculum.")]
    assert ESTIMATORS["ebpo"].for_trainer("v1") is ESTIMATORS["ebpo"]


def test_request_keys_and_seeds_name_the_sample():
    from ebpo.lab.verl_cpu.shared.sampling import request_seed
    from ebpo.lab.verl_cpu.v1.agent_loop import request_key

    keys = {
        request_key(step, index, session)
        for step in range(3)
        for index in range(20)
        for session in range(5)
    }
    assert len(keys) == 3 * 20 * 5
    seeds = {request_seed(0, f"det-{key}") for key in keys}
    assert len(seeds) == len(keys) and request_seed(0, "det-7") == request_seed(0, "det-7")
    assert request_seed(1, "det-7") != request_seed(0, "det-7")
    with pytest.raises(ValueError, match="session_id"):
        request_key(1, 1, 10_000)


def test_the_two_output_loops_requests_name_the_output_and_its_faults_round_trip():
    from ebpo.lab.verl_cpu.shared.sessions import SessionFault, format_faults, parse_faults
    from ebpo.lab.verl_cpu.v1.agent_loop import request_key
    from ebpo.lab.verl_cpu.v1.two_output import output_request_key

    keys = {
        output_request_key(step, index, session, output)
        for step in range(3)
        for index in range(20)
        for session in range(5)
        for output in range(2)
    }
    assert len(keys) == 3 * 20 * 5 * 2
    assert output_request_key(2, 3, 1, 1) == request_key(2, 3, 1) * 10 + 1
    with pytest.raises(ValueError, match="output"):
        output_request_key(1, 1, 1, 10)
    faults = [SessionFault("empty", "add-1d-3-4", 1), SessionFault("fail", "mul-1d-2-2", 3)]
    text = format_faults(faults)
    assert parse_faults(text) == {("add-1d-3-4", 1): "empty", ("mul-1d-2-2", 3): "fail"}
    assert parse_faults("") == {}
    with pytest.raises(ValueError, match="kind@prompt_id#session"):
        parse_faults("empty@add-1d-3-4")
    with pytest.raises(ValueError, match="kind must be one of empty, fail"):
        parse_faults("hang@add-1d-3-4#1")


def test_the_replay_buffer_orders_rows_by_dataset_row_then_sample():
    from ebpo.lab.verl_cpu.v1.replay import row_order

    keys = ["b_1_0", "a_0_0", "b_0_0", "a_1_0", "a_1_1"]
    indexes = [7, 3, 7, 3, 3]
    sessions = [1, 0, 0, 1, 1]
    assert [keys[i] for i in row_order(keys, indexes, sessions)] == [
        "a_0_0",
        "a_1_0",
        "a_1_1",
        "b_0_0",
        "b_1_0",
    ]


def test_short_groups_column(tmp_path):
    import pandas as pd

    from ebpo.lab.verl_cpu.shared.assets import with_short_groups

    path = tmp_path / "train.parquet"
    pd.DataFrame({"x": range(8)}).to_parquet(path)
    out = with_short_groups({"train.file": str(path), "aime-2024": "v"}, group_size=4, every=4)
    assert out["aime-2024"] == "v" and out["train.file"].endswith(".uneven.parquet")
    assert pd.read_parquet(out["train.file"])["__rollout_n__"].tolist() == [4, 4, 4, 3] * 2
    assert "__rollout_n__" not in pd.read_parquet(path)  # the original is left as it was


def test_the_v1_command_line_composes_and_passes_verls_validation(tmp_path):
    """The overrides of a v1 run, composed with verl's ppo_trainer.yaml and checked by verl's own
    validate_config (what main_ppo.main does before starting Ray): fails if verl's schema moves."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from ebpo.commands.verl.launcher import compose
    from ebpo.lab.verl_cpu.shared.run_spec import RunSpec
    from ebpo.lab.verl_cpu.v1.launch import v1_overrides

    spec = RunSpec(
        model_path=str(tmp_path),
        train_file="t.parquet",
        val_file="v.parquet",
        run_dir=str(tmp_path / "run"),
        steps=4,
        save_freq=2,
        batch_size=4,
        group_size=4,
        lr=1e-3,
        max_prompt_length=24,
        max_response_length=12,
        extra=("algorithm.adv_estimator=ebpo",),
    )
    overrides = v1_overrides(spec, ray_temp_dir="/tmp/x", env={"EXTRA": "1"})
    config = compose([o for o in overrides if not o.startswith("hydra.")])
    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "ebpo_cpu_sync"
    assert config.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.EXTRA == "1"
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER == "0"
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    assert config.trainer.resume_mode == "disable"
    assert config.trainer.default_local_dir == str(tmp_path / "run" / "checkpoints")
    # the smoke's resumed run with verl's defaults: resume_mode left at verl's "auto", the
    # relative checkpoint directory (the run is started in its run directory)
    auto = replace(spec, resume_mode="auto", checkpoint_dir="checkpoints")
    config = compose(
        [o for o in v1_overrides(auto, ray_temp_dir="/x") if not o.startswith("hydra.")]
    )
    assert (config.trainer.resume_mode, config.trainer.default_local_dir) == ("auto", "checkpoints")
    assert auto.checkpoints == str(tmp_path / "run" / "checkpoints")


@pytest.mark.parametrize(
    ("trainer", "resume_mode", "expected_a", "expected_b"),
    [
        # verl's default resume: no resume key (verl's "auto"); v1 relative, legacy absolute
        ("v1", "auto", ("auto", "checkpoints"), ("auto", "checkpoints")),
        ("legacy", "auto", ("auto", "ABS"), ("auto", "ABS")),
        # the variant the smoke ran before: a fresh run, then resume_path to run A's folder
        ("v1", "resume_path", ("disable", "ABS"), ("resume_path", "ABS")),
        ("legacy", "resume_path", ("disable", "ABS"), ("resume_path", "ABS")),
    ],
)
def test_the_smokes_runs_resume_as_asked(tmp_path, trainer, resume_mode, expected_a, expected_b):
    from ebpo.lab.verl_cpu.smoke import run_spec

    settings = SmokeSettings(work_dir=str(tmp_path), trainer=trainer, resume_mode=resume_mode)
    run = ESTIMATORS["ebpo"]
    files = {"train.file": "t.parquet", "aime-2024": "v.parquet"}
    a = run_spec(settings, run, files, "/m", tmp_path / "full")
    checkpoint = str(tmp_path / "full" / "checkpoints" / "global_step_2")
    b = (
        run_spec(settings, run, files, "/m", tmp_path / "resumed")
        if resume_mode == "auto"
        else run_spec(settings, run, files, "/m", tmp_path / "resumed", checkpoint)
    )
    for spec, (mode, directory) in ((a, expected_a), (b, expected_b)):
        overrides = spec.overrides()
        keys = dict(o.split("=", 1) for o in overrides)
        assert keys.get("trainer.resume_mode", "auto") == mode
        if mode == "auto":
            assert "trainer.resume_mode" not in keys  # verl's own default, not ours
        expected_dir = str(Path(spec.run_dir) / "checkpoints") if directory == "ABS" else directory
        assert keys["trainer.default_local_dir"] == expected_dir
        assert spec.checkpoints == str(Path(spec.run_dir) / "checkpoints")
        assert keys.get("trainer.resume_from_path") == (
            checkpoint if mode == "resume_path" else None
        )
        # the rollout dump, then the estimator's keys: applied after the trainer's own
        assert spec.extra == (
            f"trainer.rollout_data_dir={Path(spec.run_dir) / 'rollouts'}",
            "algorithm.adv_estimator=ebpo",
        )


def test_a_run_spec_refuses_a_resume_mode_it_cannot_run(tmp_path):
    from ebpo.lab.verl_cpu.shared.run_spec import RunSpec

    sizes = dict(steps=4, save_freq=2, batch_size=4, group_size=4, lr=1e-3)
    files = dict(model_path="/m", train_file="t", val_file="v", run_dir=str(tmp_path))
    lengths = dict(max_prompt_length=24, max_response_length=12)
    with pytest.raises(ValueError, match="resume_mode must be one of disable, auto, resume_path"):
        RunSpec(**files, **sizes, **lengths, resume_mode="latest")
    with pytest.raises(ValueError, match="resume_from is given exactly when"):
        RunSpec(**files, **sizes, **lengths, resume_mode="resume_path")
    with pytest.raises(ValueError, match="resume_from is given exactly when"):
        RunSpec(**files, **sizes, **lengths, resume_from=str(tmp_path / "global_step_2"))
    with pytest.raises(ValueError, match="--resume-mode must be one of auto, resume_path"):
        SmokeSettings(work_dir=".", resume_mode="disable").check()


def test_the_resumed_runs_folder_holds_what_the_stopped_run_had_saved(tmp_path):
    """``resume_mode=auto``: run B's folder is run A's as it was right after the step-2
    checkpoint — that folder and verl's tracker file naming step 2 — and nothing else."""
    from ebpo.lab.verl_cpu.smoke import new_run_dir

    saved = tmp_path / "full" / "checkpoints" / "global_step_2"
    (saved / "actor").mkdir(parents=True)
    (saved / "actor" / "weights.pt").write_bytes(b"w")
    (saved.parent / "global_step_4").mkdir()
    resumed = tmp_path / "resumed"
    (resumed / "old").mkdir(parents=True)  # a leftover of an earlier smoke
    new_run_dir(resumed, interrupted_at=saved)
    assert sorted(str(p.relative_to(resumed)) for p in resumed.rglob("*")) == [
        "checkpoints",
        "checkpoints/global_step_2",
        "checkpoints/global_step_2/actor",
        "checkpoints/global_step_2/actor/weights.pt",
        "checkpoints/latest_checkpointed_iteration.txt",
    ]
    assert (resumed / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (saved / "actor" / "weights.pt").read_bytes() == b"w"  # run A's is left as it was
    new_run_dir(resumed)
    assert list(resumed.iterdir()) == []


def test_the_smoke_says_before_a_first_warm_start_and_not_after(tmp_path, monkeypatch):
    """The tiny model's warm start takes minutes on a fresh machine: the smoke announces it when
    the cache does not hold it (and shows its progress bar), and is quiet once it does."""
    import ebpo.lab.verl_cpu.smoke as smoke
    from ebpo.lab.cpu_task.policy import warm_start_path

    built = []

    def build_model(out_dir, *, cache, warm_steps, seed, progress):
        built.append(progress)
        return str(out_dir)

    monkeypatch.setattr(smoke.assets, "prepare_data", lambda *args, **kwargs: {})
    monkeypatch.setattr(smoke.assets, "build_model", build_model)
    settings = SmokeSettings(
        work_dir=str(tmp_path), cache=str(tmp_path / "cache"), trainer="legacy"
    )
    lines: list[str] = []
    smoke.prepare(settings, tmp_path, lines.append)
    assert len(lines) == 1 and "warm start (800 supervised steps; about 4 min" in lines[0]
    assert str(tmp_path / "cache") in lines[0] and built == [True]
    # the cache entry build_model would load: its key is the recipe of the smoke's settings
    recipe = smoke.assets._warm_start_recipe(64, 800, 0)
    entry = warm_start_path(tmp_path / "cache", recipe)
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    lines.clear()
    smoke.prepare(settings, tmp_path, lines.append)
    assert lines == [] and built == [True, False]
    other_seed = SmokeSettings(work_dir=str(tmp_path), cache=str(tmp_path / "cache"), seed=1)
    assert not smoke.assets.model_is_cached(tmp_path / "cache", seed=other_seed.seed)


def test_the_default_path_check_fails_on_an_overridden_fit_or_the_legacy_trainer(tmp_path):
    from ebpo.lab.verl_cpu.checks import v1_path_checks
    from ebpo.lab.verl_cpu.shared.results import MANIFEST_FILE
    from ebpo.lab.verl_cpu.v1.trainer import VERL_METHODS
    from ebpo.utils.files import write_json

    run = ESTIMATORS["ebpo"]
    manifest = {
        "task_runner": {"class": "TaskRunnerV1", "file": "/x/verl/trainer/main_ppo.py"},
        "trainer_class": "ebpo.lab.verl_cpu.v1.trainer.CPUPPOTrainerSync",
        "trainer_bases": ["verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync"],
        "trainer_mode": "sync",
        "methods": {
            name: f"verl.trainer.ppo.v1.trainer_base.PPOTrainer.{name}" for name in VERL_METHODS
        },
        "transfer_queue_controller": True,
        "use_v1": True,
    }
    write_json(tmp_path / MANIFEST_FILE, manifest)
    assert v1_path_checks(run, None, str(tmp_path))[0].ok
    manifest["methods"]["fit"] = "ebpo.lab.verl_cpu.v1.trainer.CPUPPOTrainerSync.fit"
    write_json(tmp_path / MANIFEST_FILE, manifest)
    check = v1_path_checks(run, None, str(tmp_path))[0]
    assert not check.ok and "NOT" in check.detail and "fit" in check.detail
    (tmp_path / MANIFEST_FILE).unlink()  # the legacy trainer writes none
    assert not v1_path_checks(run, None, str(tmp_path))[0].ok


def test_a_failing_main_ppo_run_ends_and_leaves_nothing(tmp_path):
    """``main_ppo`` refusing its config: the launch reports the exit code and the console, and no
    process of it is left."""
    from ebpo.lab.verl_cpu.v1.launch import Listener, run_main_ppo

    launch = run_main_ppo(
        ["trainer.no_such_key=1"], cwd=str(tmp_path), console=str(tmp_path / "c.log"), timeout=300
    )
    assert launch.returncode != 0 and not launch.timed_out and not launch.leftovers
    assert "no_such_key" in (tmp_path / "c.log").read_text()
    launch.listeners = {Listener("raylet", "192.0.2.2", 1), Listener("gcs", "127.0.0.1", 2)}
    assert launch.foreign_listeners == [Listener("raylet", "192.0.2.2", 1)]


def test_the_resume_source_check_fails_when_ebpo_and_verl_name_different_folders(tmp_path):
    """The console lines of verl's ``_load_checkpoint`` and of ebpo's callback must both name the
    resumed run's own ``global_step_2`` (``resume_mode=auto``)."""
    from ebpo.lab.verl_cpu.checks import resume_source_check
    from ebpo.lab.verl_cpu.shared.results import RunResult, StepTrace

    settings = SmokeSettings(work_dir=str(tmp_path))
    own = tmp_path / "resumed" / "checkpoints" / "global_step_2"
    other = tmp_path / "full" / "checkpoints" / "global_step_2"

    def runs(verl_folder: Path, ebpo_folder: Path) -> tuple[RunResult, RunResult]:
        console = tmp_path / "console.log"
        console.write_text(
            f"(TaskRunnerV1 pid=1) INFO: Resuming from {verl_folder}, setting global step to 2\n"
            f"(TaskRunnerV1 pid=1) WARNING: ebpo: restored estimator state from {ebpo_folder} "
            "(1 estimators)\n"
        )
        trace = [StepTrace(step, None, None, None, [], []) for step in (3, 4)]
        a = RunResult(str(tmp_path / "full"), [], {}, {}, 0.0)
        b = RunResult(str(tmp_path / "resumed"), trace, {}, {}, 0.0, console=str(console))
        return a, b

    assert resume_source_check(settings, ESTIMATORS["ebpo"], *runs(own, own)).ok
    assert not resume_source_check(settings, ESTIMATORS["ebpo"], *runs(own, other)).ok
    assert not resume_source_check(settings, ESTIMATORS["ebpo"], *runs(other, other)).ok
    with_path = SmokeSettings(work_dir=str(tmp_path), resume_mode="resume_path")
    assert resume_source_check(with_path, ESTIMATORS["ebpo"], *runs(other, other)).ok
