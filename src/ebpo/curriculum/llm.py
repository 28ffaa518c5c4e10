"""The paper's LLM topic labeller: each problem is put in one of nine math domains
(:data:`MATH_DOMAINS`) by a model behind an OpenAI-compatible chat-completions endpoint
(:func:`llm_topics` with :func:`openai_compatible_completer`). Off by default: it costs one request
per problem.

The HTTP client uses only the standard library and guards the API key: it goes over plain http
only to a loopback host, redirects are never followed, user info in the URL is refused, and no
error message shows the key (:func:`llm_api_key` picks it from an environment variable the user
names).

How the key is kept out of messages and logs: it is checked before any request
(:func:`check_api_key`: surrounding whitespace is stripped, so ``MYKEY=$'sk-...\\n'`` works;
a key holding a control character, or any character that is not printable ASCII, is refused
with a message that names the variable and never quotes the key — http.client used to print it
in ``Invalid header value b'Bearer ...'``); and every error text that leaves the client (the
server's status line, body and redirect target included, also a server that echoes the
``Authorization`` header) has each representation of the key replaced by ``<key>``: raw,
``repr()`` / ``ascii()`` / bytes ``repr()``, backslash-escaped, JSON-escaped (also twice, and
with ``\\/``), URL-encoded (``quote``, ``quote_plus``, either hex case), HTML-escaped, the
UTF-8 bytes read as Latin-1, and the whitespace-folded key; case-insensitively, before the body
is cut to its first 200 characters.
"""

from __future__ import annotations

import html
import http.client
import ipaddress
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

__all__ = [
    "LLM_TOPIC_PROMPT",
    "MATH_DOMAINS",
    "OPENAI_HOST",
    "UNCLASSIFIED",
    "check_api_key",
    "llm_api_key",
    "llm_topic_prompt",
    "llm_topics",
    "openai_compatible_completer",
    "parse_llm_topic",
]

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


def llm_topic_prompt(problem: str, domains: Sequence[str] = MATH_DOMAINS) -> str:
    """The labelling prompt for one problem (the paper's nine-domain LLM labeller)."""
    return LLM_TOPIC_PROMPT.format(
        domains="\n".join(f"- {d}" for d in domains), problem=problem.strip()
    )


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
    if not callable(complete):
        raise ValueError(f"complete must be callable (prompt -> answer); got {complete!r}")
    texts = list(texts)
    if not texts:
        return []

    def label(text: Any) -> str:
        return parse_llm_topic(complete(llm_topic_prompt(str(text), domains)), domains)

    labels = [label(texts[0])]
    bar = tqdm(
        texts[1:],
        desc="llm topics",
        unit="problem",
        initial=1,
        total=len(texts),
        disable=not progress,
    )
    labels.extend(label(text) for text in bar)
    return labels


#: The one host whose key is picked up from ``OPENAI_API_KEY`` without being named.
OPENAI_HOST = "api.openai.com"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME_SHOWN = re.compile(
    r"[A-Z_][A-Z0-9_]*"
)  # shown in errors; mixed case might be a pasted key


def check_api_key(key: Any, source: str) -> str:
    """``key`` without surrounding whitespace, if it is text of printable ASCII characters (what
    an HTTP header can carry unchanged); else a ValueError that names ``source`` (e.g. "the
    environment variable MYKEY") and never shows the key, nor any part of it."""
    if not isinstance(key, str):
        raise ValueError(f"the API key ({source}) must be text, got a {type(key).__name__}")
    key = key.strip()
    if not key:
        raise ValueError(f"the API key ({source}) is blank: it holds only whitespace")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise ValueError(
            f"the API key ({source}) contains a control character (a line break, carriage "
            "return, tab, escape...) inside it; the key is not shown: set it to the key alone"
        )
    if not key.isascii() or not key.isprintable():
        raise ValueError(
            f"the API key ({source}) contains a character that is not printable ASCII "
            "(non-ASCII letters or quotes, invisible characters...); the key is not shown: "
            "set it to the key alone"
        )
    return key


