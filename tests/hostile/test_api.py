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
import functools
import json
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import ebpo
from ebpo.estimators.ebpo import RunningMoments
from ebpo.estimators.validation import factorize
from tests.hostile.harness import ApiCase, check_api_error, ids

#: every estimator class by its own name, with its defaults (named methods: tests/estimators/test_names.py)
NAMES = sorted({ebpo.estimator_spec(name)[0] for name in ebpo.available_estimators()})
GOOD = ([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2])
GOOD_CLUSTERS = ["a", "a", "b", "b", "a", "a"]
GOOD_TOKENS = [3, 1, 4, 1, 5, 9]
#: every side input an estimator may require (SPO: prompt keys; OPO: token counts)
GOOD_INPUTS = {"clusters": GOOD_CLUSTERS, "token_counts": GOOD_TOKENS, "prompt_keys": GOOD[1]}


def new_estimator(name: str, **options: Any) -> ebpo.AdvantageEstimator:
    """``ebpo.make_estimator``; an estimator that requires prompt keys (SPO) or token counts
    (OPO; not REINFORCE++ told to whiten over tokens, whose refusals are tested) gets them whenever
    a call gives none: one key per group, numbered in order of first appearance (so that ids
    naming the same groups give the same keys), and one token per response."""
    est = ebpo.make_estimator(name, **options)
    if est.uses_prompt_keys or (est.uses_token_counts and "whiten" not in options):
        est.__class__ = _given_side_inputs(type(est))
    return est


@functools.cache
def _given_side_inputs(cls: type[ebpo.AdvantageEstimator]) -> type[ebpo.AdvantageEstimator]:
    def call(self: Any, rewards: Any, group_ids: Any, **kwargs: Any) -> Any:
        try:
            group_index = factorize(group_ids)[0].numpy()
        except (TypeError, ValueError, RuntimeError):  # the call itself refuses these ids
            return cls.__call__(self, rewards, group_ids, **kwargs)
        if self.uses_prompt_keys:
            first_rows = np.unique(group_index, return_index=True)[1]
            order = np.argsort(np.argsort(first_rows))  # group -> rank of first appearance
            kwargs.setdefault("prompt_keys", order[group_index].tolist())
        if self.uses_token_counts:
            kwargs.setdefault("token_counts", [1] * len(group_index))
        return cls.__call__(self, rewards, group_ids, **kwargs)

    return type(cls.__name__, (cls,), {"__call__": call, "name": cls.name})


