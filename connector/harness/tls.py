"""A throw-away certificate authority for the test services (openssl, no Python deps).

Secured clusters use TLS with a private CA; the tests need the same shape on
loopback: a CA the client trusts, a server certificate valid for 127.0.0.1 and
localhost (so hostname verification can be switched on), and a client
certificate for TLS client authentication. Keys are PKCS#8 (Pulsar's broker
refuses the older RSA format).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestCA:
    dir: Path

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.dir / "client.key"


def make_ca(d: Path, client_cn: str = "app") -> TestCA:
    """Create (once) a CA, a server and a client certificate under ``d``."""
    ca = TestCA(Path(d))
    if ca.client_cert.exists():
        return ca
    ca.dir.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=ca.dir, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=pulsar-txn test CA")
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                          ("client", client_cn, "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        (ca.dir / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                "-extfile", f"{name}.ext")
    return ca
