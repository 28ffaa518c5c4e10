"""A Ray cluster's address as ``ebpo verl`` reads it: parsed, found (``auto``), and answering as Ray.

``ray.init(address=...)`` is no place to find out that an address is wrong: it retries an address
nobody answers at for minutes, and one where something else answers (an HTTP server, the
dashboard's port) forever, inside C++ code that holds the interpreter (a SIGTERM waits for it).
So every address ``ebpo verl doctor --address`` and ``ebpo verl`` are given is checked here first,
each problem one line naming the address and the argument it came from:

* :func:`parse_address`: ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST:PORT``, the port a number
  from 1 to 65535, the host a host name or an IP address;
* :func:`cluster_address`: what ``ray.init`` joins for ``auto`` or no address — ``RAY_ADDRESS``,
  else the cluster ``ray start`` last started on this machine (``ray_current_cluster``); never,
  as Ray's ``auto`` does when neither is there, whichever Ray server another job runs here;
* :func:`check_reachable`: something accepts a TCP connection there within
  :data:`REACH_TIMEOUT`, answers an HTTP/2 greeting as a gRPC server does (an HTTP server, the
  dashboard or a silent socket does not), and answers as Ray's GCS does (:data:`GCS_METHOD`;
  another gRPC service, a raylet's port, does not). A ``ray://`` address (Ray Client's server)
  gets the first two.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket

__all__ = ["ADDRESS_FORM", "REACH_TIMEOUT", "check_reachable", "cluster_address", "parse_address"]

#: seconds a TCP connect, then the answer to the HTTP/2 greeting, may take
REACH_TIMEOUT = 5.0

#: what an address should look like, for the messages
ADDRESS_FORM = (
    "HOST:PORT, the head node's GCS address as `ray start --head` prints it (port 6379 by "
    "default; [IPv6]:PORT)"
)

#: the client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5); a
#: gRPC server answers with a SETTINGS frame of its own (frame type 4 in the 4th byte)
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4

#: a call every Ray GCS answers, to anyone (its request is an empty message: no bytes)
GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to 60 characters."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check_host(host: str, name: str, address: str) -> None:
    if not host:
        raise ValueError(f"{name} {_shown(address)} has no host: expected {ADDRESS_FORM}")
    if len(host) > 253:
        raise ValueError(
            f"{name} {_shown(address)}: the host has {len(host)} characters (a host name has at "
            "most 253)"
        )
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if not all(_LABEL.fullmatch(label) for label in host.removesuffix(".").split(".")):
        raise ValueError(
            f"{name} {_shown(address)}: {_shown(host)} is not a host name or an IP address "
            f"(expected {ADDRESS_FORM})"
        )


def parse_address(address: str, name: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST:PORT`` (Ray Client).

    Raises:
        ValueError: one line naming ``name`` (the argument the address came from) and what is
            wrong: empty, no port, a port that is not 1-65535, an IPv6 address without brackets,
            a host that is neither a host name nor an IP address, another scheme.
    """
    text = address.strip()
    if not text:
        raise ValueError(f"{name} is empty: expected {ADDRESS_FORM}")
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme != "ray":
            raise ValueError(
                f"{name} {_shown(address)}: unknown scheme {_shown(scheme)} (expected "
                f"{ADDRESS_FORM}, or ray://HOST:PORT for Ray Client)"
            )
        text = rest
    host, colon, port = text.rpartition(":")
    if not colon:
        raise ValueError(f"{name} {_shown(address)} has no port: expected {ADDRESS_FORM}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(
            f"{name} {_shown(address)}: an IPv6 address goes in brackets before its port, "
            f"e.g. [{text}]:6379"
        )
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(
            f"{name} {_shown(address)}: the port {_shown(port)} is not a number from 1 to 65535"
        )
    _check_host(host, name, address)
    return host, int(port)