def fed(name: str, **options: Any) -> ebpo.AdvantageEstimator:
    """An estimator that has already seen one good batch (so that its state is not trivial)."""
    est = new_estimator(name, **options)
    est(*GOOD, **GOOD_INPUTS)
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
R2, Z2 = [1.0, 0.0], [0, 0]
_ROW_1 = r" on unmasked rows \(first: \[1\]\)"
_REAL, _NUMBERS = r"rewards must be real numbers, got ", r"rewards must be numbers, got "
_MASK_NAN, _FLOATS = {"options": {"nan_policy": "mask"}}, torch.tensor([0.0, 1.0])
#: (label, message, rewards, group_ids[, keyword arguments]) of batches every estimator refuses
BAD_BATCHES: list[tuple[Any, ...]] = [
    ("huge-int-reward", r"rewards must be finite real numbers.*too large", [10**400, 0], Z2),
    # NaN / inf
    ("nan-raise", r"rewards contains NaN" + _ROW_1 + r".*nan_policy='mask'", [1.0, math.nan], Z2),
    ("inf", r"rewards must be finite; got inf" + _ROW_1, [1.0, math.inf], Z2),
    (
        "minus-inf-nan-mask",
        r"rewards must be finite; got inf",
        [0.0, -math.inf, 1.0],
        [0, 0, 1],
        _MASK_NAN,
    ),
    # shapes and lengths
    ("empty", r"rewards is empty", [], []),
    ("ids-shorter", r"group_ids has 1 entries but rewards has 2", R2, [0]),
    ("ids-empty", r"group_ids has 0 entries but rewards has 2", R2, []),
    ("mask-longer", r"mask has 3 entries but rewards has 2", R2, Z2, {"mask": [True] * 3}),
    ("clusters-shorter", r"clusters has 1 entries but rewards has 2", R2, Z2, {"clusters": ["a"]}),
    ("rewards-0d", r"rewards must be 1-D .*got shape \(\)", torch.tensor(1.0), [0]),
    ("rewards-2d", r"rewards must be 1-D .*got shape \(1, 2\)", [[1.0, 0.0]], Z2),
    ("ids-0d", r"group_ids must be 1-D .*got shape \(\)", [1.0], np.array(0)),
    ("ids-2d", r"group_ids must be 1-D .*got shape \(2, 1\)", R2, np.zeros((2, 1), dtype=int)),
    ("mask-2d", r"mask must be 1-D .*got shape \(1, 2\)", R2, Z2, {"mask": torch.ones(1, 2) > 0}),
    ("ids-no-length", r"group_ids must be a 1-D sequence .*got int", [1.0], 7),
    # reward types numpy/torch would convert silently
    ("complex-list", _REAL + r"complex values", [1 + 1j, 0.0], Z2),
    ("complex-tensor", _REAL + r"a torch.complex64 tensor", torch.tensor([1 + 1j, 0.0]), Z2),
    ("string-rewards", _NUMBERS + r"<U1 values such as \['1'\]", ["1", "0"], Z2),
    ("none-reward", _REAL + r"NoneType None at row 1", [1.0, None], Z2),
    ("mixed-string-reward", _NUMBERS + r"<U32 values such as \[.1.0.\]", [1.0, "1"], Z2),
    (
        "object-none-reward",
        _REAL + r"NoneType None at row 0",
        np.array([None, 1.0], dtype=object),
        Z2,
    ),
    (
        "dict-rewards",
        r"rewards must be a 1-D tensor, array or list of numbers, got a dict",
        {0: 1.0},
        [0],
    ),
    (
        "datetime-rewards",
        _NUMBERS + r"datetime64",
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        [0],
    ),
    # group ids
    ("ids-set", r"group_ids must be a 1-D sequence .*got a set", R2, {0, 1}),
    ("ids-dict", r"group_ids must be a 1-D sequence .*got a dict", R2, {"a": 0, "b": 1}),
    ("ids-string", r"group_ids must be a 1-D sequence .*got a str", R2, "ab"),
    ("ids-floats", r"group_ids must hold integers or hashable ids, got floats", R2, [0.5, 1.5]),
    ("ids-float-tensor", r"group_ids must hold integers .*torch.float32 tensor", R2, _FLOATS),
    ("ids-unhashable", r"group_ids must be hashable", R2, [[0], [1]]),
]
#: (label, message, mask) of masks every estimator refuses, on the rewards R2 in group Z2
BAD_MASKS: list[tuple[str, str, Any]] = [
    ("mask-uint16-2", r"0/1 integers, got values \[2\]", np.array([1, 2], dtype=np.uint16)),
    (
        "mask-uint64-big",
        r"got values \[18446744073709551615\]",
        np.array([1, 2**64 - 1], dtype=np.uint64),
    ),
    ("mask-torch-uint16-3", r"got values \[3\]", torch.tensor([3, 1], dtype=torch.uint16)),
    ("mask-object", r"got dtype object", np.array([True, None], dtype=object)),
    ("mask-float", r"got dtype float64", [0.5, 1.0]),
    ("mask-float-tensor", r"got dtype torch.float32", torch.tensor([1.0, 0.0])),
    ("mask-strings", r"got dtype <U", ["yes", "no"]),
]
#: (label, message, clusters): reported as clusters, not group_ids
BAD_CLUSTERS: list[tuple[str, str, Any]] = [
    ("clusters-floats", r"^clusters must hold integers or hashable ids, got floats", [0.5, 0.5]),
    ("clusters-unhashable", r"^clusters must be hashable", [["a"], ["a"]]),
    ("clusters-bytes", r"clusters labels must be strings, integers.*got bytes b'x'", [b"x", b"x"]),
    (
        "clusters-nan-label",
        r"clusters labels must be .*got float nan",
        np.array([math.nan, math.nan], dtype=object),
    ),
    (
        "clusters-not-constant",
        r"clusters must be constant within a group; group #0 has rows labelled 'a' and 'b'",
        ["a", "b"],
    ),
    ("clusters-set", r"clusters must be a 1-D sequence .*got a set", {"a", "b"}),
]
for name in NAMES:
    # issue #11 item 4: overflow must not give inf/NaN, nor reach a running prior (ebpo_bb refuses
    # rewards outside [0, 1] first)
    bb = name == "ebpo_bb"
    variance = r"rewards are too large: the reward variance of group 0 overflows float64"
    batch_case(
        name, "overflow-1e200", r"\[0, 1\]" if bb else variance, [0, 1e200] * 2, [0, 0, 1, 1]
    )
    mean = r"reward mean of group 'g' overflows"
    batch_case(name, "overflow-1e308-mean", r"\[0, 1\]" if bb else mean, [1.7e308] * 2, ["g", "g"])
    for label, match, *args in BAD_BATCHES:
        batch_case(name, label, match, *args[:2], **(args[2] if len(args) > 2 else {}))
    for label, match, mask in BAD_MASKS:
        batch_case(name, label, r"mask must be boolean .*" + match, R2, Z2, mask=mask)
    batch_case(
        name, "mask-set", r"mask must be a 1-D sequence .*got a set", R2, Z2, mask={True, False}
    )
    for label, match, clusters in BAD_CLUSTERS:
        batch_case(name, label, match, R2, Z2, clusters=clusters)
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


