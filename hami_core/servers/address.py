"""Listening addresses: the one reading of every server's address setting (``hami ui
--address``, ``hami scheduler --bind-address`` / ``--metrics-bind-address`` /
``--http_bind``, ``hami webhook --bind-address`` / ``--http_bind``, ``hami monitor
--bind-address``, ``hami device-plugin --metrics-bind-address``) and of the servers that
bind them (``keepalive``, ``https``, ``metrics_http``).

An address is an IPv4 address (``0.0.0.0``), an IPv6 address bare (``::1``, ``::``) or in
brackets as a URL writes it (``[::1]``, RFC 3986 §3.2.2), or a host name
(``localhost``); Go's ``HOST:PORT`` (``:9395``, ``[::1]:443``), where a setting takes
a port too. The brackets are the URL's, not the address's: the sockets are given the
bare address (``[::1]`` reached ``getaddrinfo`` as a name and failed to bind).

Stdlib only: the settings (``servers.options``) read addresses without the server extras.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Final

from hami_core.errors import ConfigError
from hami_core.protocol.documents import shown

#: A host name (RFC 1123: dot-separated labels of letters, digits and '-').
_HOST_NAME: Final = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\.?"
)


def listen_host(value: str, flag: str = "the address") -> str:
    """The host a server binds for ``value``: an IP address (IPv6 bare or in brackets,
    the brackets dropped) or a host name, as given otherwise; ``""`` stays ``""`` (Go's
    ``:443``: every address, which the caller reads).

    Raises:
        ConfigError: neither an IP address nor a host name (``[::1``, ``[host]``,
            ``a b``, a port where none is taken: ``127.0.0.1:80``), naming ``flag``.
    """
    bracketed = value.startswith("[") and value.endswith("]")
    host = value[1:-1] if bracketed else value
    if host == "" and not bracketed:
        return host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and (not bracketed or ip.version == 6):
        return str(host)
    if not bracketed and _HOST_NAME.fullmatch(host):
        return host
    raise ConfigError(
        f"{flag}: {shown(value)} is not an address to listen on (an IPv4 or IPv6 "
        "address, IPv6 bare or in brackets, or a host name)"
    )


def split_host_port(value: str, flag: str) -> tuple[str, int | None]:
    """``(host, port)`` of Go's ``HOST:PORT`` (``:9395``, ``0.0.0.0:443``,
    ``[::1]:443``), ``(host, None)`` for a bare host (``0.0.0.0``, ``::``, ``[::1]``);
    the host read by ``listen_host``.

    Raises:
        ConfigError: a port that is not a number in 1-65535, or a host that is not an
            address (``listen_host``), naming ``flag``.
    """
    if value.startswith("[") and "]:" in value:
        end = value.index("]:")
        host, port = value[: end + 1], value[end + 2 :]
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        return listen_host(value, flag), None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{flag} {value}: the port must be a number in 1-65535")
    return listen_host(host, flag), int(port)


def is_loopback(address: str) -> bool:
    """Whether ``address`` (an IP, bare or in brackets, or ``localhost``) is reachable from
    this host only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def url_host(address: str) -> str:
    """``address`` as a URL's host: an IPv6 address in brackets (RFC 3986 §3.2.2)."""
    host = address.removeprefix("[").removesuffix("]")
    return f"[{host}]" if ":" in host else host


def address_family(host: str) -> socket.AddressFamily:
    """The socket family that binds ``host`` (``listen_host``'s form): IPv6 for an IPv6
    address, IPv4 for an IPv4 address or ``""``, a name's first resolved address's
    family (IPv4 where it does not resolve: the bind then says why)."""
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        if not host:
            return socket.AF_INET
        try:
            return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
        except OSError:
            return socket.AF_INET
    return socket.AF_INET6 if version == 6 else socket.AF_INET


__all__ = ["address_family", "is_loopback", "listen_host", "split_host_port", "url_host"]
