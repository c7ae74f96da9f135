"""MySQL DSNs: the TLS parameters, what each connection is asked for, and that no message
about a malformed DSN quotes any part of its password."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from dblog_worker import config as config_module
from dblog_worker.errors import ConfigError
from dblog_worker.mysql.options import RULES, parse_dsn, url_args
from dblog_worker.mysql.target import MySQLTarget
from dblog_worker.mysql.tls import MyTls, SharedTlsConnection
from tests.tls import make_ca

CA = "/etc/dblog/ca.pem"


@pytest.mark.parametrize(
    ("query", "tls_args"),
    [
        ("", {}),
        ("?sslmode=prefer", {}),
        ("?sslmode=disable", {"ssl_disabled": True}),
        ("?sslmode=require",
         {"ssl": {"ca": None, "verify_mode": False, "check_hostname": False}}),
        (f"?sslmode=require&sslrootcert={CA}",
         {"ssl": {"ca": CA, "verify_mode": True, "check_hostname": False}}),
        (f"?sslmode=verify-ca&sslrootcert={CA}",
         {"ssl": {"ca": CA, "verify_mode": True, "check_hostname": False}}),
        (f"?sslrootcert={CA}&sslmode=verify-full",
         {"ssl": {"ca": CA, "verify_mode": True, "check_hostname": True}}),
        (f"?sslmode=verify-full&sslrootcert={CA}&sslcert=/c.pem&sslkey=/c.key",
         {"ssl": {"ca": CA, "verify_mode": True, "check_hostname": True, "cert": "/c.pem",
                  "key": "/c.key"}}),
        ("?sslmode=verify-ca&sslrootcert=/my%20certs/ca.pem",
         {"ssl": {"ca": "/my certs/ca.pem", "verify_mode": True, "check_hostname": False}}),
    ],
)
def test_tls_parameters_become_pymysql_arguments(query: str, tls_args: dict[str, object]
                                                 ) -> None:
    assert url_args(f"mysql://dblog:pw@db:3307{query}") == {
        "host": "db", "port": 3307, "user": "dblog", "password": "pw", **tls_args}


def test_redaction_and_the_connection_string_keep_the_tls_parameters() -> None:
    dsn = f"mysql://dblog:pw@db:3307/?sslmode=verify-full&sslrootcert={CA}"
    assert RULES.redact(dsn) == f"mysql://dblog@db:3307?sslmode=verify-full&sslrootcert={CA}"
    with_secret = RULES.connection_string(dsn, "n3w/p?w")
    assert with_secret.startswith("mysql://dblog:n3w%2Fp%3Fw@db:3307?sslmode=verify-full")
    assert url_args(with_secret)["password"] == "n3w/p?w"
    assert parse_dsn(with_secret).tls == MyTls("verify-full", CA)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?sslmode=verify-ca", "sslmode=verify-ca needs sslrootcert=/path/to/ca.pem"),
        ("?sslmode=verify-full", "sslmode=verify-full needs sslrootcert"),
        ("?sslmode=allow", "sslmode of a MySQL DSN is one of disable, prefer, require, "
                           "verify-ca, verify-full"),
        ("?ssl-mode=REQUIRED", "takes only the parameters sslmode, sslrootcert, sslcert, "
                               "sslkey"),
        ("?database=shop", "takes only the parameters"),
        ("?sslmode=require&sslmode=disable", "gives sslmode once"),
        ("?sslmode=verify-ca&sslrootcert=ca.pem", "sslrootcert of a MySQL DSN is an "
                                                  "absolute path"),
        (f"?sslrootcert={CA}", "used with sslmode=require, verify-ca or verify-full, not "
                               "prefer"),
        (f"?sslmode=disable&sslrootcert={CA}", "not disable"),
        ("?sslmode=require&sslcert=/c.pem", "sslcert and sslkey of a MySQL DSN go together"),
        ("?sslmode", "the query of a MySQL DSN is name=value pairs"),
    ],
)
def test_bad_tls_parameters_are_refused_in_the_configuration(query: str, message: str
                                                             ) -> None:
    with pytest.raises(ConfigError, match="^source.dsn: .*" + message.replace("?", r"\?")):
        config_module.parse({"source": {"name": "shop", "kind": "mysql",
                                        "dsn": f"mysql://dblog@db{query}",
                                        "tables": ["shop.t"]},
                             "redis": {"url": "redis://r"}, "landing": {"path": "/l"}}, {})


PASSWORD = "Zq9Xw7Kv"
# Where a malformed DSN may put the password, around the characters that end a URL's parts.
SEPARATORS = ["", "/", "?", "#", "@", ":", "=", "&", "%", "[", "]", " ", "\\"]
FORMS = ["mysql://u:{pw}@db:3306", "mysql://u:{pw}@db", "mysql://u:{pw}@db:3306?sslmode={pw}",
         "mysql://u:{pw}@db?{pw}", "mysql://u:{pw}@db:{pw}",
         "mysql://u:{pw}@db?sslmode=verify-ca&sslrootcert={pw}", "mysql://u:{pw}",
         "mysql://u:{pw}@db/{pw}", "mysql://u:{pw}@db#{pw}", "mysql:/u:{pw}@db",
         "mariadb://u:{pw}@[db:3306"]


def _passwords() -> list[str]:
    halves = (PASSWORD[:4], PASSWORD[4:])
    return [f"{halves[0]}{a}{halves[1]}{b}" for a, b in itertools.product(SEPARATORS, repeat=2)]


def _leaks(message: str) -> list[str]:
    """The pieces (3 characters or more) of the password that ``message`` shows."""
    return [PASSWORD[i:j] for i in range(len(PASSWORD)) for j in range(i + 3, len(PASSWORD) + 1)
            if PASSWORD[i:j].lower() in message.lower()]


def _host_from_password(dsn: str) -> bool:
    """A well-formed DSN whose unencoded @ made the password's end its host (which shows)."""
    try:
        return parse_dsn(dsn).host in PASSWORD.lower()
    except ValueError:
        return False