_SPARSE = r"dense tensor, got a sparse tensor \(layout sparse_"
UNREADABLE_TENSORS: list[tuple[str, Callable[[torch.Tensor], torch.Tensor], str]] = [
    ("meta", lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), r"got a meta tensor"),
    ("sparse-coo", lambda t: t.to_sparse(), _SPARSE + r"coo\)"),
    ("sparse-csr", _quietly(lambda t: t.reshape(2, 2).to_sparse_csr()), _SPARSE + r"csr\)"),
    ("sparse-csc", _quietly(lambda t: t.reshape(2, 2).to_sparse_csc()), _SPARSE + r"csc\)"),
    ("sparse-bsr", _quietly(lambda t: t.reshape(2, 2).to_sparse_bsr((1, 1))), _SPARSE + r"bsr\)"),
    ("nested", _nested, r"a 1-D tensor, got a nested tensor"),
]
#: token_counts: read only with whiten="tokens", but checked for every estimator
_COUNTS = r"token_counts must be finite numbers >= 0 .*got "
BAD_TOKEN_COUNTS: list[tuple[str, Any, str]] = [
    ("negative", [3, -1, 4, 1], _COUNTS + r"-1.0 at row 1"),
    ("nan", [3, math.nan, 4, 1], _COUNTS + r"nan at row 1"),
    ("inf", [3, 1, math.inf, 1], r"got inf at row 2"),
    ("strings", ["3", "1", "4", "1"], r"token_counts must be numbers, got <U1 values"),
    ("none", [3, None, 4, 1], r"token_counts must be real numbers, got NoneType None at row 1"),
    ("complex", [3, 1j, 4, 1], r"token_counts must be real numbers, got complex values"),
    ("bools", [True, False, True, True], r"token_counts must be numbers of tokens, got booleans"),
    (
        "bool-tensor",
        torch.tensor([True, False, True, True]),
        r"token_counts must be numbers of tokens, got a torch.bool tensor",
    ),
    ("shorter", [3, 1, 4], r"token_counts has 3 entries but rewards has 4"),
    ("2d", np.ones((4, 1)), r"token_counts must be 1-D .*got shape \(4, 1\)"),
    ("scalar", 4, r"token_counts must be a 1-D sequence .*got int"),
    ("set", {3, 1, 4, 2}, r"token_counts must be a 1-D sequence .*got a set"),
]
for name in NAMES:
    for label, make, match in UNREADABLE_TENSORS:
        bad = {"rewards": make(_R4), "group_ids": make(_IDS4), "mask": make(_MASK4)}
        batch_case(name, f"rewards-{label}", rf"^rewards must be .*{match}", bad["rewards"], _IDS4)
        batch_case(
            name, f"group_ids-{label}", rf"^group_ids must be .*{match}", _R4, bad["group_ids"]
        )
        batch_case(name, f"mask-{label}", rf"^mask must be .*{match}", _R4, _IDS4, mask=bad["mask"])
        clusters, counts = make(_IDS4), make(torch.tensor([3, 1, 4, 1]))
        batch_case(
            name,
            f"clusters-{label}",
            rf"^clusters must be .*{match}",
            _R4,
            _IDS4,
            clusters=clusters,
        )
        batch_case(
            name,
            f"token-counts-{label}",
            rf"^token_counts must be .*{match}",
            _R4,
            _IDS4,
            token_counts=counts,
        )
    batch_case(
        name,
        "rewards-quantized",
        r"^rewards must be a plain tensor, got a quantized torch.quint8 tensor; pass rewards.dequantize\(\)",
        _quantized(_R4),
        _IDS4,
    )
    quantized = _quantized(torch.ones(4))
    batch_case(
        name,
        "mask-quantized",
        r"^mask must be a plain tensor, got a quantized",
        _R4,
        _IDS4,
        mask=quantized,
    )
    for label, counts, match in BAD_TOKEN_COUNTS:
        batch_case(name, f"token-counts-{label}", match, _R4, _IDS4, token_counts=counts)
_SPREAD = r"the spread of this batch overflows float64"
_SPREAD_400 = torch.tensor([-1e153, 1e153] * 200 + [0.0] * 400, dtype=torch.float64)
_SPREAD_200 = torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64)
_TOKENS = {"whiten": "tokens"}
_NEEDED = (
    r"token_counts is required by estimator 'reinforce_pp_baseline' with whiten='tokens' \(it "
    r"weighs responses by "
    r"their tokens: pass the number of tokens of each response\)"
)
batch_case(
    "reinforce_pp_baseline", "tokens-without-token-counts", _NEEDED, _R4, _IDS4, options=_TOKENS
)
batch_case(
    "reinforce_pp_baseline",
    "tokens-spread-overflow",
    _SPREAD,
    _SPREAD_400,
    np.repeat(np.arange(400), 2),
    options=_TOKENS,
    token_counts=[1000] * 800,
)

# issue #11 item 7: fp16 ±60000 gave ±inf; the output must fit the caller's dtype
_FIT = r"the advantages of this batch .* do not fit the output dtype float16"
_FIT_120000 = r"the advantages of this batch \(up to 120000 in magnitude\) do not fit the output dtype float16"
for name, options in [
    ("rloo", {}),
    ("dr_grpo", {}),
    ("jspo", {}),
    ("jspo_plus_plus", {}),
    ("ebpo", {"normalize": "none"}),
    ("grpo", {"scale": "none"}),
]:
    fit = _FIT_120000 if name in ("rloo", "jspo") else _FIT
    batch_case(name, "fp16-overflow", fit, F16, [0, 0, 0, 0], options=options)
