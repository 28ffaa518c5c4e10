"""Hostile inputs to the estimator API (issue #11 items 4 and 7, issue #10 item 8, issue #21
items 11 and 12: meta / sparse / nested / quantized tensors, token counts, states whose next update
would overflow; concurrency is in test_estimator_threads.py).

One table, :data:`CASES`, of calls that must fail with a ValueError whose message names the
argument and what was expected, and must leave the estimator's ``state_dict()`` unchanged; then
the hostile inputs that are legitimate (:data:`ACCEPTED`) with the result they must give; then
recovery: after any rejected batch the estimator continues exactly as if it had never seen it.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import ebpo
from ebpo.estimators.statistics import RunningMoments
from tests.hostile.harness import ApiCase, check_api_error, ids

NAMES = ebpo.available_estimators()
GOOD = ([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2])
GOOD_CLUSTERS = ["a", "a", "b", "b", "a", "a"]
GOOD_TOKENS = [3, 1, 4, 1, 5, 9]


def fed(name: str, **options: Any) -> ebpo.AdvantageEstimator:
    """An estimator that has already seen one good batch (so that its state is not trivial)."""
    est = ebpo.make_estimator(name, **options)
    est(*GOOD, clusters=GOOD_CLUSTERS, token_counts=GOOD_TOKENS)
    return est


#: case id -> the estimator (or other stateful object) whose state must not change
TARGETS: dict[str, list[Any]] = {}
CASES: list[ApiCase] = []


def case(
    id: str,
    target: Any,
    call: Callable[[], Any],
    match: str,
    error: type[BaseException] = ValueError,
) -> None:
    CASES.append(ApiCase(id, call, error, match))
    TARGETS[id] = [] if target is None else [target]


def batch_case(
    name: str,
    label: str,
    match: str,
    *args: Any,
    options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """``est(*args, **kwargs)`` on a fed estimator ``name`` must raise ValueError matching ``match``."""
    est = fed(name, **(options or {}))
    case(f"{name}-{label}", est, lambda: est(*args, **kwargs), match)


# ---------------------------------------------------------------------- bad batches, every estimator
F16 = torch.tensor([60000.0, -60000.0, -60000.0, -60000.0], dtype=torch.float16)
for name in NAMES:
    bb = (
        name == "ebpo_bb"
    )  # rewards must lie in [0, 1]: out-of-range values are refused for that first
    # issue #11 item 4: overflow must not give inf/NaN, nor reach a running prior
    batch_case(
        name,
        "overflow-1e200",
        r"\[0, 1\]"
        if bb
        else r"rewards are too large: the reward variance of group 0 overflows float64",
        [0, 1e200, 0, 1e200],
        [0, 0, 1, 1],
    )
    batch_case(
        name,
        "overflow-1e308-mean",
        r"\[0, 1\]" if bb else r"reward mean of group 'g' overflows",
        [1.7e308, 1.7e308],
        ["g", "g"],
    )
    batch_case(
        name,
        "huge-int-reward",
        r"rewards must be finite real numbers.*too large",
        [10**400, 0],
        [0, 0],
    )
    # NaN / inf
    batch_case(
        name,
        "nan-raise",
        r"rewards contains NaN on unmasked rows \(first: \[1\]\).*nan_policy='mask'",
        [1.0, math.nan],
        [0, 0],
    )
    batch_case(
        name,
        "inf",
        r"rewards must be finite; got inf on unmasked rows \(first: \[1\]\)",
        [1.0, math.inf],
        [0, 0],
    )
    batch_case(
        name,
        "minus-inf-nan-mask",
        r"rewards must be finite; got inf",
        [0.0, -math.inf, 1.0],
        [0, 0, 1],
        options={"nan_policy": "mask"},
    )
    # shapes and lengths
    batch_case(name, "empty", r"rewards is empty", [], [])
    batch_case(name, "ids-shorter", r"group_ids has 1 entries but rewards has 2", [1.0, 0.0], [0])
    batch_case(name, "ids-empty", r"group_ids has 0 entries but rewards has 2", [1.0, 0.0], [])
    batch_case(
        name,
        "mask-longer",
        r"mask has 3 entries but rewards has 2",
        [1.0, 0.0],
        [0, 0],
        mask=[True] * 3,
    )
    batch_case(
        name,
        "clusters-shorter",
        r"clusters has 1 entries but rewards has 2",
        [1.0, 0.0],
        [0, 0],
        clusters=["a"],
    )
    batch_case(name, "rewards-0d", r"rewards must be 1-D .*got shape \(\)", torch.tensor(1.0), [0])
    batch_case(
        name, "rewards-2d", r"rewards must be 1-D .*got shape \(1, 2\)", [[1.0, 0.0]], [0, 0]
    )
    batch_case(name, "ids-0d", r"group_ids must be 1-D .*got shape \(\)", [1.0], np.array(0))
    batch_case(
        name,
        "ids-2d",
        r"group_ids must be 1-D .*got shape \(2, 1\)",
        [1.0, 0.0],
        np.zeros((2, 1), dtype=int),
    )
    batch_case(
        name,
        "mask-2d",
        r"mask must be 1-D .*got shape \(1, 2\)",
        [1.0, 0.0],
        [0, 0],
        mask=torch.ones(1, 2, dtype=torch.bool),
    )
    batch_case(name, "ids-no-length", r"group_ids must be a 1-D sequence .*got int", [1.0], 7)
    # reward types numpy/torch would convert silently
    batch_case(
        name,
        "complex-list",
        r"rewards must be real numbers, got complex values",
        [1 + 1j, 0.0],
        [0, 0],
    )
    batch_case(
        name,
        "complex-tensor",
        r"rewards must be real numbers, got a torch.complex64 tensor",
        torch.tensor([1 + 1j, 0.0]),
        [0, 0],
    )
    batch_case(
        name,
        "string-rewards",
        r"rewards must be numbers, got <U1 values such as \['1'\]",
        ["1", "0"],
        [0, 0],
    )
    batch_case(
        name,
        "none-reward",
        r"rewards must be real numbers, got NoneType None at row 1",
        [1.0, None],
        [0, 0],
    )
    batch_case(
        name,
        "mixed-string-reward",
        r"rewards must be numbers, got <U32 values such as \[.1.0.\]",
        [1.0, "1"],
        [0, 0],
    )
    batch_case(
        name,
        "object-none-reward",
        r"rewards must be real numbers, got NoneType None at row 0",
        np.array([None, 1.0], dtype=object),
        [0, 0],
    )
    batch_case(
        name,
        "dict-rewards",
        r"rewards must be a 1-D tensor, array or list of numbers, got a dict",
        {0: 1.0},
        [0],
    )
    batch_case(
        name,
        "datetime-rewards",
        r"rewards must be numbers, got datetime64",
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        [0],
    )
    # group ids
    batch_case(name, "ids-set", r"group_ids must be a 1-D sequence .*got a set", [1.0, 0.0], {0, 1})
    batch_case(
        name,
        "ids-dict",
        r"group_ids must be a 1-D sequence .*got a dict",
        [1.0, 0.0],
        {"a": 0, "b": 1},
    )
    batch_case(
        name, "ids-string", r"group_ids must be a 1-D sequence .*got a str", [1.0, 0.0], "ab"
    )
    batch_case(
        name,
        "ids-floats",
        r"group_ids must hold integers or hashable ids, got floats",
        [1.0, 0.0],
        [0.5, 1.5],
    )
    batch_case(
        name,
        "ids-float-tensor",
        r"group_ids must hold integers .*torch.float32 tensor",
        [1.0, 0.0],
        torch.tensor([0.0, 1.0]),
    )
    batch_case(name, "ids-unhashable", r"group_ids must be hashable", [1.0, 0.0], [[0], [1]])
    # masks
    batch_case(
        name,
        "mask-uint16-2",
        r"mask must be boolean .*0/1 integers, got values \[2\]",
        [1.0, 0.0],
        [0, 0],
        mask=np.array([1, 2], dtype=np.uint16),
    )
    batch_case(
        name,
        "mask-uint64-big",
        r"mask must be boolean .*got values \[18446744073709551615\]",
        [1.0, 0.0],
        [0, 0],
        mask=np.array([1, 2**64 - 1], dtype=np.uint64),
    )
    batch_case(
        name,
        "mask-torch-uint16-3",
        r"mask must be boolean .*got values \[3\]",
        [1.0, 0.0],
        [0, 0],
        mask=torch.tensor([3, 1], dtype=torch.uint16),
    )
    batch_case(
        name,
        "mask-object",
        r"mask must be boolean .*got dtype object",
        [1.0, 0.0],
        [0, 0],
        mask=np.array([True, None], dtype=object),
    )
    batch_case(
        name,
        "mask-float",
        r"mask must be boolean .*got dtype float64",
        [1.0, 0.0],
        [0, 0],
        mask=[0.5, 1.0],
    )
    batch_case(
        name,
        "mask-float-tensor",
        r"mask must be boolean .*got dtype torch.float32",
        [1.0, 0.0],
        [0, 0],
        mask=torch.tensor([1.0, 0.0]),
    )
    batch_case(
        name,
        "mask-strings",
        r"mask must be boolean .*got dtype <U",
        [1.0, 0.0],
        [0, 0],
        mask=["yes", "no"],
    )
    batch_case(
        name,
        "mask-set",
        r"mask must be a 1-D sequence .*got a set",
        [1.0, 0.0],
        [0, 0],
        mask={True, False},
    )
    # clusters: reported as clusters, not group_ids
    batch_case(
        name,
        "clusters-floats",
        r"^clusters must hold integers or hashable ids, got floats",
        [1.0, 0.0],
        [0, 0],
        clusters=[0.5, 0.5],
    )
    batch_case(
        name,
        "clusters-unhashable",
        r"^clusters must be hashable",
        [1.0, 0.0],
        [0, 0],
        clusters=[["a"], ["a"]],
    )
    batch_case(
        name,
        "clusters-bytes",
        r"clusters labels must be strings, integers.*got bytes b'x'",
        [1.0, 0.0],
        [0, 0],
        clusters=[b"x", b"x"],
    )
    batch_case(
        name,
        "clusters-nan-label",
        r"clusters labels must be .*got float nan",
        [1.0, 0.0],
        [0, 0],
        clusters=np.array([math.nan, math.nan], dtype=object),
    )
    batch_case(
        name,
        "clusters-not-constant",
        r"clusters must be constant within a group; group #0 has rows labelled 'a' and 'b'",
        [1.0, 0.0],
        [0, 0],
        clusters=["a", "b"],
    )
    batch_case(
        name,
        "clusters-set",
        r"clusters must be a 1-D sequence .*got a set",
        [1.0, 0.0],
        [0, 0],
        clusters={"a", "b"},
    )
    # state dicts any estimator must refuse
    for label, state, match in [
        ("state-none", None, r"state must be a dict from state_dict\(\), got NoneType"),
        ("state-string", "ebpo", r"state must be a dict from state_dict\(\), got str"),
        (
            "state-other-estimator",
            {"estimator": "nope"},
            r"state belongs to estimator 'nope', cannot load it into " + repr(name),
        ),
        ("state-no-owner", {}, r"state belongs to estimator None"),
    ]:
        est = fed(name)
        case(f"{name}-{label}", est, lambda est=est, state=state: est.load_state_dict(state), match)

# issue #21 item 11: tensors without plain values raised NotImplementedError / RuntimeError
_R4 = torch.tensor([1.0, 0.0, 1.0, 0.0])
_IDS4 = torch.tensor([0, 0, 1, 1])
_MASK4 = torch.tensor([True, True, True, True])


def _quietly(
    make: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``make`` without torch's warnings that sparse CSR / nested / quantized tensors are beta or
    deprecated (they are what a user may still pass)."""

    def quiet(values: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return make(values)

    return quiet


@_quietly
def _quantized(values: torch.Tensor) -> torch.Tensor:
    return torch.quantize_per_tensor(values.float(), 0.1, 0, torch.quint8)


@_quietly
def _nested(values: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor([values[:2], values[2:]])


UNREADABLE_TENSORS: list[tuple[str, Callable[[torch.Tensor], torch.Tensor], str]] = [
    ("meta", lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), r"got a meta tensor"),
    (
        "sparse-coo",
        lambda t: t.to_sparse(),
        r"dense tensor, got a sparse tensor \(layout sparse_coo\)",
    ),
    (
        "sparse-csr",
        _quietly(lambda t: t.reshape(2, 2).to_sparse_csr()),
        r"dense tensor, got a sparse tensor \(layout sparse_csr\)",
    ),
    (
        "sparse-csc",
        _quietly(lambda t: t.reshape(2, 2).to_sparse_csc()),
        r"dense tensor, got a sparse tensor \(layout sparse_csc\)",
    ),
    (
        "sparse-bsr",
        _quietly(lambda t: t.reshape(2, 2).to_sparse_bsr((1, 1))),
        r"dense tensor, got a sparse tensor \(layout sparse_bsr\)",
    ),
    ("nested", _nested, r"a 1-D tensor, got a nested tensor"),
]
for name in NAMES:
    for label, make, match in UNREADABLE_TENSORS:
        for argument, value in [("rewards", _R4), ("group_ids", _IDS4), ("mask", _MASK4)]:
            args = {"rewards": _R4, "group_ids": _IDS4}
            kwargs = {}
            if argument == "mask":
                kwargs["mask"] = make(value)
            else:
                args[argument] = make(value)
            batch_case(
                name,
                f"{argument}-{label}",
                rf"^{argument} must be .*{match}",
                args["rewards"],
                args["group_ids"],
                **kwargs,
            )
        batch_case(
            name,
            f"clusters-{label}",
            rf"^clusters must be .*{match}",
            _R4,
            _IDS4,
            clusters=make(_IDS4),
        )
        batch_case(
            name,
            f"token-counts-{label}",
            rf"^token_counts must be .*{match}",
            _R4,
            _IDS4,
            token_counts=make(torch.tensor([3, 1, 4, 1])),
        )
    batch_case(
        name,
        "rewards-quantized",
        r"^rewards must be a plain tensor, got a quantized torch.quint8 tensor; pass rewards.dequantize\(\)",
        _quantized(_R4),
        _IDS4,
    )
    batch_case(
        name,
        "mask-quantized",
        r"^mask must be a plain tensor, got a quantized",
        _R4,
        _IDS4,
        mask=_quantized(torch.ones(4)),
    )
    # token_counts: read only with whiten="tokens", but checked for every estimator
    for label, counts, match in [
        (
            "negative",
            [3, -1, 4, 1],
            r"token_counts must be finite numbers >= 0 .*got -1.0 at row 1",
        ),
        (
            "nan",
            [3, math.nan, 4, 1],
            r"token_counts must be finite numbers >= 0 .*got nan at row 1",
        ),
        ("inf", [3, 1, math.inf, 1], r"got inf at row 2"),
        ("strings", ["3", "1", "4", "1"], r"token_counts must be numbers, got <U1 values"),
        ("none", [3, None, 4, 1], r"token_counts must be real numbers, got NoneType None at row 1"),
        ("complex", [3, 1j, 4, 1], r"token_counts must be real numbers, got complex values"),
        (
            "bools",
            [True, False, True, True],
            r"token_counts must be numbers of tokens, got booleans",
        ),
        (
            "bool-tensor",
            torch.tensor([True, False, True, True]),
            r"token_counts must be numbers of tokens, got a torch.bool tensor",
        ),
        ("shorter", [3, 1, 4], r"token_counts has 3 entries but rewards has 4"),
        ("2d", np.ones((4, 1)), r"token_counts must be 1-D .*got shape \(4, 1\)"),
        ("scalar", 4, r"token_counts must be a 1-D sequence .*got int"),
        ("set", {3, 1, 4, 2}, r"token_counts must be a 1-D sequence .*got a set"),
    ]:
        batch_case(name, f"token-counts-{label}", match, _R4, _IDS4, token_counts=counts)
batch_case(
    "reinforce_pp_baseline",
    "tokens-without-token-counts",
    r"token_counts is required when the estimator whitens over tokens \(whiten='tokens'\)",
    _R4,
    _IDS4,
    options={"whiten": "tokens"},
)
batch_case(
    "reinforce_pp_baseline",
    "tokens-spread-overflow",
    r"the spread of this batch overflows float64",
    torch.tensor([-1e153, 1e153] * 200 + [0.0] * 400, dtype=torch.float64),
    np.repeat(np.arange(400), 2),
    options={"whiten": "tokens"},
    token_counts=[1000] * 800,
)

# issue #11 item 7: fp16 ±60000 gave ±inf; the output must fit the caller's dtype
for name, options in [
    ("rloo", {}),
    ("dr_grpo", {}),
    ("jspo", {}),
    ("jspo_plus_plus", {}),
    ("ebpo", {"normalize": "none"}),
    ("grpo", {"scale": "none"}),
]:
    batch_case(
        name,
        "fp16-overflow",
        r"the advantages of this batch \(up to 120000 in magnitude\) do not fit the output dtype float16"
        if name in ("rloo", "jspo")
        else r"the advantages of this batch .* do not fit the output dtype float16",
        F16,
        [0, 0, 0, 0],
        options=options,
    )
batch_case(
    "grpo",
    "float32-out-overflow-from-list",
    r"do not fit the output dtype float32 .*float64 tensor",
    [0.0, 1e50, 0.0, 1e50],
    [0, 0, 1, 1],
    options={"scale": "none"},
)
batch_case(
    "ebpo",
    "prior-overflow",
    r"running statistics overflow float64",
    torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64),
    np.repeat(np.arange(200), 2),
)
batch_case(
    "reinforce_pp_baseline",
    "spread-overflow",
    r"the spread of this batch overflows float64",
    torch.tensor([-1e153, 1e153] * 200 + [0.0] * 400, dtype=torch.float64),
    np.repeat(np.arange(400), 2),
)
batch_case(
    "grpo",
    "batch-std-overflow",
    r"the spread of this batch overflows float64",
    torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64),
    np.repeat(np.arange(200), 2),
    options={"scale": "batch"},
)
# group means of ±1e200 fit float64, their spread s = 1e400 does not: refused before the smoother sees it
for name in ("jspo", "jspo_plus_plus"):
    batch_case(
        name,
        "spread-overflow",
        r"overflow float64",
        torch.tensor([1e200, 1e200, -1e200, -1e200], dtype=torch.float64),
        [0, 0, 1, 1],
        options={"smooth_coef": 0.99} if name == "jspo_plus_plus" else {},
    )