def test_no_message_about_a_dsn_shows_any_part_of_its_password() -> None:
    refused = 0
    for form, password in itertools.product(FORMS, _passwords()):
        dsn = form.format(pw=password)
        messages = [RULES.redact(dsn)]
        for password_env in (None, "other"):
            try:
                url_args(dsn)
                RULES.connection_string(dsn, password_env)
            except ValueError as exc:
                messages.append(str(exc))
        try:
            config_module.parse({"source": {"name": "shop", "kind": "mysql", "dsn": dsn,
                                            "tables": ["shop.t"]},
                                 "redis": {"url": "redis://r"}, "landing": {"path": "/l"}}, {})
        except ConfigError as exc:
            refused += 1
            messages.append(str(exc))
        for message in messages[1:] if _host_from_password(dsn) else messages:
            assert _leaks(message) == [], (dsn, message)
    assert refused > len(FORMS) * len(SEPARATORS)  # the malformed ones were refused


def test_the_jdbc_properties_carry_the_ca_itself(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

    def jdbc(query: str) -> dict[str, str]:
        config = config_module.parse({
            "source": {"name": "shop", "dsn": "host=db", "tables": ["public.t"]},
            "redis": {"url": "redis://r"}, "landing": {"path": "/l"},
            "target": {"kind": "mariadb", "dsn": f"mysql://m:pw@wh:3306{query}"}}, {})
        return MySQLTarget(config.require_target()).jdbc()[1]

    base = {"driver": "org.mariadb.jdbc.Driver", "user": "m", "password": "pw"}
    assert jdbc("") == jdbc("?sslmode=disable") == base
    assert jdbc("?sslmode=require") == {**base, "useSsl": "true",
                                        "trustServerCertificate": "true"}
    pem = ca.read_text()
    assert jdbc(f"?sslmode=verify-full&sslrootcert={ca}") == {
        **base, "useSsl": "true", "serverSslCert": pem,
        "disableSslHostnameVerification": "false"}
    assert jdbc(f"?sslmode=verify-ca&sslrootcert={ca}")["disableSslHostnameVerification"] \
        == "true"
    with pytest.raises(ConfigError, match="takes client certificates only from a Java "
                                          "keystore"):
        jdbc(f"?sslmode=require&sslcert={ca}&sslkey={ca}")
    with pytest.raises(ConfigError, match=r"^target mysql://m@wh:3306\?sslmode=verify-ca&"
                                          r"sslrootcert=/nowhere/ca.pem: cannot read "):
        jdbc("?sslmode=verify-ca&sslrootcert=/nowhere/ca.pem")


def test_connections_share_one_tls_context_per_setting() -> None:
    """Building a TLS context loads the system's CAs (50 ms of CPU): connections with the
    same TLS settings share one; other settings get their own."""

    def context(query: str) -> object:
        conn = SharedTlsConnection(**parse_dsn(f"mysql://u@db{query}").connect_args(),
                                   defer_connect=True)
        return conn.ctx

    assert context("") is context("?sslmode=prefer")
    assert context("?sslmode=require") is context("?sslmode=require")
    assert context("?sslmode=require") is not context("")


def test_a_rotated_ca_file_gets_a_new_tls_context(tmp_path: Path) -> None:
    """A CA file replaced on disk (a rotated certificate authority) is read again by the
    next connection, as it was when each connection built its own context."""
    ca = make_ca(tmp_path / "first")
    query = f"?sslmode=verify-ca&sslrootcert={tmp_path / 'ca.pem'}"
    (tmp_path / "ca.pem").write_bytes(ca.read_bytes())

    def context() -> object:
        conn = SharedTlsConnection(**parse_dsn(f"mysql://u@db{query}").connect_args(),
                                   defer_connect=True)
        return conn.ctx

    before = context()
    assert context() is before
    (tmp_path / "ca.pem").write_bytes(make_ca(tmp_path / "second").read_bytes())
    assert context() is not before