def cluster_address(config_address: str | None) -> str | None:
    """The Ray cluster ``ray.init(address=config_address)`` joins, or None when it starts its own
    one-machine instance (``local``, or no address and no cluster found): the address itself, or
    — for none or ``auto`` — ``RAY_ADDRESS``, else the cluster ``ray start`` last started here
    (``ray_current_cluster``). ``auto`` with neither stays ``auto``: no cluster to join."""
    address = config_address or None
    if address == "local":
        return None
    if address not in (None, "auto"):
        return address
    found = os.environ.get("RAY_ADDRESS") or None
    if found is None:
        try:
            # Ray's own lookup (a private helper; ray comes with verl, imported by then)
            from ray._private.utils import read_ray_address

            found = read_ray_address()
        except Exception:  # another Ray version: no lookup, as if no cluster ran here
            found = None
    return found or address


def _greeting_answer(sock: socket.socket) -> bytes:
    """The first bytes the server sends after the HTTP/2 greeting (empty when it closes)."""
    sock.sendall(HTTP2_GREETING)
    answer = b""
    while len(answer) < 9:
        chunk = sock.recv(9 - len(answer))
        if not chunk:
            break
        answer += chunk
    return answer


def _gcs_refusal(host: str, port: int, timeout: float) -> str | None:
    """None when a Ray GCS answers :data:`GCS_METHOD` at ``host:port`` within ``timeout``
    seconds (or grpc is not installed to ask), else the gRPC status it got instead."""
    try:
        import grpc  # optional heavy dependency (comes with ray: the verl extra)
    except ImportError:  # cannot ask: the join's deadline decides
        return None
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            channel.unary_unary(GCS_METHOD)(b"", timeout=timeout)  # raw bytes in and out
        except grpc.RpcError as error:
            return f"gRPC {error.code().name}"
    return None


def check_reachable(
    address: str, name: str = "the Ray address", timeout: float = REACH_TIMEOUT
) -> None:
    """Refuse, in one line naming ``address``, an address (:func:`parse_address`; ``auto``
    resolved by :func:`cluster_address`) where no cluster is found, nothing accepts a TCP
    connection within ``timeout`` seconds, or what answers does not speak gRPC as Ray's GCS does.

    Raises:
        ValueError: naming ``name``, the address and what was found there.
    """
    resolved = cluster_address(address)
    if address.strip() == "local":
        raise ValueError(
            f"{name} local starts a new one-machine Ray instance, it names no cluster: give "
            f"{ADDRESS_FORM}"
        )
    if resolved in (None, "auto"):
        raise ValueError(
            f"{name} {address}: no Ray cluster found on this machine (RAY_ADDRESS is not set and "
            f"`ray start` recorded none); give {ADDRESS_FORM}"
        )
    host, port = parse_address(resolved, name)
    where = address if resolved == address else f"{resolved} ({name} {address})"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as error:  # refused, unreachable, no answer in time, unknown host
        why = f"no answer within {timeout:g} s" if isinstance(error, TimeoutError) else None
        raise ValueError(
            f"nothing answers at the Ray address {where} "
            f"({why or error.strerror or type(error).__name__}): start the cluster there "
            f"(`ray start --head --port {port}` on that machine) or give the address its head "
            "node printed"
        ) from error
    with sock:
        try:
            answer: bytes | None = _greeting_answer(sock)
        except TimeoutError:
            answer = None
        except OSError:  # reset by a server that does not like the greeting
            answer = b""
    if answer is not None and len(answer) == 9 and answer[3] == _SETTINGS:
        refusal = None if resolved.startswith("ray://") else _gcs_refusal(host, port, timeout)
        if refusal is None:
            return
        raise ValueError(
            f"what answers at {where} is not a Ray cluster: it speaks gRPC, but not as Ray's GCS "
            f"does ({refusal} to {GCS_METHOD}): give {ADDRESS_FORM}"
        )
    if answer is None:
        seen = f"no answer within {timeout:g} s"
    else:
        seen = f"it answered {answer!r}" if answer else "it closed the connection"
    raise ValueError(
        f"what answers at {where} is not a Ray cluster: it does not speak gRPC as Ray's GCS "
        f"does ({seen} to an HTTP/2 greeting): give {ADDRESS_FORM}; the dashboard's port, 8265 "
        "by default, is not it"
    )