def llm_api_key(
    base_url: str, env_var: str | None, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """The API key to send to ``base_url``: the value of the environment variable ``env_var``
    (``ebpo data label --llm-api-key-env``), which must then be set. Without ``env_var``, only
    ``https://api.openai.com`` gets ``OPENAI_API_KEY``; any other endpoint gets no key, so a key
    meant for OpenAI is never sent to a server the user did not name it for.

    The key is checked by :func:`check_api_key` (surrounding whitespace stripped; control and
    non-ASCII characters refused). Errors name the variable, never its value; a value that does
    not look like a variable name (perhaps the key itself, pasted by mistake) is not repeated
    either."""
    environ = os.environ if environ is None else environ
    if env_var is None:
        parts = urllib.parse.urlsplit(base_url or "")
        if parts.scheme == "https" and (parts.hostname or "") == OPENAI_HOST:
            key = environ.get("OPENAI_API_KEY")
            if not key:
                raise ValueError(
                    f"{OPENAI_HOST} needs a key: set OPENAI_API_KEY or name a variable with --llm-api-key-env"
                )
            return check_api_key(key, "the environment variable OPENAI_API_KEY")
        return None
    if not isinstance(env_var, str) or not _ENV_NAME.fullmatch(env_var):
        raise ValueError(
            "--llm-api-key-env must be the NAME of an environment variable that holds the key "
            "(letters, digits and _), not the key itself"
        )
    key = environ.get(env_var)
    shown = env_var if _ENV_NAME_SHOWN.fullmatch(env_var) else "named by --llm-api-key-env"
    if not key:
        raise ValueError(
            f"the environment variable {shown} is not set or empty; export the API key in it"
        )
    return check_api_key(key, f"the environment variable {shown}")


def _is_loopback(host: str) -> bool:
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


def _key_forms(key: str) -> set[str]:
    """The ways ``key`` may be written in an error text (see the module docstring)."""
    forms = {key, key.replace("\\", "\\\\"), " ".join(key.split())}
    for quoted in (repr(key), ascii(key), json.dumps(key), json.dumps(key, ensure_ascii=False)):
        forms.add(quoted[1:-1])
    forms.add(repr(key.encode("utf-8", "surrogatepass"))[2:-1])
    forms.add(json.dumps(key)[1:-1].replace("/", "\\/"))
    forms.add(json.dumps(json.dumps(key))[3:-3])
    for safe in ("", "/"):
        forms.add(urllib.parse.quote(key, safe=safe))
        forms.add(urllib.parse.quote_plus(key, safe=safe))
    forms.update((html.escape(key), html.escape(key, quote=False)))
    forms.add(key.encode("utf-8", "surrogatepass").decode("latin-1"))
    return {form for form in forms if form}


def _redactor(api_key: str | None) -> Callable[[str], str]:
    """``text -> text`` with every form of ``api_key`` replaced by ``<key>`` and its whitespace
    folded (so folding cannot form the key afterwards); identity without a key."""
    if not api_key:
        return lambda text: text
    forms = sorted(_key_forms(api_key), key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, forms)), re.IGNORECASE)

    def redact(text: str) -> str:
        return pattern.sub("<key>", " ".join(text.split()))

    return redact


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
    cannot be redirected usefully anyway); user info in the URL is refused; ``api_key`` is
    checked first (:func:`check_api_key`); error messages show the URL without user info or
    query and never the key in any form, even when the server echoes it. Every failure —
    unreachable endpoint, HTTP error, timeout, an invalid HTTP answer, an answer that is not
    chat-completions JSON — is a ValueError naming the URL."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"base_url must be an http(s) URL such as http://localhost:8000/v1; got {base_url!r:.80}"
        )
    if not model:
        raise ValueError("model must name the served model")
    if api_key is not None:
        api_key = check_api_key(api_key, "api_key")
    shown = _checked_endpoint(base_url, api_key, allow_insecure_http)
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    opener = urllib.request.build_opener(_NoRedirect())
    redact = _redactor(api_key)

    def complete(prompt: str) -> str:
        body = json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
        ).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        raw = _post(opener, request, timeout, url, shown, bool(api_key), redact)
        return _chat_content(raw, shown, redact)

    return complete


def _checked_endpoint(base_url: str, api_key: str | None, allow_insecure_http: bool) -> str:
    """The endpoint's URL as messages show it (:func:`_shown_url` + ``/chat/completions``), after
    refusing user info in the URL, a missing host, an invalid port, and a key over plain http to
    a host that is not loopback (unless ``allow_insecure_http``)."""
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
    if (
        api_key
        and parts.scheme == "http"
        and not _is_loopback(parts.hostname)
        and not allow_insecure_http
    ):
        raise ValueError(
            f"refusing to send the API key over plain http to {parts.hostname}: use https, a "
            "loopback address, or --llm-allow-insecure-http if the network is private"
        )
    return shown


def _post(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    timeout: float,
    url: str,
    shown: str,
    has_key: bool,
    redact: Callable[[str], str],
) -> bytes:
    """The raw answer to ``request`` (a POST to ``url``); every failure becomes a redacted
    ValueError naming ``shown`` (the traceback, which may hold the key, is dropped)."""
    try:
        with opener.open(request, timeout=timeout) as response:
            raw: bytes = response.read()
            return raw
    except urllib.error.HTTPError as error:
        raise _http_error(error, url, shown, has_key, redact) from None
    except (urllib.error.URLError, OSError) as error:  # refused, DNS, TLS, timeout
        reason = getattr(error, "reason", error)
        raise ValueError(redact(f"cannot reach the LLM endpoint {shown}: {reason}")) from None
    except (http.client.HTTPException, ValueError) as error:  # a malformed answer or request
        raise ValueError(
            redact(f"the LLM endpoint {shown} failed: {type(error).__name__}: {error}")
        ) from None


def _http_error(
    error: urllib.error.HTTPError,
    url: str,
    shown: str,
    has_key: bool,
    redact: Callable[[str], str],
) -> ValueError:
    """The message for an HTTP error status: a redirect (never followed) names its target; 401 and
    403 hint at the key."""
    if 300 <= error.code < 400:
        target = urllib.parse.urlsplit(urllib.parse.urljoin(url, error.headers.get("Location", "")))
        why = "the request carries the API key" if has_key else "a POST cannot follow one"
        return ValueError(
            redact(
                f"the LLM endpoint {shown} redirects (HTTP {error.code}) to "
                f"{_shown_url(target)}; redirects are not followed ({why}): pass the final URL"
            )
        )
    hint = (
        " (does it need a key? name its variable with --llm-api-key-env)"
        if error.code in (401, 403)
        else ""
    )
    return ValueError(
        redact(f"the LLM endpoint {shown} answered HTTP {error.code} {error.reason}{hint}")
    )


def _chat_content(raw: bytes, shown: str, redact: Callable[[str], str]) -> str:
    """The first choice's message text of a chat-completions answer ("" when it is null)."""
    try:
        payload = json.loads(raw)
        return str(payload["choices"][0]["message"]["content"] or "")
    except (ValueError, KeyError, IndexError, TypeError):
        # Redacted before it is cut, so that no part of the key is left at the cut.
        snippet = redact(raw.decode("utf-8", "replace"))[:200]
        raise ValueError(
            redact(f"{shown} did not answer in the chat-completions format: {snippet!r}")
        ) from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turn every 3xx into an HTTPError instead of following it (see openai_compatible_completer)."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> None:
        return None
