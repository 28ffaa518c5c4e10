"""The LLM topic labeller and its OpenAI-compatible client: prompt, parsing, and the guards on the
API key (loopback-only plain http, no redirects, no key in any message)."""

from __future__ import annotations

import contextlib
import html
import http.server
import json
import threading
import urllib.parse

import pytest

from ebpo import curriculum
from ebpo.curriculum import MATH_DOMAINS, UNCLASSIFIED
from ebpo.curriculum.llm import check_api_key


def test_llm_prompt_lists_the_nine_domains_and_answers_parse():
    prompt = curriculum.llm_topic_prompt("What is 1 + 1?")
    assert len(MATH_DOMAINS) == 9 and all(d in prompt for d in MATH_DOMAINS)
    assert "What is 1 + 1?" in prompt
    assert curriculum.parse_llm_topic("Linear Algebra") == "Linear Algebra"
    assert curriculum.parse_llm_topic("**discrete mathematics**.") == "Discrete Mathematics"
    assert (
        curriculum.parse_llm_topic("Domain: Probability & Statistics") == "Probability & Statistics"
    )
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
            answer = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": content}}]}
            )
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
def recording_server(respond):
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
    # a short poll interval: shutdown() waits up to one, once per test
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def send_answer(handler, status=200, body=b"", headers=()):
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
    with recording_server(lambda h: send_answer(h, body=_CHAT_ANSWER)) as (other_host, other_seen):
        location = f"{other_host}/steal"
        with recording_server(lambda h: send_answer(h, code, headers=[("Location", location)])) as (
            url,
            seen,
        ):
            complete = curriculum.openai_compatible_completer(
                f"{url}/v1", "judge", api_key="sk-secret-123"
            )
            with pytest.raises(
                ValueError, match=rf"redirects \(HTTP {code}\) to {other_host}/steal"
            ) as error:
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
        assert callable(
            curriculum.openai_compatible_completer(
                base_url, "judge", api_key="k", allow_insecure_http=True
            )
        )


def test_api_key_comes_only_from_a_named_variable():
    env = {"OPENAI_API_KEY": "sk-openai", "MY_LLM_KEY": "sk-mine"}
    # OPENAI_API_KEY is not sent to a server that is not OpenAI unless named
    assert curriculum.llm_api_key("http://127.0.0.1:8000/v1", None, environ=env) is None
    assert curriculum.llm_api_key("https://llm.example.com/v1", None, environ=env) is None
    assert (
        curriculum.llm_api_key("http://api.openai.com/v1", None, environ=env) is None
    )  # not https
    assert curriculum.llm_api_key("https://api.openai.com/v1", None, environ=env) == "sk-openai"
    assert (
        curriculum.llm_api_key("https://llm.example.com/v1", "MY_LLM_KEY", environ=env) == "sk-mine"
    )
    assert (
        curriculum.llm_api_key("http://127.0.0.1/v1", "OPENAI_API_KEY", environ=env) == "sk-openai"
    )
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
        assert (
            main([*argv, "--llm-base-url", url, "--llm-model", "judge", "--difficulty", "none"])
            == 0
        )
    assert [auth for _, auth, _ in requests] == [None]


def test_unreachable_endpoint_is_one_value_error_naming_the_url():
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    complete = curriculum.openai_compatible_completer(
        f"http://127.0.0.1:{port}/v1", "judge", api_key="sk-x"
    )
    with pytest.raises(
        ValueError,
        match=rf"^cannot reach the LLM endpoint http://127\.0\.0\.1:{port}/v1/chat/completions",
    ):
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
        send_answer(handler, status, body + handler.headers["Authorization"].encode())

    with recording_server(respond) as (url, _):
        complete = curriculum.openai_compatible_completer(
            f"{url}/v1?token=q-secret", "judge", api_key="sk-secret-123"
        )
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


# ------------------------------------------------------------- the key: checked, never shown
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("sk-secret\n", "sk-secret"),  # issue #21 item 9: `MYKEY=$'sk-secret\n'` was printed
        ("\r\n sk-secret\t\r\n", "sk-secret"),
        ("\xa0sk-secret\u3000", "sk-secret"),  # Unicode spaces around it
        ("sk-'\"\\%/+= <>&x", "sk-'\"\\%/+= <>&x"),  # printable ASCII: kept as it is
    ],
)
def test_api_key_is_stripped_of_surrounding_whitespace(value, expected):
    assert curriculum.llm_api_key("https://x.example/v1", "MYKEY", environ={"MYKEY": value}) == (
        expected
    )
    assert check_api_key(value, "api_key") == expected


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("sk-sec\nret", "control character"),
        ("sk-sec\rret", "control character"),
        ("sk-\tsecret", "control character"),
        ("sk-\x1b[0msecret", "control character"),
        ("sk-secret\x7fx", "control character"),
        ("sk-s\u00e9cret", "not printable ASCII"),
        ("\ufeffsk-secret", "not printable ASCII"),  # a BOM is not whitespace
        ("sk-\u200bsecret", "not printable ASCII"),
        ("sk-\udc80secret", "not printable ASCII"),  # a non-UTF-8 byte in the environment
        (" \n\t", "blank"),
    ],
)
def test_api_key_with_control_or_non_ascii_characters_is_refused_unshown(value, match):
    with pytest.raises(ValueError, match=rf"the environment variable MYKEY\) .*{match}") as error:
        curriculum.llm_api_key("https://x.example/v1", "MYKEY", environ={"MYKEY": value})
    assert "secret" not in str(error.value)
    with pytest.raises(ValueError, match=rf"^the API key \(api_key\) .*{match}") as error:
        curriculum.openai_compatible_completer("https://x.example/v1", "judge", api_key=value)
    assert "secret" not in str(error.value)


def test_api_key_that_is_not_text_is_refused_unshown():
    with pytest.raises(ValueError, match=r"must be text, got a bytes$"):
        curriculum.openai_compatible_completer("https://x.example/v1", "judge", api_key=b"sk-z")


def test_echoed_key_is_redacted_in_every_form():
    # Issue #21 item 9: only the raw key was replaced; a key with quotes or backslashes echoed as
    # repr / JSON / URL-encoded text went through.
    key = "sk-'Core\"\\/%+&<x> y"

    def respond(handler):
        auth = handler.headers["Authorization"]
        forms = [auth, repr(auth), json.dumps(auth), json.dumps(json.dumps(auth))]
        forms += [urllib.parse.quote(auth, safe=""), urllib.parse.quote_plus(auth)]
        forms += [html.escape(auth), repr(auth.encode()), auth.upper()]
        send_answer(handler, 200, " | ".join(forms).encode())

    with recording_server(respond) as (url, seen):
        complete = curriculum.openai_compatible_completer(f"{url}/v1", "judge", api_key=key)
        with pytest.raises(ValueError, match="did not answer in the chat-completions") as error:
            complete("a sum")
    assert seen[0][2]["Authorization"] == f"Bearer {key}"
    assert "core" not in str(error.value).lower() and "<key>" in str(error.value)