batch_case(
    "ebpo",
    "per-cluster-needs-clusters",
    r"clusters is required .*per_cluster=True",
    [1.0, 0.0],
    [0, 0],
    options={"per_cluster": True},
)
batch_case(
    "ebpo_bb",
    "reward-above-1",
    r"rewards must lie in \[0, 1\] for ebpo_bb .*got 2.0",
    [1.0, 2.0],
    [0, 0],
)
batch_case(
    "ebpo_bb",
    "reward-below-0",
    r"rewards must lie in \[0, 1\] for ebpo_bb .*got -0.5",
    [-0.5, 1.0],
    [0, 0],
)

# ---------------------------------------------------------------------- bad options, every estimator
BAD_OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("nope", {}, r"unknown estimator 'nope'; expected one of \["),
    (None, {}, r"unknown estimator None"),
]
for name in NAMES:
    BAD_OPTIONS += [
        (name, {"eps": value}, r"eps must be a positive finite number, got " + pattern)
        for value, pattern in [
            (0, "0"),
            (-1.0, "-1.0"),
            (math.nan, "nan"),
            (math.inf, "inf"),
            ("1e-6", "'1e-6'"),
            (True, "True"),
            (None, "None"),
        ]
    ]
    BAD_OPTIONS += [
        (
            name,
            {"nan_policy": value},
            r"nan_policy must be one of \['raise', 'mask'\], got " + repr(value),
        )
        for value in ("ignore", None, 1)
    ]
    BAD_OPTIONS.append(
        (
            name,
            {"priorr": "history"},
            r"unknown option\(s\) \['priorr'\] for estimator " + repr(name),
        )
    )
