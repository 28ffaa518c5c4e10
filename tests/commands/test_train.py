"""``ebpo train``'s options come from TrainJobConfig's fields (issue #20, item 3): every field is
reachable from the command line and from ``--config job.yaml``, a flag's help is the field's
documentation, today's command lines mean what they meant, the flags given win over the file,
and a bad file is one line and exit code 2. No test here trains, but the last (a tiny run)."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.cli import build_parser, main  # noqa: E402
from ebpo.commands import train  # noqa: E402
from ebpo.lab.train import job  # noqa: E402
from ebpo.lab.train.config import TrainJobConfig  # noqa: E402
from ebpo.utils import structured_input  # noqa: E402
from tests.hostile.harness import CliCase, check_cli_error, ids, run_cli  # noqa: E402

pytestmark = [pytest.mark.trl]

FIELDS = {item.name: item for item in dataclasses.fields(TrainJobConfig)}


def parse(*argv: str) -> TrainJobConfig:
    """The config ``ebpo train *argv`` runs with (the real parser; nothing is run)."""
    return train.job_config(build_parser("train").parse_args(["train", *argv]))


def actions() -> dict[str, list]:
    """Field name -> the ``ebpo train`` options that set it."""
    subparsers = next(a for a in build_parser("train")._actions if a.dest == "command")
    out: dict[str, list] = {}
    for action in subparsers.choices["train"]._actions:
        out.setdefault(action.dest, []).append(action)
    return out


def other_value(item: dataclasses.Field):
    """A value of the field's type that is not its default (written per type, not by the code)."""
    default = (
        item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
    )
    kind = typing.get_type_hints(TrainJobConfig)[item.name]
    if isinstance(kind, types.UnionType):  # X | None: a value of X
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    origin = typing.get_origin(kind) or kind
    if kind is bool:
        return not default
    if kind is int:
        return (default or 0) + 3
    if kind is float:
        return 0.25 if default != 0.25 else 0.5
    if kind is str:
        choices = item.metadata.get("choices", ("some-text",))
        return next(c for c in choices if c != default)
    if origin is tuple:
        return (7, 9) if typing.get_args(kind)[0] is int else ("p", "q")
    if origin is dict:
        return {"key": [1, 2], "nested": {"a": 0.5}}
    raise AssertionError(f"no test value for {item.name}: {kind}")


def as_text(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_field_has_a_flag_that_sets_it(name):
    options = actions().get(name)
    assert options, f"TrainJobConfig.{name} has no ebpo train option (add one, or an exception)"
    value = other_value(FIELDS[name])
    action = options[0]
    argv = [action.option_strings[0]] + ([] if action.nargs == 0 else [as_text(value)])
    assert getattr(parse(*argv), name) == value
    assert dataclasses.replace(TrainJobConfig(), **{name: value}) == parse(*argv)


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_field_can_be_set_from_the_yaml_file(name, tmp_path):
    value = other_value(FIELDS[name])
    yaml_value = list(value) if isinstance(value, tuple) else value
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({name: yaml_value}))  # JSON is YAML
    assert parse("--config", str(path)) == dataclasses.replace(TrainJobConfig(), **{name: value})


def test_a_flags_help_is_its_fields_documentation():
    by_field = actions()
    for name, item in FIELDS.items():
        doc = item.metadata["help"]
        assert doc.strip() and "\n" not in doc, name
        expected = train.FLAG_EXCEPTIONS.get(name, {}).get("help", "{doc}").format(doc=doc)
        for action in by_field[name]:
            assert action.help.replace("%%", "%") == expected, name
    assert by_field["progress"][0].option_strings == ["--quiet"]
    assert by_field["progress"][0].help == "do not show the progress bar and the Pass@1 tables"