batch_case(
    "grpo",
    "float32-out-overflow-from-list",
    r"do not fit the output dtype float32 .*float64 tensor",
    [0.0, 1e50, 0.0, 1e50],
    [0, 0, 1, 1],
    options={"scale": "none"},
)
_PAIRS_200, _PAIRS_400 = np.repeat(np.arange(200), 2), np.repeat(np.arange(400), 2)
batch_case(
    "ebpo", "prior-overflow", r"running statistics overflow float64", _SPREAD_200, _PAIRS_200
)
batch_case("reinforce_pp_baseline", "spread-overflow", _SPREAD, _SPREAD_400, _PAIRS_400)
batch_case(
    "grpo", "batch-std-overflow", _SPREAD, _SPREAD_200, _PAIRS_200, options={"scale": "batch"}
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
_CLUSTERS_NEEDED = r"clusters is required .*per_cluster=True"
batch_case(
    "ebpo", "per-cluster-needs-clusters", _CLUSTERS_NEEDED, R2, Z2, options={"per_cluster": True}
)
_BB = r"rewards must lie in \[0, 1\] for ebpo_bb .*got "
batch_case("ebpo_bb", "reward-above-1", _BB + r"2.0", [1.0, 2.0], Z2)
batch_case("ebpo_bb", "reward-below-0", _BB + r"-0.5", [-0.5, 1.0], Z2)


# ---------------------------------------------------------------------- bad options, every estimator
def refused(names: Any, option: str, must: str, values: Any) -> list[tuple[str, dict, str]]:
    """Rows ``(name, {option: v}, "<option> <must>, got <v!r>")`` for every name and value."""
    return [(n, {option: v}, rf"{option} {must}, got " + repr(v)) for n in names for v in values]


def one_of(*choices: str) -> str:
    return r"must be one of \[" + ", ".join(map(repr, choices)) + r"\]"


def unknown(name: str, option: str, value: Any) -> tuple[str, dict, str]:
    return (name, {option: value}, rf"unknown option\(s\) \['{option}'\] for estimator {name!r}")


POSITIVE = "must be a positive finite number"
BAD_OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("nope", {}, r"unknown estimator 'nope'; expected one of \["),
    (None, {}, r"unknown estimator None"),
    *refused(NAMES, "eps", POSITIVE, [0, -1.0, math.nan, math.inf, "1e-6", True, None]),
    *refused(NAMES, "nan_policy", one_of("raise", "mask"), ["ignore", None, 1]),
    *[unknown(name, "priorr", "history") for name in NAMES],
    *refused(["grpo", "dr_grpo"], "scale", one_of("group", "batch", "none"), ["token", None]),
    *refused(
        ["reinforce_pp_baseline"],
        "whiten",
        one_of("responses", "tokens"),
        ["token", "batch", None, True],
    ),
    unknown("grpo", "whiten", "tokens"),
    *refused(["jspo"], "lambda_form", one_of("released_code", "project_page"), ["page", None, 1]),
    *refused(
        ["jspo_plus_plus"],
        "smooth_coef",
        r"must be a number in \[0, 1\] \(0 = no smoothing\)",
        [-0.1, 1.5, math.nan, math.inf, True, "0.99", None],
    ),
    unknown("jspo_plus_plus", "lambda_form", "project_page"),
    *refused(["ebpo", "ebpo_bb"], "prior", one_of("history", "batch", "ema"), ["forever", None]),
    *refused(["ebpo", "ebpo_bb"], "half_life", POSITIVE, [0, -1, math.nan, math.inf, True, "50"]),
    *refused(["ebpo", "ebpo_bb"], "normalize", one_of("batch", "center", "none"), ["group", None]),
    *refused(["ebpo", "ebpo_bb"], "per_cluster", "must be True or False", [1, "yes", None]),
    *refused(
        ["ebpo", "ebpo_bb"], "min_cluster_groups", "must be a positive integer", [0, -1, 1.5, True]
    ),
    *refused(["ebpo"], "within_variance", one_of("pooled", "within"), ["x", None]),
    *refused(["ebpo"], "tau2_mode", one_of("raw", "corrected"), ["x", None]),
    *refused(
        ["ebpo"], "prior_mean_from", one_of("rewards", "group_means"), ["mean", "group_mean", None]
    ),
    *refused(["ebpo_bb"], "warmup_groups", "must be a positive integer", [0, 2.5, True]),
    unknown("ebpo_bb", "within_variance", "within"),
    unknown("ebpo_bb", "prior_mean_from", "group_means"),
    unknown("rloo", "scale", "group"),
]
for name, options, match in BAD_OPTIONS:
    label = "-".join(f"{k}={v!r}" for k, v in options.items()) or "name"
    make = lambda name=name, options=options: new_estimator(name, **options)  # noqa: E731
    case(f"make-{name}-{label}", None, make, match)


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
BadState = tuple[str, str, dict[str, Any], dict[str, Any], str]


