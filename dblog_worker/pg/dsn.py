"""libpq connection strings as the configuration takes them: each option's value checked
before anything connects, messages that name the option but never quote a value, and the
form that may be shown (options known to be safe only).

libpq checks most values only when it connects, and some only after it reached the server;
its complaint then looks like a network failure (``port=abc``: ``invalid integer value``
or ``Servname not supported``), which ``dblog`` would report as "unreachable, try again".
:func:`value_problem` checks them when the configuration is read, so they are what they
are: a wrong configuration.
"""

from __future__ import annotations

import difflib
import re
import socket
from collections.abc import Callable, Mapping

from psycopg import pq

# Options whose values may be shown: names, addresses, numbers, modes and file paths.
# Everything else is left out of what is shown (password, sslpassword, options,
# oauth_client_secret, scram_client_key, ... and any option a later libpq adds).
SAFE_KEYS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "service", "passfile", "connect_timeout",
    "client_encoding", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "require_auth",
    "channel_binding", "min_protocol_version", "max_protocol_version",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "gssencmode", "krbsrvname",
    "gsslib", "gssdelegation", "target_session_attrs", "load_balance_hosts",
})

_INTEGER = re.compile(r"\s*[+-]?[0-9]{1,9}\s*")
_TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
_PROTOCOL_VERSIONS = ("3.0", "3.2", "latest")
_AUTH_METHODS = ("password", "md5", "gss", "sspi", "scram-sha-256", "oauth", "none")
CHOICES: Mapping[str, tuple[str, ...]] = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "sslnegotiation": ("postgres", "direct"),
    "sslcertmode": ("disable", "allow", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby",
                             "prefer-standby"),
    "load_balance_hosts": ("disable", "random"),
    "sslcompression": ("0", "1"),
    "sslsni": ("0", "1"),
    "gssdelegation": ("0", "1"),
    "ssl_min_protocol_version": _TLS_VERSIONS,
    "ssl_max_protocol_version": _TLS_VERSIONS,
    "min_protocol_version": _PROTOCOL_VERSIONS,
    "max_protocol_version": _PROTOCOL_VERSIONS,
}
INTEGERS = ("connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
            "keepalives_count", "tcp_user_timeout")


def keywords() -> frozenset[str]:
    """Every option this libpq knows."""
    return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults())


def secret_keywords() -> frozenset[str]:
    """The options libpq itself marks as secret (``*``: password, sslpassword, ...) or as
    not to be shown (``D``: scram keys, ...)."""
    return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults()
                     if o.dispchar in (b"*", b"D"))


def shown(params: Mapping[str, str]) -> dict[str, str]:
    """The options of a parsed connection string that may be shown."""
    hidden = secret_keywords()
    return {k: v for k, v in params.items() if k in SAFE_KEYS and k not in hidden}


def value_problem(params: Mapping[str, str]) -> str | None:
    """What is wrong with an option's value, naming the option (never the value); None if
    every value is one libpq takes."""
    for name, value in params.items():
        problem = _CHECKS.get(name, _any)(name, value)
        if problem is not None:
            return problem
    return _hosts_and_ports(params)


def _any(name: str, value: str) -> str | None:
    return None


def _choice(name: str, value: str) -> str | None:
    allowed = CHOICES[name]
    if value in allowed:
        return None
    return f"option {name} must be one of {', '.join(allowed)}"


def _integer(name: str, value: str) -> str | None:
    if _INTEGER.fullmatch(value):
        return None
    return f"option {name} must be a whole number"


def _ports(name: str, value: str) -> str | None:
    for port in value.split(","):
        if port.strip() and not (port.strip().isdigit() and 1 <= int(port) <= 65535):
            return ("option port must be a number from 1 to 65535 (or one per host, "
                    "comma-separated: port=5432,5433)")
    return None


def _addresses(name: str, value: str) -> str | None:
    for address in value.split(","):
        if not address:
            continue
        try:
            socket.getaddrinfo(address.strip(), None, flags=socket.AI_NUMERICHOST)
        except (socket.gaierror, UnicodeError, ValueError):
            return ("option hostaddr must be IP addresses (a host name goes in host=), "
                    "comma-separated for several hosts")
    return None


def _require_auth(name: str, value: str) -> str | None:
    methods = value.split(",")
    negated = {method.startswith("!") for method in methods}
    if len(negated) == 1 and all(m.removeprefix("!") in _AUTH_METHODS for m in methods):
        return None
    return (f"option require_auth must be a comma-separated list of {', '.join(_AUTH_METHODS)}"
            ", all of them or none of them prefixed with !")


def _set_by_dblog(name: str, value: str) -> str | None:
    return f"option {name} is set by dblog on the connections that need it: remove it"


_CHECKS: Mapping[str, Callable[[str, str], str | None]] = {
    **dict.fromkeys(CHOICES, _choice),
    **dict.fromkeys(INTEGERS, _integer),
    "port": _ports,
    "hostaddr": _addresses,
    "require_auth": _require_auth,
    "replication": _set_by_dblog,
}


def _hosts_and_ports(params: Mapping[str, str]) -> str | None:
    hosts = max(len(params.get("host", "").split(",")), len(params.get("hostaddr", "").split(",")))
    ports = len(params.get("port", "").split(","))
    if ports not in (1, hosts):
        return (f"option port lists {ports} ports and host {hosts} host(s): give one port, "
                "or one per host")
    return None


def parse_problem(message: str, dsn: str) -> str:
    """libpq's complaint about a connection string that does not parse, with the name of an
    unknown option (and the known one it may stand for), every other quoted piece hidden:
    it may be part of the password (``password=se cret`` gives ``missing "=" after
    "cret"``)."""
    found = re.fullmatch(r'invalid (?:connection option|URI query parameter:) "([^"]*)"',
                         message.strip())
    if found is not None:
        return _unknown_option(found[1], dsn)
    known = {"="} | keywords()
    hidden = re.sub(r'"([^"]*)"', lambda m: m[0] if m[1] in known else '"…"', message)
    if hidden == message:
        return message
    return f"{hidden} (the quoted parts of the string are hidden: they may hold a password)"


def _unknown_option(name: str, dsn: str) -> str:
    """The message for an option libpq does not know, naming it when it reads as an option's
    name (lower case, like every libpq option, or close to one) and does not follow a
    secret's value (``password=se cret=x``: then it is likely the rest of the password)."""
    close = difflib.get_close_matches(name.lower(), sorted(keywords()), n=1)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", name) and not (
            close and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name)):
        return "an option libpq does not know (its name is not shown: it may hold a password)"
    options = _options(dsn)
    names = [option for option, _ in options]
    if name in names and names.index(name) > 0:
        before, value = options[names.index(name) - 1]
        if before in secret_keywords() | {"options"} and not value.startswith("'"):
            return (f"an unknown option follows option {before}: if the value of {before} "
                    f"holds a space, quote it ({before}='…')")
    hint = f"; did you mean {close[0]}?" if close else " (see libpq's list of parameter keywords)"
    return f"unknown option {name!r}{hint}"


def _options(dsn: str) -> list[tuple[str, str]]:
    """The options a connection string names, with their values as written, in order, as
    libpq splits it."""
    if re.match(r"postgres(?:ql)?://", dsn):
        query = dsn.partition("?")[2]
        return [(name, value) for name, _, value in (p.partition("=") for p in query.split("&"))]
    return re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", dsn)
