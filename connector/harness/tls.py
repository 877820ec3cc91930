"""A throw-away certificate authority for the test services (``trustme``).

Secured clusters use TLS with a private CA; the tests need the same shape on
loopback: a CA the client trusts, a server certificate valid for 127.0.0.1 and
localhost (so hostname verification can be switched on), and a client
certificate for TLS client authentication. Keys are PKCS#8 (Pulsar's broker
refuses the older RSA format, which trustme writes: they are re-encoded).
"""

from __future__ import annotations

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
    import trustme  # the test extra: only secured test services need it
    from cryptography.hazmat.primitives import serialization as ser

    ca = TestCA(Path(d))
    if ca.client_cert.exists():
        return ca
    ca.dir.mkdir(parents=True, exist_ok=True)
    rsa = trustme.KeyType.RSA
    authority = trustme.CA(key_type=rsa, organization_name="pulsar-txn test CA")
    authority.cert_pem.write_to_path(str(ca.ca_file))
    for cert, key, leaf in (
            (ca.server_cert, ca.server_key,
             authority.issue_cert("127.0.0.1", "localhost", common_name="127.0.0.1",
                                  key_type=rsa)),
            (ca.client_cert, ca.client_key,
             authority.issue_cert(client_cn, common_name=client_cn, key_type=rsa))):
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        pkey = ser.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
        key.write_bytes(pkey.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                           ser.NoEncryption()))
    return ca
