"""Hostile inputs to the LLM-labelling client and its API key (issue #11 item 6, issue #21 item 9).

* ``CLI_CASES``: ``ebpo data label --topic llm`` misconfigured (unreachable URL, a key over plain
  http to another host, a key variable that is not set...): one line, exit 2, no file written,
  and the key never printed.
* ``ACCEPTED_KEYS`` × ``ECHOES``: keys with quotes, backslashes, ``%``, ``&<>``, inner spaces and
  surrounding line breaks (stripped), sent to a server on 127.0.0.1 that echoes the
  ``Authorization`` header in every form (raw, repr, ascii, bytes repr, JSON, JSON twice, ``\\/``,
  URL-encoded, HTML-escaped, upper case) in its status line, body, redirect target or a broken
  status line. Through the library and through ``ebpo data label`` (in-process ``main()``), the
  error text never holds the key in any form: each key holds a distinctive alphanumeric core
  (``Zq7core...``), which every one of these encodings leaves intact, and the core must not
  appear, in any case.
* ``REFUSED_KEYS``: keys with control characters (inner newline, CR, tab, escape, DEL) or
  characters that are not printable ASCII (accents, curly quotes, zero-width space, BOM, NBSP
  inside, emoji, a non-UTF-8 byte): refused before any request with a message naming the
  variable, never the key.

Every server binds 127.0.0.1 and answers each request once; each case makes at most one request.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import urllib.parse

import pytest

from ebpo import curriculum
from tests.curriculum.test_llm import recording_server
from tests.hostile.harness import (
    CliCase,
    assert_user_error,
    check_cli_error,
    cli_table,
    ids,
    run_cli,
)


def _input_file(tmp):
    (tmp / "in.jsonl").write_text(
        '{"problem": "the rank of a matrix", "answer": "2"}\n{"problem": "a sum", "answer": "3"}\n'
    )


NO_MODEL = ["data", "label", "{tmp}/in.jsonl", "-o", "{tmp}/out.jsonl", "--topic", "llm"]
LABEL = [*NO_MODEL, "--llm-model", "judge"]
KEY = "sk-hostile-secret-123"  # must never reach stdout or stderr
PREFIX = r"^ebpo data label: error: "


def _llm_case(
    case_id: str, base_url: str, match: str, *extra: str, env: dict[str, str] | None = None
) -> CliCase:
    """``ebpo data label IN -o OUT --topic llm --llm-model judge --llm-base-url URL *extra``."""
    argv = [*LABEL, "--llm-base-url", base_url, *extra]
    return CliCase(case_id, argv, PREFIX + match, setup=_input_file, env=env or {})


#: ``ebpo data label IN -o OUT --topic llm --llm-model judge --llm-base-url ARGUMENTS``
LLM_TABLE = r"""
    llm-unreachable-url | http://127.0.0.1:9/v1 | cannot reach the LLM endpoint http://127\.0\.0\.1:9/v1/chat/completions
    llm-openai-without-key | https://api.openai.com/v1 | api\.openai\.com needs a key: set OPENAI_API_KEY
    llm-bad-port | http://127.0.0.1:99999/v1 | base_url has an invalid port: http://127\.0\.0\.1/v1
    llm-not-http | ftp://127.0.0.1/v1 | base_url must be an http\(s\) URL