for name in ("grpo", "dr_grpo"):
    BAD_OPTIONS += [
        (name, {"scale": v}, r"scale must be one of \['group', 'batch', 'none'\], got " + repr(v))
        for v in ("token", None)
    ]
BAD_OPTIONS += [
    (
        "reinforce_pp_baseline",
        {"whiten": v},
        r"whiten must be one of \['responses', 'tokens'\], got " + repr(v),
    )
    for v in ("token", "batch", None, True)
]
BAD_OPTIONS.append(
    ("grpo", {"whiten": "tokens"}, r"unknown option\(s\) \['whiten'\] for estimator 'grpo'")
)
BAD_OPTIONS += [
    (
        "jspo",
        {"lambda_form": v},
        r"lambda_form must be one of \['released_code', 'project_page'\], got " + repr(v),
    )
    for v in ("page", None, 1)
]
BAD_OPTIONS += [
    (
        "jspo_plus_plus",
        {"smooth_coef": v},
        r"smooth_coef must be a number in \[0, 1\] \(0 = no smoothing\), got " + p,
    )
    for v, p in [
        (-0.1, "-0.1"),
        (1.5, "1.5"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        (True, "True"),
        ("0.99", "'0.99'"),
        (None, "None"),
    ]
]
BAD_OPTIONS.append(
    (
        "jspo_plus_plus",
        {"lambda_form": "project_page"},
        r"unknown option\(s\) \['lambda_form'\] for estimator 'jspo_plus_plus'",
    )
)
for name in ("ebpo", "ebpo_bb"):
    BAD_OPTIONS += [
        (name, {"prior": v}, r"prior must be one of \['history', 'batch', 'ema'\], got " + repr(v))
        for v in ("forever", None)
    ]
    BAD_OPTIONS += [
        (name, {"half_life": v}, r"half_life must be a positive finite number, got " + p)
        for v, p in [
            (0, "0"),
            (-1, "-1"),
            (math.nan, "nan"),
            (math.inf, "inf"),
            (True, "True"),
            ("50", "'50'"),
        ]
    ]
    BAD_OPTIONS += [
        (
            name,
            {"normalize": v},
            r"normalize must be one of \['batch', 'center', 'none'\], got " + repr(v),
        )
        for v in ("group", None)
    ]
    BAD_OPTIONS += [
        (name, {"per_cluster": v}, r"per_cluster must be True or False, got " + repr(v))
        for v in (1, "yes", None)
    ]
    BAD_OPTIONS += [
        (
            name,
            {"min_cluster_groups": v},
            r"min_cluster_groups must be a positive integer, got " + repr(v),
        )
        for v in (0, -1, 1.5, True)
    ]
BAD_OPTIONS += [
    (
        "ebpo",
        {"within_variance": v},
        r"within_variance must be one of \['pooled', 'within'\], got " + repr(v),
    )
    for v in ("x", None)
]
BAD_OPTIONS += [
    ("ebpo", {"tau2_mode": v}, r"tau2_mode must be one of \['raw', 'corrected'\], got " + repr(v))
    for v in ("x", None)
]
BAD_OPTIONS += [
    (
        "ebpo",
        {"prior_mean_from": v},
        r"prior_mean_from must be one of \['rewards', 'group_means'\], got " + repr(v),
    )
    for v in ("mean", "group_mean", None)
]
BAD_OPTIONS += [
    ("ebpo_bb", {"warmup_groups": v}, r"warmup_groups must be a positive integer, got " + repr(v))
    for v in (0, 2.5, True)
]
BAD_OPTIONS += [
    (
        "ebpo_bb",
        {"within_variance": "within"},
        r"unknown option\(s\) \['within_variance'\] for estimator 'ebpo_bb'",
    ),
    (
        "ebpo_bb",
        {"prior_mean_from": "group_means"},
        r"unknown option\(s\) \['prior_mean_from'\] for estimator 'ebpo_bb'",
    ),
    ("rloo", {"scale": "group"}, r"unknown option\(s\) \['scale'\] for estimator 'rloo'"),
]
for name, options, match in BAD_OPTIONS:
    label = "-".join(f"{k}={v!r}" for k, v in options.items()) or "name"
    case(
        f"make-{name}-{label}",
        None,
        lambda name=name, options=options: ebpo.make_estimator(name, **options),
        match,
    )


# ---------------------------------------------------------------------- bad state dicts (EBPO)
def saved(name: str = "ebpo", **options: Any) -> dict[str, Any]:
    return json.loads(json.dumps(fed(name, **options).state_dict()))


def edited(state: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(state)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


DELETE = object()
CLUSTERED = {"per_cluster": True, "min_cluster_groups": 1}
BAD_STATES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    # (id, estimator, options of the loading estimator, state, message)
    (
        "ema-into-history",
        "ebpo",
        {},
        saved(prior="ema"),
        r"state was saved with prior='ema' but this estimator has prior='history'",
    ),
    (
        "history-into-ema",
        "ebpo",
        {"prior": "ema"},
        saved(),
        r"prior='history' but this estimator has prior='ema'",
    ),
    ("batch-into-history", "ebpo", {}, saved(prior="batch"), r"prior='batch'"),
    (
        "half-life-mismatch",
        "ebpo",
        {"prior": "ema"},
        saved(prior="ema", half_life=3.0),
        r"half_life=3.0 but this estimator has half_life=50.0",
    ),
    (
        "per-cluster-into-global",
        "ebpo",
        {},
        saved(**CLUSTERED),
        r"per_cluster=True but this estimator has per_cluster=False",
    ),
    (
        "global-into-per-cluster",
        "ebpo",
        CLUSTERED,
        saved(),
        r"per_cluster=False but this estimator has per_cluster=True",
    ),
    (
        "bb-ema-into-history",
        "ebpo_bb",
        {},
        saved("ebpo_bb", prior="ema"),
        r"prior='ema' but this estimator has prior='history'",
    ),
    (
        "ebpo-into-bb",
        "ebpo_bb",
        {},
        saved(),
        r"state belongs to estimator 'ebpo', cannot load it into 'ebpo_bb'",
    ),
    (
        "no-options",
        "ebpo",
        {},
        edited(saved(), ("options",), DELETE),
        r"state has no 'options' dict",
    ),
    (
        "options-not-dict",
        "ebpo",
        {},
        edited(saved(), ("options",), "history"),
        r"state has no 'options' dict",
    ),
    (
        "option-missing",
        "ebpo",
        {},
        edited(saved(), ("options", "prior"), DELETE),
        r"state does not record option 'prior'",
    ),
    (
        "steps-inf",
        "ebpo",
        {},
        edited(saved(), ("steps",), math.inf),
        r"steps must be a non-negative integer, got inf",
    ),
    (
        "steps-negative",
        "ebpo",
        {},
        edited(saved(), ("steps",), -1),
        r"steps must be a non-negative integer, got -1",
    ),
    (
        "steps-fraction",
        "ebpo",
        {},
        edited(saved(), ("steps",), 1.5),
        r"steps must be a non-negative integer, got 1.5",
    ),
    (
        "steps-string",
        "ebpo",
        {},
        edited(saved(), ("steps",), "3"),
        r"steps must be a non-negative integer, got '3'",
    ),
    (
        "steps-bool",
        "ebpo",
        {},
        edited(saved(), ("steps",), True),
        r"steps must be a non-negative integer, got True",
    ),
    (
        "steps-missing",
        "ebpo",
        {},
        edited(saved(), ("steps",), DELETE),
        r"invalid ebpo state: 'steps'",
    ),
    (
        "global-missing",
        "ebpo",
        {},
        edited(saved(), ("global",), DELETE),
        r"invalid ebpo state: 'global'",
    ),
    (
        "global-not-dict",
        "ebpo",
        {},
        edited(saved(), ("global",), 5),
        r"invalid ebpo state: global must be a dict with keys \['rewards', 'group_means', "
        r"'group_variances'\], got int 5",
    ),
    (
        "moments-missing",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "m2"), DELETE),
        r"must have finite numbers 'count', 'mean', 'm2'",
    ),
    (
        "count-10**400",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), 10**400),
        r"must have finite numbers 'count'",
    ),
    (
        "count-string",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), "6"),
        r"must have finite numbers 'count'",
    ),
    (
        "count-bool",
        "ebpo",
        {},
        edited(saved(), ("global", "group_means", "count"), True),
        r"must have finite numbers 'count'",
    ),
    (
        "count-negative",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), -6.0),
        r"count >= 0 and m2 >= 0",
    ),
    (
        "m2-negative",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "m2"), -1.0),
        r"count >= 0 and m2 >= 0",
    ),
    (
        "mean-nan",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "mean"), math.nan),
        r"running moments state must be finite",
    ),
    (
        "m2-inf",
        "ebpo",
        {},
        edited(saved(), ("global", "group_means", "m2"), math.inf),
        r"running moments state must be finite",
    ),
    (
        "empty-with-mean",
        "ebpo",
        {},
        edited(saved(), ("global", "group_variances"), {"count": 0.0, "mean": 0.5, "m2": 0.0}),
        r"with count 0 must have mean 0 and m2 0",
    ),
    (
        "means-outnumber-rewards",
        "ebpo",
        {},
        edited(saved(), ("global", "group_means", "count"), 7.0),
        r"count\(group_variances\) <= count\(group_means\) <= count\(rewards\), got 3.0, 7.0, 6.0",
    ),
    (
        "variances-outnumber-means",
        "ebpo",
        {},
        edited(saved(), ("global", "group_variances", "count"), 4.0),
        r"prior state is inconsistent: expected count\(group_variances\)",
    ),
    (
        "negative-mean-variance",
        "ebpo",
        {},
        edited(saved(), ("global", "group_variances", "mean"), -0.1),
        r"the mean group variance is negative",
    ),
    (
        "clusters-not-list",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters",), {"a": {}}),
        r"'clusters' must be a list",
    ),
    (
        "cluster-entry-malformed",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0), ["a"]),
        r"must be a \[label, prior state\] pair",
    ),
    (
        "cluster-duplicate",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 1, 0), "a"),
        r"cluster label 'a' appears twice",
    ),
    (
        "cluster-bytes-label",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0, 0), b"a"),
        r"cluster labels must be strings.*bytes",
    ),
    (
        "cluster-dict-label",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0, 0), {"a": 1}),
        r"cluster labels must be .*dict",
    ),
    (
        "cluster-prior-corrupt",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0, 1, "rewards", "count"), -1.0),
        r"count >= 0 and m2 >= 0",
    ),
    (
        "clusters-without-per-cluster",
        "ebpo",
        {},
        edited(saved(), ("clusters",), saved(**CLUSTERED)["clusters"]),
        r"holds cluster priors but was saved with per_cluster=False",
    ),
]
# issue #21 item 12: a state that loads but makes every later call overflow is refused at load
BAD_STATES += [
    (
        "mean-1e308",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "mean"), 1e308),
        r"invalid ebpo state: global\.rewards\.mean = 1e\+308 is too large: \|mean\| must be at most "
        r"1e\+150, or the next update overflows float64",
    ),
    (
        "mean-minus-1e308",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "mean"), -1e308),
        r"global\.rewards\.mean = -1e\+308 is too large",
    ),
    (
        "mean-1e160",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "mean"), 1e160),
        r"global\.rewards\.mean = 1e\+160 is too large",
    ),
    (
        "group-means-mean-1e308",
        "ebpo",
        {},
        edited(saved(), ("global", "group_means", "mean"), 1e308),
        r"global\.group_means\.mean = 1e\+308 is too large",
    ),
    (
        "group-variances-mean-1e200",
        "ebpo",
        {},
        edited(saved(), ("global", "group_variances", "mean"), 1e200),
        r"global\.group_variances\.mean = 1e\+200 is too large",
    ),
    (
        "m2-1.7e308",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "m2"), 1.7e308),
        r"global\.rewards\.m2 = 1\.7e\+308 is too large for count 6\.0: the variance m2/count must "
        r"be at most 1e\+300",
    ),
    (
        "m2-over-tiny-count",  # a count that small: an ema prior's, decayed
        "ebpo",
        {"prior": "ema"},
        edited(
            edited(saved(prior="ema"), ("global", "group_variances", "count"), 1e-300),
            ("global", "group_variances", "m2"),
            10.0,
        ),
        r"global\.group_variances\.m2 = 10\.0 is too large for count 1e-300",
    ),
    (
        "cluster-mean-1e308",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0, 1, "rewards", "mean"), 1e308),
        r"clusters\['a'\]\.rewards\.mean = 1e\+308 is too large",
    ),
    (
        "bb-mean-1e308",
        "ebpo_bb",
        {},
        edited(saved("ebpo_bb"), ("global", "group_means", "mean"), 1e308),
        r"invalid ebpo_bb state: global\.group_means\.mean = 1e\+308 is too large",
    ),
    (
        "ema-mean-1e308",
        "ebpo",
        {"prior": "ema"},
        edited(saved(prior="ema"), ("global", "rewards", "mean"), 1e308),
        r"global\.rewards\.mean = 1e\+308 is too large",
    ),
    (
        "pp-mean-sum-1e308",
        "jspo_plus_plus",
        {"smooth_coef": 0.99},
        edited(saved("jspo_plus_plus", smooth_coef=0.99), ("mean_sum",), 1e308),
        r"invalid jspo_plus_plus state: mean_sum = 1e\+308 is too large: the smoothed mean "
        r"mean_sum/weight must be at most 1e\+150",
    ),
    (
        "pp-unsmoothed-mean-sum-1e308",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("mean_sum",), -1e308),
        r"mean_sum = -1e\+308 is too large",
    ),
    (
        "pp-steps-10**400",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), 10**400),
        r"steps must be at most 2\*\*53 .*got an integer of 401 digits",
    ),
    (
        "pp-steps-2**53+1",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), 2**53 + 1),
        r"steps must be at most 2\*\*53 .*got 9007199254740993",
    ),
]
SMOOTHED = {"smooth_coef": 0.99}
BAD_STATES += [
    # (the fed estimator has taken one step: weight 1, lambda_sum = λ, mean_sum = μ)
    (
        "coef-mismatch",
        "jspo_plus_plus",
        {},
        saved("jspo_plus_plus", **SMOOTHED),
        r"state was saved with smooth_coef=0.99 but this estimator has smooth_coef=0.0",
    ),
    (
        "jspo-into-plus-plus",
        "jspo_plus_plus",
        {},
        saved("jspo"),
        r"state belongs to estimator 'jspo', cannot load it into 'jspo_plus_plus'",
    ),
    (
        "pp-no-options",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("options",), DELETE),
        r"state has no 'options' dict",
    ),
    (
        "pp-steps-missing",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), DELETE),
        r"invalid jspo_plus_plus state: state must have 'steps', 'weight', 'lambda_sum', 'mean_sum'; missing 'steps'",
    ),
    (
        "pp-weight-missing",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("weight",), DELETE),
        r"missing 'weight'",
    ),
    (
        "pp-steps-negative",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), -1),
        r"steps must be a non-negative integer, got -1",
    ),
    (
        "pp-steps-bool",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), True),
        r"steps must be a non-negative integer, got True",
    ),
    (
        "pp-steps-float",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), 1.0),
        r"steps must be a non-negative integer, got 1.0",
    ),
    (
        "pp-weight-nan",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("weight",), math.nan),
        r"weight must be a finite number, got nan",
    ),
    (
        "pp-weight-string",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("weight",), "1"),
        r"weight must be a finite number, got '1'",
    ),
    (
        "pp-mean-inf",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("mean_sum",), math.inf),
        r"mean_sum must be a finite number, got inf",
    ),
    (
        "pp-lambda-bool",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("lambda_sum",), False),
        r"lambda_sum must be a finite number, got False",
    ),
    (
        "pp-weight-above-steps",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("weight",), 2.5),
        r"weight must lie in \[1, steps\] = \[1, 1\], got 2.5",
    ),
    (
        "pp-weight-below-1",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("weight",), 0.5),
        r"weight must lie in \[1, steps\]",
    ),
    (
        "pp-lambda-above-weight",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("lambda_sum",), 1.5),
        r"lambda_sum must lie in \[0, weight\] = \[0, 1.0\] \(λ is in \[0, 1\]\), got 1.5",
    ),
    (
        "pp-lambda-negative",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("lambda_sum",), -0.5),
        r"lambda_sum must lie in \[0, weight\]",
    ),
    (
        "pp-sums-without-steps",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("steps",), 0),
        r"a state with steps 0 must have weight, lambda_sum and mean_sum 0",
    ),
]
# issue 46 item 8: what no run writes was loaded, and every later call failed (or the key was
# dropped without a word): counts past 2**53, fractional counts without decay, unknown keys at
# every level, option values the constructor refuses
_INVALID = r"invalid ebpo state: "
BAD_STATES += [
    (
        "count-1e308",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), 1e308),
        _INVALID + r"global\.rewards\.count = 1e\+308 is more than 2\*\*53",
    ),
    (
        "count-2**54",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), 2.0**54),
        r"global\.rewards\.count = 1\.8014398509481984e\+16 is more than 2\*\*53",
    ),
    (
        "ema-count-1e308",
        "ebpo",
        {"prior": "ema"},
        edited(saved(prior="ema"), ("global", "rewards", "count"), 1e308),
        r"global\.rewards\.count = 1e\+308 is more than 2\*\*53",
    ),
    (
        "steps-10**30",
        "ebpo",
        {},
        edited(saved(), ("steps",), 10**30),
        _INVALID + r"steps must be at most 2\*\*53 .*got an integer of 31 digits",
    ),
    (
        "steps-2**53+1",
        "ebpo",
        {},
        edited(saved(), ("steps",), 2**53 + 1),
        r"steps must be at most 2\*\*53 .*got 9007199254740993",
    ),
    (
        "steps--10**5000",
        "ebpo",
        {},
        edited(saved(), ("steps",), -(10**5000)),
        r"steps must be a non-negative integer, got an integer of more than 4,300 digits",
    ),
    (
        "count-fraction-history",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "count"), 6.5),
        _INVALID + r"global\.rewards\.count = 6\.5 must be a whole number",
    ),
    (
        "count-fraction-batch-prior",
        "ebpo",
        {"prior": "batch"},
        edited(saved(prior="batch"), ("global", "group_means", "count"), 2.5),
        r"global\.group_means\.count = 2\.5 must be a whole number",
    ),
    (
        "cluster-count-fraction",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 0, 1, "group_means", "count"), 1.5),
        r"clusters\['a'\]\.group_means\.count = 1\.5 must be a whole number",
    ),
    (
        "unknown-key",
        "ebpo",
        {},
        edited(saved(), ("junk",), 1),
        _INVALID + r"unknown key 'junk' in the state \(expected \['estimator', 'options', "
        r"'steps', 'global', 'clusters'\] there\)",
    ),
    (
        "unknown-option",
        "ebpo",
        {},
        edited(saved(), ("options", "priorr"), "history"),
        _INVALID + r"unknown key 'options\.priorr' in the state \(expected \['prior', ",
    ),
    (
        "unknown-prior-key",
        "ebpo",
        {},
        edited(saved(), ("global", "tau2"), 0.5),
        _INVALID + r"unknown key 'global\.tau2' in the state \(expected \['rewards', "
        r"'group_means', 'group_variances'\] there\)",
    ),
    (
        "unknown-moments-key",
        "ebpo",
        {},
        edited(saved(), ("global", "rewards", "variance"), 0.25),
        _INVALID + r"unknown key 'global\.rewards\.variance' in the state \(expected "
        r"\['count', 'mean', 'm2'\] there\)",
    ),
    (
        "unknown-cluster-prior-key",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("clusters", 1, 1, "junk"), {}),
        r"unknown key \"clusters\['b'\]\.junk\"",
    ),
    (
        "option-eps-nan",
        "ebpo",
        {},
        edited(saved(), ("options", "eps"), math.nan),
        _INVALID + r"options\.eps: eps must be a positive finite number, got nan",
    ),
    (
        "option-eps-negative",
        "ebpo",
        {},
        edited(saved(), ("options", "eps"), -1.0),
        r"options\.eps: eps must be a positive finite number, got -1\.0",
    ),
    (
        "option-tau2_mode-unknown",
        "ebpo",
        {},
        edited(saved(), ("options", "tau2_mode"), "nope"),
        r"options\.tau2_mode: tau2_mode must be one of \['raw', 'corrected'\], got 'nope'",
    ),
    (
        "option-half-life-inf",  # not compared under a history prior, but still a number
        "ebpo",
        {},
        edited(saved(), ("options", "half_life"), math.inf),
        r"options\.half_life: half_life must be a positive finite number, got inf",
    ),
    (
        "option-min-cluster-groups-0",
        "ebpo",
        CLUSTERED,
        edited(saved(**CLUSTERED), ("options", "min_cluster_groups"), 0),
        r"options\.min_cluster_groups: min_cluster_groups must be a positive integer, got 0",
    ),
    (
        "bb-option-warmup-groups-0",
        "ebpo_bb",
        {},
        edited(saved("ebpo_bb"), ("options", "warmup_groups"), 0),
        r"invalid ebpo_bb state: options\.warmup_groups: warmup_groups must be a positive integer",
    ),
    (
        "bb-count-1e308",
        "ebpo_bb",
        {},
        edited(saved("ebpo_bb"), ("global", "rewards", "count"), 1e308),
        r"invalid ebpo_bb state: global\.rewards\.count = 1e\+308 is more than 2\*\*53",
    ),
    (
        "pp-unknown-key",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("lam",), 0.5),
        r"invalid jspo_plus_plus state: unknown key 'lam' in the state",
    ),
    (
        "pp-unknown-option",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("options", "smooth"), 0.5),
        r"invalid jspo_plus_plus state: unknown key 'options\.smooth' in the state \(expected "
        r"\['smooth_coef', 'eps'\] there\)",
    ),
    (
        "pp-option-eps-nan",
        "jspo_plus_plus",
        {},
        edited(saved("jspo_plus_plus"), ("options", "eps"), math.nan),
        r"invalid jspo_plus_plus state: options\.eps: eps must be a positive finite number",
    ),
]
BAD_STATES += [  # the stateless estimators' state is their name, and nothing else
    (
        "unknown-key",
        name,
        {},
        {"estimator": name, "steps": 3},
        rf"invalid {name} state: unknown key 'steps' in the state \(expected \['estimator'\] there\)",
    )
    for name in NAMES
    if ebpo.make_estimator(name).state_dict() == {"estimator": name}
]
for label, name, options, state, match in BAD_STATES:
    est = fed(name, **options)
    case(
        f"load-{name}-{label}", est, lambda est=est, state=state: est.load_state_dict(state), match
    )
