"""Damaged GGUF model files (issue 53 item 4), each built in the test from a tiny GGUF written
with the ``gguf`` package (tests/evaluation/tiny_gguf.py): refused in one line naming the file and
what is wrong — by the dry run's check (``check_model_here``, config and tokenizer only) and by
the loader every command uses (``load_model_and_tokenizer``), before transformers allocates the
model its header describes; a model that loads with weights its file lacks is refused after
loading. The command line's refusals (exit 2, one line): tests/hostile/test_cli_gguf.py."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("transformers")

from ebpo.evaluation.model_checks import check_gguf_file, check_loaded_weights  # noqa: E402
from ebpo.evaluation.models import (  # noqa: E402
    build_char_tokenizer,
    build_tiny_llama,
    check_model_here,
    load_model_and_tokenizer,
)
from tests.evaluation.tiny_gguf import DROP, patch_count, write_tiny_gguf  # noqa: E402

H = r"GGUF file '.*m\.gguf' does not hold the model its header describes: "
D = r"GGUF file '.*m\.gguf' is damaged: the gguf reader fails on it \(IndexError"

#: (id, how the copy is written, or the count patched in its bytes, the refusal)
DAMAGED = [
    ("block-count-2^31", {"overrides": {"llama.block_count": ("u32", 2**31)}},
     H + r"llama\.block_count is 2147483648 but the file holds the tensors of 2 blocks \(blk\.0 to blk\.1\)$"),
    ("block-count-0", {"overrides": {"llama.block_count": ("u32", 0)}},
     H + r"llama\.block_count must be an integer >= 1, got 0$"),
    ("block-count-removed", {"overrides": {"llama.block_count": DROP}},
     H + r"general\.architecture is 'llama' but llama\.block_count is missing$"),
    ("block-count-1-of-2", {"overrides": {"llama.block_count": ("u32", 1)}},
     H + r"llama\.block_count is 1 but the file holds the tensors of 2 blocks"),
    ("a-block-short-of-tensors", {"layers": 3, "overrides": {"llama.block_count": ("u32", 3)}},
     None),  # control: three full blocks load
    ("architecture-mamba", {"arch": "mamba"},
     H + r"general\.architecture is 'mamba' but mamba\.block_count is missing \(its keys are for 'llama'\)$"),
    ("architecture-qwen2", {"arch": "qwen2"},
     H + r"general\.architecture is 'qwen2' but qwen2\.block_count is missing"),
    ("mamba-keys-over-llama-tensors", {"arch": "mamba", "prefix": "mamba"},
     H + r"tensor 'blk\.0\.attn_q\.weight' is not one a 'mamba' model has$"),
    ("architecture-unknown", {"arch": "nonesuch", "prefix": "nonesuch"},
     H + r"general\.architecture 'nonesuch' is not an architecture the gguf package knows$"),
    ("tokenizer-model-removed", {"overrides": {"tokenizer.ggml.model": DROP}},
     H + r"tokenizer\.ggml\.model is missing: the tokenizer cannot be rebuilt$"),
    ("tokens-key-renamed", {"overrides": {"tokenizer.ggml.tokens": DROP, "tokenizer.ggml.tokenz": ["a"]}},
     H + r"tokenizer\.ggml\.tokens is missing"),
    ("embedding-length-2^20", {"overrides": {"llama.embedding_length": ("u32", 2**20)}},
     H + r"token_embd\.weight is \(42, 8\) but the header says 42 tokens × llama\.embedding_length 1048576$"),
    ("embedding-length-removed", {"overrides": {"llama.embedding_length": DROP}},
     H + r".*but llama\.embedding_length is missing$"),
    ("vocab-size-2^31-1", {"overrides": {"llama.vocab_size": ("u32", 2**31 - 1)}},
     H + r"llama\.vocab_size is 2147483647 but tokenizer\.ggml\.tokens holds 42 tokens$"),
    ("eos-token-outside-the-vocabulary", {"overrides": {"tokenizer.ggml.eos_token_id": ("u32", 4242)}},
     H + r"tokenizer\.ggml\.eos_token_id 4242 is not a token id \(0 to 41\)$"),
    ("feed-forward-length-2^30", {"overrides": {"llama.feed_forward_length": ("u32", 2**30)}},
     H + r"blk\.0\.ffn_up\.weight is \(16, 8\) but the header says llama\.feed_forward_length 1073741824"),
    ("tensor-count-2^40", ("tensor_count", 2**40), D),
    ("kv-count-2^40", ("kv_count", 2**40), D),
    ("key-length-2^40", ("key_length", 2**40), D),
    ("ndims-7", ("ndims", 7), D),
    ("token-count-2^31", ("tokens", 2**31), D),
    ("token-count-2", ("tokens", 2), D),
]  # fmt: skip


def damaged_copy(tmp_path, how) -> str:
    path = tmp_path / "m.gguf"
    if isinstance(how, tuple):
        write_tiny_gguf(path)
        patch_count(path, *how)
    else:
        write_tiny_gguf(path, **how)
    return str(path)


@pytest.mark.parametrize(
    ("how", "match"), [row[1:] for row in DAMAGED], ids=[r[0] for r in DAMAGED]
)
def test_a_damaged_gguf_is_refused_in_one_line_before_it_loads(tmp_path, monkeypatch, how, match):
    path = damaged_copy(tmp_path, how)
    if match is None:
        assert "3 layers" in check_model_here(path)
        model, _ = load_model_and_tokenizer(path, device="cpu", dtype="float32")
        assert model.config.num_hidden_layers == 3
        return
    import transformers

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    for call in (check_model_here, lambda p: load_model_and_tokenizer(p, device="cpu")):
        with pytest.raises(ValueError, match=match) as error:
            call(path)
        assert "\n" not in str(error.value)


def test_a_model_that_loads_with_weights_its_file_lacks_is_refused(tmp_path):
    """qwen2 keys over a Llama's tensors: the header agrees with itself, but Qwen2's q/k/v biases
    are not in the file — transformers would leave them random."""
    path = damaged_copy(tmp_path, {"arch": "qwen2", "prefix": "qwen2"})
    check_gguf_file(path)  # nothing in the header says so
    with pytest.raises(
        ValueError,
        match=r"loads with 6 weights that its file does not hold "
        r"\(they would be random\): model\.layers\.0\.self_attn\.k_proj\.bias, ",
    ):
        load_model_and_tokenizer(path, device="cpu", dtype="float32")


def test_tied_weights_are_not_missing_and_others_are():
    model = build_tiny_llama(build_char_tokenizer(), num_layers=1, hidden_size=16, seed=0)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    check_loaded_weights(model, {"missing_keys": {"lm_head.weight"}}, "tiny")
    with pytest.raises(
        ValueError,
        match=r"model 'tiny' loads with 2 weights .*: "
        r"model\.norm\.weight, lm_head\.weight$",
    ):
        check_loaded_weights(
            model,
            {
                "missing_keys": {"model.norm.weight"},
                "mismatched_keys": [("lm_head.weight", (1,), (2,))],
            },
            "tiny",
        )
    torch.testing.assert_close(model.lm_head.weight, model.model.embed_tokens.weight)