def ed(
    label: str, path: str, value: Any, match: str, name: str = "ebpo", options: Any = None
) -> BadState:
    """A :data:`BAD_STATES` row: what a fed ``name`` with ``options`` saves, with ``path`` (dotted;
    numbers index lists) set to ``value`` (:data:`DELETE`: removed); loaded with the same options."""
    options = options or {}
    keys = tuple(int(key) if key.isdigit() else key for key in path.split("."))
    return (label, name, options, edited(saved(name, **options), keys, value), match)


def pp(*row: Any) -> BadState:
    return ed(*row, name="jspo_plus_plus")


def clustered(*row: Any) -> BadState:
    return ed(*row, options=CLUSTERED)


def ema(*row: Any) -> BadState:
    return ed(*row, options={"prior": "ema"})


_STEPS = r"steps must be a non-negative integer, got "
_AT_MOST = r"steps must be at most 2\*\*53 .*got "
_MEAN = r"global\.rewards\.mean = "
_PP, _BB = r"invalid jspo_plus_plus state: ", r"invalid ebpo_bb state: "
_WEIGHT = r"weight must lie in \[1, steps\]"
_EPS = r"options\.eps: eps must be a positive finite number, got "
_COUNT = r"must have finite numbers 'count'"
_M2 = r"count >= 0 and m2 >= 0"
_FINITE = r"running moments state must be finite"
BAD_STATES: list[BadState] = [
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
    ed("no-options", "options", DELETE, r"state has no 'options' dict"),
    ed("options-not-dict", "options", "history", r"state has no 'options' dict"),
    ed("option-missing", "options.prior", DELETE, r"state does not record option 'prior'"),
    ed("steps-inf", "steps", math.inf, _STEPS + r"inf"),
    ed("steps-negative", "steps", -1, _STEPS + r"-1"),
    ed("steps-fraction", "steps", 1.5, _STEPS + r"1.5"),
    ed("steps-string", "steps", "3", _STEPS + r"'3'"),
    ed("steps-bool", "steps", True, _STEPS + r"True"),
    ed("steps-missing", "steps", DELETE, r"invalid ebpo state: missing key 'steps'"),
    ed("global-missing", "global", DELETE, r"invalid ebpo state: 'global'"),
    ed(
        "global-not-dict",
        "global",
        5,
        r"invalid ebpo state: global must be a dict with keys \['rewards', 'group_means', "
        r"'group_variances'\], got int 5",
    ),
    ed("moments-missing", "global.rewards.m2", DELETE, _COUNT + r", 'mean', 'm2'"),
    ed("count-10**400", "global.rewards.count", 10**400, _COUNT),
    ed("count-string", "global.rewards.count", "6", _COUNT),
    ed("count-bool", "global.group_means.count", True, _COUNT),
    ed("count-negative", "global.rewards.count", -6.0, _M2),
    ed("m2-negative", "global.rewards.m2", -1.0, _M2),
    ed("mean-nan", "global.rewards.mean", math.nan, _FINITE),
    ed("m2-inf", "global.group_means.m2", math.inf, _FINITE),
    ed(
        "empty-with-mean",
        "global.group_variances",
        {"count": 0.0, "mean": 0.5, "m2": 0.0},
        r"with count 0 must have mean 0 and m2 0",
    ),
    ed(
        "means-outnumber-rewards",
        "global.group_means.count",
        7.0,
        r"count\(group_variances\) <= count\(group_means\) <= count\(rewards\), got 3.0, 7.0, 6.0",
    ),
    ed(
        "variances-outnumber-means",
        "global.group_variances.count",
        4.0,
        r"prior state is inconsistent: expected count\(group_variances\)",
    ),
    ed(
        "negative-mean-variance",
        "global.group_variances.mean",
        -0.1,
        r"the mean group variance is negative",
    ),
    clustered("clusters-not-list", "clusters", {"a": {}}, r"'clusters' must be a list"),
    clustered(
        "cluster-entry-malformed", "clusters.0", ["a"], r"must be a \[label, prior state\] pair"
    ),
    clustered("cluster-duplicate", "clusters.1.0", "a", r"cluster label 'a' appears twice"),
    clustered(
        "cluster-bytes-label", "clusters.0.0", b"a", r"cluster labels must be strings.*bytes"
    ),
    clustered("cluster-dict-label", "clusters.0.0", {"a": 1}, r"cluster labels must be .*dict"),
    clustered("cluster-prior-corrupt", "clusters.0.1.rewards.count", -1.0, _M2),
    ed(
        "clusters-without-per-cluster",
        "clusters",
        saved(**CLUSTERED)["clusters"],
        r"holds cluster priors but was saved with per_cluster=False",
    ),
]
# issue #21 item 12: a state that loads but makes every later call overflow is refused at load
BAD_STATES += [
    ed(
        "mean-1e308",
        "global.rewards.mean",
        1e308,
        r"invalid ebpo state: global\.rewards\.mean = 1e\+308 is too large: \|mean\| must be at most "
        r"1e\+150, or the next update overflows float64",
    ),
    ed("mean-minus-1e308", "global.rewards.mean", -1e308, _MEAN + r"-1e\+308 is too large"),
    ed("mean-1e160", "global.rewards.mean", 1e160, r"global\.rewards\.mean = 1e\+160 is too large"),
    ed(
        "group-means-mean-1e308",
        "global.group_means.mean",
        1e308,
        r"global\.group_means\.mean = 1e\+308 is too large",
    ),
    ed(
        "group-variances-mean-1e200",
        "global.group_variances.mean",
        1e200,
        r"global\.group_variances\.mean = 1e\+200 is too large",
    ),
    ed(
        "m2-1.7e308",
        "global.rewards.m2",
        1.7e308,
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
    clustered(
        "cluster-mean-1e308",
        "clusters.0.1.rewards.mean",
        1e308,
        r"clusters\['a'\]\.rewards\.mean = 1e\+308 is too large",
    ),
    ed(
        "bb-mean-1e308",
        "global.group_means.mean",
        1e308,
        r"invalid ebpo_bb state: global\.group_means\.mean = 1e\+308 is too large",
        "ebpo_bb",
    ),
    ema("ema-mean-1e308", "global.rewards.mean", 1e308, _MEAN + r"1e\+308 is too large"),
    ed(
        "pp-mean-sum-1e308",
        "mean_sum",
        1e308,
        r"invalid jspo_plus_plus state: mean_sum = 1e\+308 is too large: the smoothed mean "
        r"mean_sum/weight must be at most 1e\+150",
        "jspo_plus_plus",
        {"smooth_coef": 0.99},
    ),
    pp("pp-unsmoothed-mean-sum-1e308", "mean_sum", -1e308, r"mean_sum = -1e\+308 is too large"),
    pp("pp-steps-10**400", "steps", 10**400, _AT_MOST + r"an integer of 401 digits"),
    pp("pp-steps-2**53+1", "steps", 2**53 + 1, _AT_MOST + r"9007199254740993"),
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
    pp("pp-no-options", "options", DELETE, r"state has no 'options' dict"),
    pp(
        "pp-steps-missing",
        "steps",
        DELETE,
        r"invalid jspo_plus_plus state: missing key 'steps'",
    ),
    pp("pp-weight-missing", "weight", DELETE, r"missing 'weight'"),
    pp("pp-steps-negative", "steps", -1, _STEPS + r"-1"),
    pp("pp-steps-bool", "steps", True, _STEPS + r"True"),
    pp("pp-steps-float", "steps", 1.0, _STEPS + r"1.0"),
    pp("pp-weight-nan", "weight", math.nan, r"weight must be a finite number, got nan"),
    pp("pp-weight-string", "weight", "1", r"weight must be a finite number, got '1'"),
    pp("pp-mean-inf", "mean_sum", math.inf, r"mean_sum must be a finite number, got inf"),
    pp("pp-lambda-bool", "lambda_sum", False, r"lambda_sum must be a finite number, got False"),
    pp("pp-weight-above-steps", "weight", 2.5, _WEIGHT + r" = \[1, 1\], got 2.5"),
    pp("pp-weight-below-1", "weight", 0.5, _WEIGHT),
    pp(
        "pp-lambda-above-weight",
        "lambda_sum",
        1.5,
        r"lambda_sum must lie in \[0, weight\] = \[0, 1.0\] \(λ is in \[0, 1\]\), got 1.5",
    ),
    pp("pp-lambda-negative", "lambda_sum", -0.5, r"lambda_sum must lie in \[0, weight\]"),
    pp(
        "pp-sums-without-steps",
        "steps",
        0,
        r"a state with steps 0 must have weight, lambda_sum and mean_sum 0",
    ),
]
# issue 46 item 8: what no run writes was loaded, and every later call failed (or the key was
# dropped without a word): counts past 2**53, fractional counts without decay, unknown keys at
# every level, option values the constructor refuses
_INVALID = r"invalid ebpo state: "
_PAST_2_53 = r"global\.rewards\.count = 1e\+308 is more than 2\*\*53"
BAD_STATES += [
    ed("count-1e308", "global.rewards.count", 1e308, _INVALID + _PAST_2_53),
    ed(
        "count-2**54",
        "global.rewards.count",
        2.0**54,
        r"global\.rewards\.count = 1\.8014398509481984e\+16 is more than 2\*\*53",
    ),
    ema("ema-count-1e308", "global.rewards.count", 1e308, _PAST_2_53),
    ed("steps-10**30", "steps", 10**30, _INVALID + _AT_MOST + r"an integer of 31 digits"),
    ed("steps-2**53+1", "steps", 2**53 + 1, _AT_MOST + r"9007199254740993"),
    ed(
        "steps--10**5000",
        "steps",
        -(10**5000),
        _STEPS + r"an integer of more than 4,300 digits",
    ),
    ed(
        "count-fraction-history",
        "global.rewards.count",
        6.5,
        _INVALID + r"global\.rewards\.count = 6\.5 must be a whole number",
    ),
    ed(
        "count-fraction-batch-prior",
        "global.group_means.count",
        2.5,
        r"global\.group_means\.count = 2\.5 must be a whole number",
        "ebpo",
        {"prior": "batch"},
    ),
    clustered(
        "cluster-count-fraction",
        "clusters.0.1.group_means.count",
        1.5,
        r"clusters\['a'\]\.group_means\.count = 1\.5 must be a whole number",
    ),
    ed(
        "unknown-key",
        "junk",
        1,
        _INVALID + r"unknown key 'junk' in the state \(expected \['estimator', 'options', "
        r"'steps', 'global', 'clusters'\] there\)",
    ),
    ed(
        "unknown-option",
        "options.priorr",
        "history",
        _INVALID + r"unknown key 'options\.priorr' in the state \(expected \['prior', ",
    ),
    ed(
        "unknown-prior-key",
        "global.tau2",
        0.5,
        _INVALID + r"unknown key 'global\.tau2' in the state \(expected \['rewards', "
        r"'group_means', 'group_variances'\] there\)",
    ),
    ed(
        "unknown-moments-key",
        "global.rewards.variance",
        0.25,
        _INVALID + r"unknown key 'global\.rewards\.variance' in the state \(expected "
        r"\['count', 'mean', 'm2'\] there\)",
    ),
    clustered(
        "unknown-cluster-prior-key",
        "clusters.1.1.junk",
        {},
        r"unknown key \"clusters\['b'\]\.junk\"",
    ),
    ed("option-eps-nan", "options.eps", math.nan, _INVALID + _EPS + r"nan"),
    ed("option-eps-negative", "options.eps", -1.0, _EPS + r"-1\.0"),
    ed(
        "option-tau2_mode-unknown",
        "options.tau2_mode",
        "nope",
        r"options\.tau2_mode: tau2_mode must be one of \['raw', 'corrected'\], got 'nope'",
    ),
    ed(
        "option-half-life-inf",  # not compared under a history prior, but still a number
        "options.half_life",
        math.inf,
        r"options\.half_life: half_life must be a positive finite number, got inf",
    ),
    clustered(
        "option-min-cluster-groups-0",
        "options.min_cluster_groups",
        0,
        r"options\.min_cluster_groups: min_cluster_groups must be a positive integer, got 0",
    ),
    ed(
        "bb-option-warmup-groups-0",
        "options.warmup_groups",
        0,
        r"invalid ebpo_bb state: options\.warmup_groups: warmup_groups must be a positive integer",
        "ebpo_bb",
    ),
    ed("bb-count-1e308", "global.rewards.count", 1e308, _BB + _PAST_2_53, "ebpo_bb"),
    pp("pp-unknown-key", "lam", 0.5, _PP + r"unknown key 'lam' in the state"),
    pp(
        "pp-unknown-option",
        "options.smooth",
        0.5,
        r"invalid jspo_plus_plus state: unknown key 'options\.smooth' in the state \(expected "
        r"\['smooth_coef', 'eps'\] there\)",
    ),
    pp(
        "pp-option-eps-nan",
        "options.eps",
        math.nan,
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
    if new_estimator(name).state_dict() == {"estimator": name}
]
for label, name, options, state, match in BAD_STATES:
    est = fed(name, **options)
    case(
        f"load-{name}-{label}", est, lambda est=est, state=state: est.load_state_dict(state), match
    )
# old option names (issue 53, 8): the new name in the message; a state with both says so
for label, options, match in (
    ("renamed-prior-mean", {"prior_mean": "group_means"},
     r"unknown option\(s\) \['prior_mean'\] for estimator 'ebpo' \('prior_mean' was renamed "
     r"'prior_mean_from': write prior_mean_from=\.\.\.\)"),
    ("renamed-tau2", {"tau2": "raw"}, r"\('tau2' was renamed 'tau2_mode'"),
    ("old-and-new-names", {"prior_mean": "rewards", "prior_mean_from": "group_means"},
     r"\('prior_mean' is the old name of 'prior_mean_from', which is given too: drop "
     r"'prior_mean'\)"),
    ("option-typo", {"half_lif": 3}, r"\['half_lif'\] for estimator 'ebpo' \(did you mean "
     r"'half_life'\?\)"),
):  # fmt: skip
    case(f"make-ebpo-{label}", None, lambda o=options: ebpo.make_estimator("ebpo", **o), match)
_BOTH = fed("ebpo")
case(
    "load-ebpo-old-and-new-option-names",
    _BOTH,
    lambda: _BOTH.load_state_dict(
        {
            **_BOTH.state_dict(),
            "options": {**_BOTH.state_dict()["options"], "prior_mean": "rewards"},
        }
    ),
    r"the saved options hold both 'prior_mean' \(the option's name in ebpo 0\.1\.0\) and "
    r"'prior_mean_from' \(its name now\), with values 'rewards' and 'rewards': a state records "
    r"one of them",
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
        got = est(*GOOD, **GOOD_INPUTS)
        expected = twin(*GOOD, **GOOD_INPUTS)
        torch.testing.assert_close(got.advantages, expected.advantages, rtol=0, atol=0)
    assert json.dumps(est.state_dict()) == json.dumps(twin.state_dict())


# ---------------------------------------------------------------------- hostile but legitimate
def same_as(
    name: str,
    expected_call: Callable[[ebpo.AdvantageEstimator], Any],
    hostile_call: Callable[[ebpo.AdvantageEstimator], Any],
):
    """Two fresh estimators: the hostile call gives the same advantages and state as the plain one."""
    plain, hostile = new_estimator(name), new_estimator(name)
    expected, got = expected_call(plain), hostile_call(hostile)
    n = len(expected.advantages)  # rows past n are padding: advantage 0
    torch.testing.assert_close(
        got.advantages[:n].double(), expected.advantages.double(), rtol=0, atol=0
    )
    assert got.advantages[n:].abs().sum() == 0
    assert json.dumps(hostile.state_dict()) == json.dumps(plain.state_dict())


def _good(e: Any) -> Any:
    return e(*GOOD)


def _half_masked(e: Any) -> Any:
    return e(*GOOD, mask=[True, False] * 3)


#: mask types read as the booleans [True, False] * 3
_MASKS = {
    "mask-uint16": np.array([1, 0] * 3, dtype=np.uint16),
    "mask-uint64": np.array([1, 0] * 3, dtype=np.uint64),
    "mask-torch-uint8": torch.tensor([1, 0] * 3, dtype=torch.uint8),
    "mask-torch-uint16": torch.tensor([1, 0] * 3, dtype=torch.uint16),
    "mask-torch-uint64": torch.tensor([1, 0] * 3, dtype=torch.uint64),
}
#: group ids that make the same three groups as GOOD's
_IDS = {
    "ids-at-least-2**63-list": [2**63 + 5, 2**63 + 5, 2**63, 2**63, -1, -1],
    "ids-2**63-apart-list": [2**63, 2**63, 2**63 + 1, 2**63 + 1, 2**63 + 2, 2**63 + 2],
    "ids-uint64-array": np.array([2**64 - 1] * 2 + [2**63] * 2 + [0] * 2, dtype=np.uint64),
    "ids-uint64-tensor": torch.tensor([2**64 - 1] * 2 + [2**63] * 2 + [0] * 2, dtype=torch.uint64),
    "ids-int64-extremes": [-(2**63)] * 2 + [2**63 - 1] * 2 + [0] * 2,
    "ids-tuple": tuple(GOOD[1]),
    "ids-strings-array": np.array(["x", "x", "y", "y", "z", "z"]),
}
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
        _good,
        lambda e: e(
            GOOD[0] + [math.nan, 5.0, -1.0], GOOD[1] + [9, 0, 7], mask=[True] * 6 + [False] * 3
        ),
    ),
    (
        "nan-with-nan-policy-mask",
        lambda e: e(*GOOD, mask=[True] * 5 + [False]),
        lambda e: e(GOOD[0][:5] + [math.nan], GOOD[1]),
    ),  # the hostile estimator is rebuilt with nan_policy="mask" below
    *[(label, _half_masked, lambda e, m=mask: e(*GOOD, mask=m)) for label, mask in _MASKS.items()],
    *[(label, _good, lambda e, ids=ids: e(GOOD[0], ids)) for label, ids in _IDS.items()],
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
        expected = plain(new_estimator(name))
        got = hostile(new_estimator(name, nan_policy="mask"))
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
    res = new_estimator(name)(rewards, torch.arange(n) * 7_919)  # sparse ids: the sorting path
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
    est = new_estimator(name, **options)
    est.load_state_dict(state)
    for _ in range(3):
        res = est(torch.tensor(GOOD[0], dtype=torch.float64), GOOD[1])
        assert torch.isfinite(res.advantages).all()


def test_cluster_label_2_pow_63_is_saved_exactly():
    """Issue #11 item 7: it was stored as a negative number."""
    est = new_estimator("ebpo", **CLUSTERED)
    est(*GOOD, clusters=[2**63, 2**63, 2**64 - 1, 2**64 - 1, -1, -1])
    labels = [label for label, _ in json.loads(json.dumps(est.state_dict()))["clusters"]]
    assert sorted(labels) == [-1, 2**63, 2**64 - 1]
    restored = new_estimator("ebpo", **CLUSTERED)
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
    hostile, fresh = new_estimator(name), new_estimator(name)
    for step, (rewards, group_ids) in enumerate(good):
        expected, got = fresh(rewards, group_ids), hostile(rewards, group_ids)
        torch.testing.assert_close(got.advantages, expected.advantages, rtol=0, atol=0)
        assert got.metrics == expected.metrics
        if step < len(rejected):
            (bad_rewards, bad_ids), kwargs = rejected[step]
            with pytest.raises(ValueError):
                hostile(bad_rewards, bad_ids, **kwargs)
    assert json.dumps(hostile.state_dict()) == json.dumps(fresh.state_dict())