case(
    "moments-from-state-10**400",
    None,
    lambda: RunningMoments.from_state_dict({"count": 10**400, "mean": 0, "m2": 0}),
    r"must have finite numbers",
)

# ---------------------------------------------------------------------- RunningMoments.merge
_moments = RunningMoments().update(torch.tensor([1.0, 2.0]))
case(
    "moments-merge-none",
    _moments,
    lambda: _moments.merge(None),
    r"merge expects another RunningMoments, got NoneType",
)
case(
    "moments-merge-dict",
    _moments,
    lambda: _moments.merge({"count": 1, "mean": 0, "m2": 0}),
    r"got dict",
)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_api_error(case):
    check_api_error(case, unchanged=TARGETS[case.id])


@pytest.mark.parametrize(
    ("label", "name", "options", "state", "match"),
    BAD_STATES,
    ids=[f"{row[1]}-{row[0]}" for row in BAD_STATES],
)
def test_a_refused_state_leaves_the_estimator_working(label, name, options, state, match):
    """Issue 46 item 8: after a refused load, the next call gives exactly what it gives on an
    estimator that never saw the state (the refusal itself is in :data:`CASES`)."""
    est = fed(name, **options)
    twin = copy.deepcopy(est)
    with pytest.raises(ValueError, match=match):
        est.load_state_dict(copy.deepcopy(state))
    for _ in range(2):
        got = est(*GOOD, clusters=GOOD_CLUSTERS, token_counts=GOOD_TOKENS)
        expected = twin(*GOOD, clusters=GOOD_CLUSTERS, token_counts=GOOD_TOKENS)
        torch.testing.assert_close(got.advantages, expected.advantages, rtol=0, atol=0)
    assert json.dumps(est.state_dict()) == json.dumps(twin.state_dict())