def test_help_shows_each_description_and_default(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, item in FIELDS.items():
        assert " ".join(item.metadata["help"].split()) in text, name
    for shown in (
        "--group-size GROUP_SIZE G, completions sampled per prompt (at least 2) (default: 4)",
        "(default: add,sub,mul)",
        "--tiers INT,... tiers of the built-in task",
        "(default: 1,2,3)",
        "(default: 0.0003)",
        "--reward {auto,integer,math}",
        "--config FILE",
    ):
        assert shown in text


#: today's command lines (tests, docs, the hostile suites, accelerate launch) -> the config the
#: parser before issue #20 built for them, written out by hand
TODAY = [
    ([], TrainJobConfig()),
    (
        ["--estimator", "grpo", "--group-size", "8", "--steps", "200", "--seed", "1"]
        + ["--order", "topic"],
        TrainJobConfig(estimator="grpo", group_size=8, steps=200, seed=1, order="topic"),
    ),
    (
        ["--model", "Qwen/Qwen3-0.6B", "--dataset", "math-500"],
        TrainJobConfig(model="Qwen/Qwen3-0.6B", dataset="math-500"),
    ),
    (["--output-dir", "runs/x", "--resume"], TrainJobConfig(output_dir="runs/x", resume=True)),
    (
        ["--model", "smollm2-135m", "--dataset", "arithmetic-word", "--reward", "math"]
        + ["--topics", "add", "--tiers", "1", "--steps", "2", "--prompts-per-step", "2"]
        + ["--max-completion-length", "32", "--eval-problems", "1", "--eval-samples", "8"]
        + ["--learning-rate", "1e-5"],
        TrainJobConfig(
            model="smollm2-135m",
            dataset="arithmetic-word",
            reward="math",
            topics=("add",),
            tiers=(1,),
            steps=2,
            prompts_per_step=2,
            max_completion_length=32,
            eval_problems=1,
            eval_samples=8,
            learning_rate=1e-5,
        ),
    ),
    (
        ["--steps", "3", "--group-size", "2", "--prompts-per-step", "2", "--topics", "add"]
        + ["--tiers", "1", "--eval-problems", "1", "--eval-samples", "8", "--eval-every", "0"]
        + ["--warm-start-steps", "0", "--quiet", "--output-dir", "/tmp/r", "--overwrite"],
        TrainJobConfig(
            steps=3,
            group_size=2,
            prompts_per_step=2,
            topics=("add",),
            tiers=(1,),
            eval_problems=1,
            eval_samples=8,
            eval_every=0,
            warm_start_steps=0,
            progress=False,
            output_dir="/tmp/r",
            overwrite=True,
        ),
    ),
    (
        [
            "--learning-rate=-1e-4",
            "--seed",
            str(2**70),
            "--tiers",
            "1,,2",
            "--topics",
            " add , sub ",
        ],
        TrainJobConfig(learning_rate=-1e-4, seed=2**70, tiers=(1, 2), topics=("add", "sub")),
    ),
    (["--learning-rate", "inf"], TrainJobConfig(learning_rate=float("inf"))),
    (
        [
            "--cache-dir",
            "c",
            "--max-completion-length",
            "64",
            "--output-dir",
            "",
            "--reward",
            "auto",
        ],
        TrainJobConfig(cache_dir="c", max_completion_length=64, output_dir="", reward="auto"),
    ),
    (["--tiers", "0"], TrainJobConfig(tiers=(0,))),
    (["--topics", "add,div"], TrainJobConfig(topics=("add", "div"))),
    (["--group-size", "2", "--steps", "2"], TrainJobConfig(group_size=2, steps=2)),
    (["--warm-start-steps", "1", "--eval-samples", "16"], TrainJobConfig(warm_start_steps=1)),
]


@pytest.mark.parametrize(("argv", "expected"), TODAY, ids=[" ".join(a) or "none" for a, _ in TODAY])
def test_todays_command_lines_mean_what_they_meant(argv, expected):
    assert parse(*argv) == expected


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--resume", "--overwrite"], r"argument --overwrite: not allowed with argument --resume"),
        (["--reward", "exact"], r"argument --reward: invalid choice: 'exact'"),
        (["--steps", "ten"], r"argument --steps: invalid int value: 'ten'"),
        (["--tiers", "1,x"], r"argument --tiers: expected comma-separated integers, got '1,x'"),
        (["--extra", "[1]"], r"argument --extra: expected a JSON object, got a list"),
        (["--estimator-options", "{x"], r"argument --estimator-options: expected a JSON object"),
        (["--resume", "maybe"], r"argument --resume: Truthy value expected"),
        (["--group_size", "2"], r"unrecognized arguments: --group_size"),
    ],
)
def test_bad_flags_are_one_line_before_anything_runs(argv, match, monkeypatch):
    monkeypatch.setattr(job, "run_train_job", _must_not_run)  # imported when run
    result = run_cli(["train", *argv])
    assert result.code == 2 and len(result.err.splitlines()) == 1
    assert re.search(match, result.err), result.err


def _must_not_run(config):
    """In ``run_train_job``'s place: its checks (validate) run, the job itself must not."""
    config.validate()
    raise AssertionError("the job ran")


def test_json_and_bool_values_on_the_command_line():
    config = parse(
        *("--estimator-options", '{"prior": "ema", "half_life": 20}', "--extra", "{}"),
        *("--eval-validation", "--beta", "0", "--cluster-column", "topic"),
    )
    assert config.estimator_options == {"prior": "ema", "half_life": 20}
    assert config.extra == {} and config.eval_validation is True
    assert config.beta == 0.0 and config.cluster_column == "topic"
    assert parse("--resume", "false", "--output-dir", "d").resume is False


