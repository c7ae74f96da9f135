"""Certificates for tests that speak TLS, made with the ``openssl`` command line."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the self-signed certificate authority
    cert: Path  # a certificate it signed, for 127.0.0.1 and localhost
    key: Path  # that certificate's private key


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str = "dblog test CA") -> Path:
    """A self-signed certificate authority: ``<directory>/ca.pem`` and ``ca.key``."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", "ca.key", "-out", "ca.pem", cwd=directory)
    return directory / "ca.pem"


def make_certificate(directory: Path, ca: Path, prefix: str, common_name: str,
                     names: str) -> TlsFiles:
    """A certificate signed by ``ca`` (whose key is next to it, ``ca.key``), for the
    subject alternative ``names`` (``"IP:127.0.0.1,DNS:localhost"``)."""
    key, request, cert = f"{prefix}.key", f"{prefix}.csr", f"{prefix}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}",
             "-keyout", key, "-out", request, cwd=directory)
    extensions = directory / f"{prefix}.ext"
    extensions.write_text(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", request, "-CA", str(ca), "-CAkey",
             str(ca.with_suffix(".key")), "-CAcreateserial", "-days", "2",
             "-extfile", extensions.name, "-out", cert, cwd=directory)
    return TlsFiles(ca=ca, cert=directory / cert, key=directory / key)


def server_files(directory: Path) -> TlsFiles:
    """A new CA and a server certificate it signed for 127.0.0.1 and localhost."""
    ca = make_ca(directory)
    return make_certificate(directory, ca, "server", "127.0.0.1",
                            "IP:127.0.0.1,DNS:localhost")


def server_settings(files: TlsFiles, require: bool = True) -> dict[str, str]:
    """MariaDBServer settings that serve ``files``; ``require``: plain connections refused."""
    settings = {"ssl-ca": str(files.ca), "ssl-cert": str(files.cert),
                "ssl-key": str(files.key)}
    if require:
        settings["require-secure-transport"] = "ON"
    return settings