"""
LLM_BASE_URL = [*LABEL, "--llm-base-url"]
KEY_ENV = ("--llm-api-key-env", "EBPO_HOSTILE_KEY")
CLI_CASES = [
    *cli_table(LLM_BASE_URL, PREFIX, LLM_TABLE, _input_file),
    _llm_case(
        "llm-unreachable-url-with-key",
        "http://localhost:9/v1",
        r"cannot reach the LLM endpoint http://localhost:9/v1/chat/completions",
        *KEY_ENV,
        env={"EBPO_HOSTILE_KEY": KEY},
    ),
    _llm_case(
        "llm-http-key-to-other-host",
        "http://llm.example.com/v1",
        r"refusing to send the API key over plain http to llm\.example\.com",
        *KEY_ENV,
        env={"EBPO_HOSTILE_KEY": KEY},
    ),
    _llm_case(
        "llm-missing-key-variable",
        "https://llm.example.com/v1",
        r"the environment variable EBPO_HOSTILE_UNSET_KEY is not set",
        "--llm-api-key-env",
        "EBPO_HOSTILE_UNSET_KEY",
    ),
    _llm_case(
        "llm-empty-key-variable",
        "https://llm.example.com/v1",
        r"the environment variable EBPO_HOSTILE_KEY is not set or empty",
        *KEY_ENV,
        env={"EBPO_HOSTILE_KEY": ""},
    ),
    _llm_case(
        "llm-key-pasted-as-variable-name",
        "https://llm.example.com/v1",
        r"--llm-api-key-env must be the NAME of an environment variable",
        "--llm-api-key-env",
        KEY,
    ),
    _llm_case(
        "llm-user-info-in-url",
        f"http://user:{KEY}@127.0.0.1:9/v1",
        r"base_url must not hold user info",
    ),
    CliCase(
        "llm-no-model",
        [*NO_MODEL, "--llm-base-url", "http://127.0.0.1:9/v1"],
        PREFIX + r"--topic llm needs --llm-base-url .* and --llm-model",
        setup=_input_file,
    ),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=ids(CLI_CASES))
def test_llm_label_user_error(case, tmp_path, monkeypatch):
    for name in ("OPENAI_API_KEY", "EBPO_HOSTILE_UNSET_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = check_cli_error(case, tmp_path, monkeypatch)
    assert KEY not in result.err and KEY not in result.out


# ------------------------------------------------------------ keys echoed back by the server
def _key(prefix: str, index: int, suffix: str = "") -> tuple[str, str]:
    """(key, its distinctive core): the core is alphanumeric, so every encoding keeps it whole."""
    core = f"Zq7core{index}X"
    return prefix + core + suffix, core


ACCEPTED_KEYS = {
    "plain": _key("sk-", 0, "-abc"),
    "double-quotes": _key('sk-"', 1, '"'),
    "single-quotes": _key("sk-'", 2, "'"),
    "both-quotes": _key("sk-'", 3, '"'),
    "backslashes": _key("sk-\\", 4, "\\n\\\\"),  # a backslash and the two characters \ n
    "percent": _key("sk-100%", 5, "%2F%"),
    "url-characters": _key("sk-/+=&?#", 6, ";,"),
    "html-characters": _key("sk-<", 7, ">&amp;"),
    "inner-spaces": _key("sk- ", 8, "  x"),  # two spaces: folding them must not form the key
    "trailing-newline": _key("sk-", 9, "\n"),  # issue #21 item 9: was printed by http.client
    "surrounding-crlf": _key(" \r\nsk-", 10, "\r\n\t"),
    "backslash-u-text": _key("sk-\\u00e9", 11, "\\x00"),  # text that looks like escapes
}


def _echo_forms(auth: str) -> str:
    forms = [auth, repr(auth), ascii(auth), repr(auth.encode("latin-1")), json.dumps(auth)]
    forms += [json.dumps(json.dumps(auth)), json.dumps(auth).replace("/", "\\/")]
    quoted = urllib.parse.quote(auth, safe="")
    forms += [quoted, re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted)]
    forms += [urllib.parse.quote_plus(auth), html.escape(auth), auth.upper(), auth.lower()]
    return " | ".join(forms)


def _raw(handler, head: str, body: str = "") -> None:
    """Write a whole HTTP answer as the server likes, status line included."""
    data = body.encode("latin-1", "replace")
    handler.wfile.write(f"{head}\r\nContent-Length: {len(data)}\r\n\r\n".encode("latin-1"))
    handler.wfile.write(data)
    handler.close_connection = True


ECHOES = {
    # the status line's reason phrase (shown in "answered HTTP 401 ...")
    "401-reason": lambda h, auth: _raw(h, f"HTTP/1.0 401 Unauthorized {auth} {_echo_forms(auth)}"),
    "500-reason": lambda h, auth: _raw(h, f"HTTP/1.0 500 {json.dumps(auth)}", _echo_forms(auth)),
    # a body that is not chat-completions JSON (shown, cut to 200 characters)
    "200-html-body": lambda h, auth: _raw(h, "HTTP/1.0 200 OK", f"<p>{_echo_forms(auth)}</p>"),
    "200-json-error": lambda h, auth: _raw(
        h, "HTTP/1.0 200 OK", json.dumps({"error": {"message": f"bad key {auth}", "k": auth}})
    ),
    "200-key-at-the-cut": lambda h, auth: _raw(h, "HTTP/1.0 200 OK", "x" * 190 + auth),
    # a redirect whose target holds the key (shown without its query)
    "302-location": lambda h, auth: _raw(
        h,
        f"HTTP/1.0 302 Found\r\nLocation: /steal/{urllib.parse.quote(auth, safe='')}/{auth}",
    ),
    # a status line http.client cannot parse (BadStatusLine carries the line)
    "bad-status-line": lambda h, auth: _raw(h, f"HTTP/1.0 4O1 {auth} {repr(auth)}"),
}
ECHO_MATCH = {
    "401-reason": r"answered HTTP 401 Unauthorized",
    "500-reason": r"answered HTTP 500",
    "200-html-body": r"did not answer in the chat-completions format",
    "200-json-error": r"did not answer in the chat-completions format",
    "200-key-at-the-cut": r"did not answer in the chat-completions format",
    "302-location": r"redirects \(HTTP 302\)",
    "bad-status-line": r"failed: BadStatusLine",
}
ECHO_PARAMS = [
    pytest.param(key_id, echo_id, id=f"{key_id}-{echo_id}")
    for key_id in ACCEPTED_KEYS
    for echo_id in ECHOES
]


def _serve_echo(echo_id: str):
    return recording_server(lambda h: ECHOES[echo_id](h, h.headers.get("Authorization", "")))


def _assert_key_unseen(text: str, core: str, label: str) -> None:
    assert core.lower() not in text.lower(), f"{label}: the key reached the message: {text!r}"


@pytest.mark.parametrize(("key_id", "echo_id"), ECHO_PARAMS)
def test_echoed_key_never_reaches_a_library_error(key_id, echo_id):
    key, core = ACCEPTED_KEYS[key_id]
    with _serve_echo(echo_id) as (url, seen):
        complete = curriculum.openai_compatible_completer(f"{url}/v1", "judge", api_key=key)
        with pytest.raises(ValueError, match=ECHO_MATCH[echo_id]) as error:
            complete("a sum")
    assert len(seen) == 1 and seen[0][2]["Authorization"] == f"Bearer {key.strip()}"
    _assert_key_unseen(str(error.value), core, f"{key_id}-{echo_id}")


@pytest.mark.parametrize(("key_id", "echo_id"), ECHO_PARAMS)
def test_echoed_key_never_reaches_the_cli(key_id, echo_id, tmp_path, monkeypatch):
    key, core = ACCEPTED_KEYS[key_id]
    with _serve_echo(echo_id) as (url, seen):
        case = CliCase(
            f"{key_id}-{echo_id}",
            [*LABEL, "--llm-base-url", f"{url}/v1", "--llm-api-key-env", "MYKEY"],
            PREFIX + ".*" + ECHO_MATCH[echo_id],
            setup=_input_file,
            env={"MYKEY": key},
        )
        result = check_cli_error(case, tmp_path, monkeypatch)
    assert len(seen) == 1 and seen[0][2]["Authorization"] == f"Bearer {key.strip()}"
    _assert_key_unseen(result.err + result.out, core, case.id)


# ------------------------------------------------------------------- keys refused before use
REFUSED_KEYS = {
    "inner-newline": (_key("sk-", 20, "\nx"), "control character"),
    "inner-cr": (_key("sk-", 21, "\rx"), "control character"),
    "inner-crlf": (_key("sk-", 22, "\r\nx"), "control character"),
    "tab-inside": (_key("sk-\t", 23), "control character"),
    "ansi-escape": (_key("sk-\x1b[31m", 24), "control character"),
    "delete": (_key("sk-", 25, "\x7fx"), "control character"),
    "bell": (_key("sk-\a", 26), "control character"),
    "accented": (_key("sk-\u00e9", 27), "not printable ASCII"),
    "curly-quotes": (_key("sk-\u201c", 28, "\u201d"), "not printable ASCII"),
    "zero-width-space": (_key("sk-\u200b", 29), "not printable ASCII"),
    "bom-first": (_key("\ufeffsk-", 30), "not printable ASCII"),
    "nbsp-inside": (_key("sk-\xa0", 31), "not printable ASCII"),
    "emoji": (_key("sk-\U0001f511", 32), "not printable ASCII"),
    "non-utf8-byte": (_key("sk-\udcff", 33), "not printable ASCII"),  # os.environ's surrogateescape
    "cjk": (_key("sk-\u5bc6", 34), "not printable ASCII"),
    "whitespace-only": ((" \r\n\t ", "Zq7never"), "blank"),
}


@pytest.mark.parametrize("key_id", list(REFUSED_KEYS))
def test_refused_key_is_named_never_shown_library(key_id):
    (key, core), why = REFUSED_KEYS[key_id]
    with pytest.raises(ValueError, match=rf"^the API key \(api_key\) .*{why}") as error:
        curriculum.openai_compatible_completer("http://127.0.0.1:9/v1", "judge", api_key=key)
    _assert_key_unseen(str(error.value), core, key_id)


@pytest.mark.parametrize("key_id", list(REFUSED_KEYS))
def test_refused_key_is_named_never_shown_cli(key_id, tmp_path, monkeypatch):
    (key, core), why = REFUSED_KEYS[key_id]
    with recording_server(lambda h: _raw(h, "HTTP/1.0 500 unexpected")) as (url, seen):
        case = CliCase(
            key_id,
            [*LABEL, "--llm-base-url", f"{url}/v1", "--llm-api-key-env", "MYKEY"],
            PREFIX + rf"the API key \(the environment variable MYKEY\) .*{why}",
            setup=_input_file,
            env={"MYKEY": key},
        )
        result = check_cli_error(case, tmp_path, monkeypatch)
    assert seen == []  # refused before any request
    _assert_key_unseen(result.err + result.out, core, key_id)


def test_openai_key_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-Zq7core40X\nsecond-line")
    _input_file(tmp_path)
    result = run_cli(
        [a.replace("{tmp}", str(tmp_path)) for a in LABEL]
        + ["--llm-base-url", "https://api.openai.com/v1"]
    )
    assert_user_error(
        result,
        PREFIX
        + r"the API key \(the environment variable OPENAI_API_KEY\) contains a control character",
    )
    _assert_key_unseen(result.err + result.out, "Zq7core40X", "openai")


def test_issue_command_in_a_real_process(tmp_path):
    # The issue's command, as a separate `ebpo` process: MYKEY=$'sk-secret\n' against a server that
    # answers 401 echoing the header; the key is sent stripped, and stderr never holds it.
    _input_file(tmp_path)
    with _serve_echo("401-reason") as (url, seen):
        done = subprocess.run(
            [sys.executable, "-m", "ebpo.cli"]
            + [a.replace("{tmp}", str(tmp_path)) for a in LABEL]
            + ["--llm-base-url", f"{url}/v1", "--llm-api-key-env", "MYKEY"],
            env={**os.environ, "MYKEY": "sk-Zq7core41X\n"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(PREFIX + r"the LLM endpoint .* answered HTTP 401 .*\n", done.stderr)
    assert [headers["Authorization"] for _, _, headers in seen] == ["Bearer sk-Zq7core41X"]
    _assert_key_unseen(done.stderr + done.stdout, "Zq7core41X", "subprocess")
    assert not (tmp_path / "out.jsonl").exists()