# ---------------------------------------------------------------------- hostile but legitimate
def same_as(
    name: str,
    expected_call: Callable[[ebpo.AdvantageEstimator], Any],
    hostile_call: Callable[[ebpo.AdvantageEstimator], Any],
):
    """Two fresh estimators: the hostile call gives the same advantages and state as the plain one."""
    plain, hostile = ebpo.make_estimator(name), ebpo.make_estimator(name)
    expected, got = expected_call(plain), hostile_call(hostile)
    n = len(expected.advantages)  # rows past n are padding: advantage 0
    torch.testing.assert_close(
        got.advantages[:n].double(), expected.advantages.double(), rtol=0, atol=0
    )
    assert got.advantages[n:].abs().sum() == 0
    assert json.dumps(hostile.state_dict()) == json.dumps(plain.state_dict())


ACCEPTED: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (
        "bool-rewards",
        lambda e: e([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]),
        lambda e: e([True, False, True, True], [0, 0, 1, 1]),
    ),
    (
        "bool-reward-tensor",
        lambda e: e(torch.tensor([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1]),
        lambda e: e(torch.tensor([True, False, True, True]), [0, 0, 1, 1]),
    ),
    (
        "padding-rows",
        lambda e: e(*GOOD),
        lambda e: e(
            GOOD[0] + [math.nan, 5.0, -1.0], GOOD[1] + [9, 0, 7], mask=[True] * 6 + [False] * 3
        ),
    ),
    (
        "nan-with-nan-policy-mask",
        lambda e: e(*GOOD, mask=[True] * 5 + [False]),
        lambda e: e(GOOD[0][:5] + [math.nan], GOOD[1]),
    ),  # the hostile estimator is rebuilt with nan_policy="mask" below
    (
        "mask-uint16",
        lambda e: e(*GOOD, mask=[True, False] * 3),
        lambda e: e(*GOOD, mask=np.array([1, 0] * 3, dtype=np.uint16)),
    ),
    (
        "mask-uint64",
        lambda e: e(*GOOD, mask=[True, False] * 3),
        lambda e: e(*GOOD, mask=np.array([1, 0] * 3, dtype=np.uint64)),
    ),
    (
        "mask-torch-uint8",
        lambda e: e(*GOOD, mask=[True, False] * 3),
        lambda e: e(*GOOD, mask=torch.tensor([1, 0] * 3, dtype=torch.uint8)),
    ),
    (
        "mask-torch-uint16",
        lambda e: e(*GOOD, mask=[True, False] * 3),
        lambda e: e(*GOOD, mask=torch.tensor([1, 0] * 3, dtype=torch.uint16)),
    ),
    (
        "mask-torch-uint64",
        lambda e: e(*GOOD, mask=[True, False] * 3),
        lambda e: e(*GOOD, mask=torch.tensor([1, 0] * 3, dtype=torch.uint64)),
    ),
    (
        "ids-at-least-2**63-list",
        lambda e: e(*GOOD),
        lambda e: e(GOOD[0], [2**63 + 5, 2**63 + 5, 2**63, 2**63, -1, -1]),
    ),
    (
        "ids-2**63-apart-list",
        lambda e: e(*GOOD),
        lambda e: e(GOOD[0], [2**63, 2**63, 2**63 + 1, 2**63 + 1, 2**63 + 2, 2**63 + 2]),
    ),
    (
        "ids-uint64-array",
        lambda e: e(*GOOD),
        lambda e: e(GOOD[0], np.array([2**64 - 1] * 2 + [2**63] * 2 + [0] * 2, dtype=np.uint64)),
    ),
    (
        "ids-uint64-tensor",
        lambda e: e(*GOOD),
        lambda e: e(
            GOOD[0], torch.tensor([2**64 - 1] * 2 + [2**63] * 2 + [0] * 2, dtype=torch.uint64)
        ),
    ),
    (
        "ids-int64-extremes",
        lambda e: e(*GOOD),
        lambda e: e(GOOD[0], [-(2**63)] * 2 + [2**63 - 1] * 2 + [0] * 2),
    ),
    ("ids-tuple", lambda e: e(*GOOD), lambda e: e(GOOD[0], tuple(GOOD[1]))),
    (
        "ids-strings-array",
        lambda e: e(*GOOD),
        lambda e: e(GOOD[0], np.array(["x", "x", "y", "y", "z", "z"])),
    ),
    (
        "int-reward-tensor",
        lambda e: e(torch.tensor([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1]),
        lambda e: e(torch.tensor([1, 0, 1, 1]), [0, 0, 1, 1]),
    ),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("label", "plain", "hostile"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_hostile_but_legitimate_input(name, label, plain, hostile):
    if label == "nan-with-nan-policy-mask":
        expected = plain(ebpo.make_estimator(name))
        got = hostile(ebpo.make_estimator(name, nan_policy="mask"))
        torch.testing.assert_close(got.advantages, expected.advantages, rtol=0, atol=0)
        return
    same_as(name, plain, hostile)


@pytest.mark.parametrize("name", NAMES)
def test_all_rows_masked_is_not_a_step(name):
    est = fed(name)
    before = json.dumps(est.state_dict())
    res = est([1.0, 0.0, math.nan], [0, 0, 1], mask=[False, False, False])
    assert res.advantages.abs().sum() == 0 and res.metrics["num_responses"] == 0
    assert json.dumps(est.state_dict()) == before


@pytest.mark.parametrize("name", NAMES)
def test_one_hundred_thousand_singleton_groups(name):
    n = 100_000
    rewards = torch.from_numpy((np.arange(n) % 3 == 0).astype(np.float64))
    res = ebpo.make_estimator(name)(
        rewards, torch.arange(n) * 7_919
    )  # sparse ids: the sorting path
    assert res.metrics["num_groups"] == n and torch.isfinite(res.advantages).all()


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("ebpo", ("global", "rewards", "mean")),
        ("ebpo", ("global", "group_means", "mean")),
        ("jspo_plus_plus", ("mean_sum",)),
    ],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_a_state_at_the_load_bound_loads_and_keeps_working(name, key, sign):
    """Issue #21 item 12: the bound refuses what cannot work, not less — a prior mean of ±1e150
    loads and later float64 calls succeed (float32 outputs cannot hold baselines of 1e149)."""
    options = {"smooth_coef": 0.99} if name == "jspo_plus_plus" else {}
    state = edited(saved(name, **options), key, sign * 1e150)
    est = ebpo.make_estimator(name, **options)
    est.load_state_dict(state)
    for _ in range(3):
        res = est(torch.tensor(GOOD[0], dtype=torch.float64), GOOD[1])
        assert torch.isfinite(res.advantages).all()


def test_cluster_label_2_pow_63_is_saved_exactly():
    """Issue #11 item 7: it was stored as a negative number."""
    est = ebpo.make_estimator("ebpo", **CLUSTERED)
    est(*GOOD, clusters=[2**63, 2**63, 2**64 - 1, 2**64 - 1, -1, -1])
    labels = [label for label, _ in json.loads(json.dumps(est.state_dict()))["clusters"]]
    assert sorted(labels) == [-1, 2**63, 2**64 - 1]
    restored = ebpo.make_estimator("ebpo", **CLUSTERED)
    restored.load_state_dict(json.loads(json.dumps(est.state_dict())))
    assert set(restored.cluster_priors) == {-1, 2**63, 2**64 - 1}


# ---------------------------------------------------------------------- recovery after a rejected batch
REJECTED_BATCHES = [
    ((torch.tensor([0.0, 1e200, 0.0, 1e200], dtype=torch.float64), [0, 0, 1, 1]), {}),
    (([1.0, math.nan], [0, 0]), {}),
    (([1.0, 0.0], [0]), {}),
    (([1.0, 0.0], {0, 1}), {}),
    (([1.0, 0.0], [0, 0]), {"mask": np.array([1, 2], dtype=np.uint16)}),
    (([1.0, 0.0], [0, 0]), {"clusters": [b"x", b"x"]}),
]
#: batches only some estimators refuse
REJECTED_BY = {
    "ebpo": [
        (
            (
                torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64),
                np.repeat(np.arange(200), 2),
            ),
            {},
        )
    ],
    "rloo": [((F16, [0, 0, 0, 0]), {})],
    "jspo": [((F16, [0, 0, 0, 0]), {})],
    "jspo_plus_plus": [
        ((F16, [0, 0, 0, 0]), {}),
        ((torch.tensor([1e200, 1e200, -1e200, -1e200], dtype=torch.float64), [0, 0, 1, 1]), {}),
    ],
    "dr_grpo": [((F16, [0, 0, 0, 0]), {})],
    "ebpo_bb": [(([0.5, 1.5], [0, 0]), {})],
}


@pytest.mark.parametrize("name", NAMES)
def test_rejected_batches_change_nothing_afterwards(name):
    """After every rejected batch, the estimator gives bit-for-bit what a copy that never saw the
    bad batches gives on the same good batches."""
    rejected = REJECTED_BATCHES + REJECTED_BY.get(name, [])
    rng = np.random.default_rng(0)
    good = [
        (
            torch.from_numpy((rng.random(24) < 0.5).astype(np.float64)),
            np.repeat(np.arange(6) + 10 * step, 4),
        )
        for step in range(len(rejected) + 1)
    ]
    hostile, fresh = ebpo.make_estimator(name), ebpo.make_estimator(name)
    for step, (rewards, group_ids) in enumerate(good):
        expected, got = fresh(rewards, group_ids), hostile(rewards, group_ids)
        torch.testing.assert_close(got.advantages, expected.advantages, rtol=0, atol=0)
        assert got.metrics == expected.metrics
        if step < len(rejected):
            (bad_rewards, bad_ids), kwargs = rejected[step]
            with pytest.raises(ValueError):
                hostile(bad_rewards, bad_ids, **kwargs)
    assert json.dumps(hostile.state_dict()) == json.dumps(fresh.state_dict())