JOB_YAML = """\
# a job file: TrainJobConfig field names
estimator: grpo
group_size: 2
steps: 5
learning_rate: 3e-4
warm_start_lr: 1E-3
tiers: [1, 2]
topics: [add]
eval_validation: true
progress: false
beta: null
estimator_options: {prior: ema, half_life: 20}
extra:
  epsilon_high: 0.28
"""


def test_the_yaml_file_and_the_flags_that_override_it(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(JOB_YAML)
    from_file = TrainJobConfig(
        estimator="grpo",
        group_size=2,
        steps=5,
        learning_rate=3e-4,
        warm_start_lr=1e-3,
        tiers=(1, 2),
        topics=("add",),
        eval_validation=True,
        progress=False,
        beta=None,
        estimator_options={"prior": "ema", "half_life": 20},
        extra={"epsilon_high": 0.28},
    )
    assert parse("--config", str(path)) == from_file
    assert isinstance(parse("--config", str(path)).learning_rate, float)  # 3e-4 is no string
    # a flag wins over the file, wherever it stands, also when it gives the field's default
    overridden = parse(
        *("--steps", "7", "--config", str(path), "--group-size", "4", "--tiers", "3"),
        *("--eval-validation", "false", "--extra", '{"beta": 0.1}'),
    )
    assert overridden == dataclasses.replace(
        from_file, steps=7, group_size=4, tiers=(3,), eval_validation=False, extra={"beta": 0.1}
    )
    # the file's resume and a flag's --overwrite meet in validate(): one line, exit 2
    (tmp_path / "resume.yaml").write_text("resume: true\noutput_dir: run\n")
    config = parse("--config", str(tmp_path / "resume.yaml"), "--overwrite")
    with pytest.raises(ValueError, match="resume and overwrite exclude each other"):
        config.validate()


def test_an_empty_or_comment_only_file_is_the_defaults(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing set\n")
    assert parse("--config", str(tmp_path / "empty.yaml"), "--seed", "3") == TrainJobConfig(seed=3)


def _yaml(text: str | bytes):
    def setup(tmp: Path) -> None:
        data = text if isinstance(text, bytes) else text.encode()
        (tmp / "job.yaml").write_bytes(data)

    return setup


C = r"^ebpo train: error: --config 'job\.yaml'"
BAD_FILES = [
    CliCase("missing", ["train", "--config", "job.yaml"], C + r" does not exist$"),
    CliCase(
        "directory",
        ["train", "--config", "job.yaml"],
        C + r" is not a file, expected a YAML file$",
        setup=lambda tmp: (tmp / "job.yaml").mkdir(),
    ),
    CliCase("empty-path", ["train", "--config", ""], r"--config must be a path to a YAML file"),
    CliCase(
        "not-utf8",
        ["train", "--config", "job.yaml"],
        C + r": not UTF-8 text",
        setup=_yaml(b"group_size: \xff\n"),
    ),
    CliCase(
        "syntax",
        ["train", "--config", "job.yaml"],
        C + r": not valid YAML \(.* at line 3, column 1\)$",
        setup=_yaml("group_size: 2\nsteps: [1,\n"),
    ),
    CliCase(
        "duplicate-key",
        ["train", "--config", "job.yaml"],
        C + r": not valid YAML \(key 'steps' appears twice at line 3, column 1\)$",
        setup=_yaml("steps: 2\ngroup_size: 2\nsteps: 3\n"),
    ),
    CliCase(
        "a-list",
        ["train", "--config", "job.yaml"],
        C + r" should hold a mapping of TrainJobConfig field names to values, got a list$",
        setup=_yaml("- group_size: 2\n"),
    ),
    CliCase(
        "a-string",
        ["train", "--config", "job.yaml"],
        C + r" should hold a mapping .*, got a string$",
        setup=_yaml("--group-size 2\n"),
    ),
    CliCase(
        "unknown-key",
        ["train", "--config", "job.yaml"],
        C + r": unknown key 'model_name_or_path'; expected a TrainJobConfig field name",
        setup=_yaml("model_name_or_path: x\n"),
    ),
    CliCase(
        "hyphenated-key",
        ["train", "--config", "job.yaml"],
        C + r": unknown key 'group-size'; .*\(did you mean 'group_size'\?\)$",
        setup=_yaml("group-size: 2\n"),
    ),
    CliCase(
        "number-key",
        ["train", "--config", "job.yaml"],
        C + r": unknown key 1;",
        setup=_yaml("1: 2\n"),
    ),
    CliCase(
        "string-for-int",
        ["train", "--config", "job.yaml"],
        C + r": group_size must be an integer, got '2'$",
        setup=_yaml("group_size: '2'\n"),
    ),
    CliCase(
        "list-for-seed",
        ["train", "--config", "job.yaml"],
        C + r": seed must be an integer, got \[1, 2\]$",
        setup=_yaml("seed: [1, 2]\n"),
    ),
    CliCase(
        "bool-for-int",
        ["train", "--config", "job.yaml"],
        C + r": steps must be an integer, got True$",
        setup=_yaml("steps: true\n"),
    ),
    CliCase(
        "float-for-int",
        ["train", "--config", "job.yaml"],
        C + r": eval_every must be an integer, got 100\.0$",
        setup=_yaml("eval_every: 1e2\n"),
    ),
    CliCase(
        "null-for-int",
        ["train", "--config", "job.yaml"],
        C + r": group_size must be an integer, got None$",
        setup=_yaml("group_size:\n"),
    ),
    CliCase(
        "string-for-float",
        ["train", "--config", "job.yaml"],
        C + r": learning_rate must be a number, got 'fast'$",
        setup=_yaml("learning_rate: fast\n"),
    ),
    CliCase(
        "number-for-string",
        ["train", "--config", "job.yaml"],
        C + r": model must be a string, got 5$",
        setup=_yaml("model: 5\n"),
    ),
    CliCase(
        "text-for-bool",
        ["train", "--config", "job.yaml"],
        C + r": resume must be true or false, got 'sure'$",
        setup=_yaml("resume: sure\n"),
    ),
    CliCase(
        "comma-text-for-tiers",
        ["train", "--config", "job.yaml"],
        C + r": tiers must be a list of integers, got '1,2'$",
        setup=_yaml("tiers: 1,2\n"),
    ),
    CliCase(
        "mixed-topics",
        ["train", "--config", "job.yaml"],
        C + r": topics must be a list of strings, got \['add', 1\]$",
        setup=_yaml("topics: [add, 1]\n"),
    ),
    CliCase(
        "list-for-dict",
        ["train", "--config", "job.yaml"],
        C + r": estimator_options must be a mapping with string keys or null, got \[1\]$",
        setup=_yaml("estimator_options: [1]\n"),
    ),
    CliCase(
        "number-keys-in-extra",
        ["train", "--config", "job.yaml"],
        C + r": extra must be a mapping with string keys, got \{1: 2\}$",
        setup=_yaml("extra: {1: 2}\n"),
    ),
    CliCase(
        "bad-value-from-the-file-is-validated",
        ["train", "--config", "job.yaml"],
        r"^ebpo train: error: group_size must be an integer >= 2, got 1$",
        setup=_yaml("group_size: 1\n"),
    ),
    CliCase(
        "the-flag-is-validated-over-a-good-file",
        ["train", "--config", "job.yaml", "--steps", "0"],
        r"^ebpo train: error: steps must be an integer >= 1, got 0$",
        setup=_yaml("steps: 5\n"),
    ),
]


@pytest.mark.parametrize("case", BAD_FILES, ids=ids(BAD_FILES))
def test_a_bad_config_file_is_one_line_and_exit_2(case, tmp_path, monkeypatch):
    monkeypatch.setattr(job, "run_train_job", _must_not_run)  # imported when run
    check_cli_error(case, tmp_path, monkeypatch)


def test_an_unreadable_config_file_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "job.yaml"
    path.write_text("steps: 2\n")

    def denied(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(structured_input, "open", denied, raising=False)
    with pytest.raises(
        ValueError, match=r"^--config '.*job\.yaml' cannot be read \(Permission denied\)$"
    ):
        train.read_config_file(str(path))


def test_a_tiny_run_from_a_config_file(tmp_path, monkeypatch):
    """The real job with ``--config`` (seconds): the file's options and the flags' both reach it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "job.yaml").write_text(
        "steps: 1\nwarm_start_steps: 2\neval_problems: 1\neval_samples: 8\nprompts_per_step: 2\n"
        "group_size: 2\ntopics: [add]\ntiers: [1]\ntiny_hidden_size: 32\nprogress: false\n"
        f"cache_dir: {tmp_path / 'cache'}\n"
    )
    out = tmp_path / "run"
    code = main(
        ["train", "--config", str(tmp_path / "job.yaml"), "--output-dir", str(out), "--seed", "3"]
    )
    assert code == 0
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "completed" and run["global_step"] == 1
    assert run["config"]["tiny_hidden_size"] == 32 and run["config"]["seed"] == 3
    assert run["config"]["tiers"] == [1] and run["config"]["group_size"] == 2
