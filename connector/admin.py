"""The few Pulsar REST admin calls the connector uses, on brokers that have them.

pulsar-client has no admin API. Topic termination is the broker-side fence of a
sealed segment: once terminated, any append by a producer holding a stale layout
fails (TopicTerminated) and the producer re-routes. pulsar-lite has no admin
API; callers then pass no admin URL and fall back as documented.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pulsar_txn.errors import AdminError, ConfigError
from pulsar_txn.metastore.redis_url import redact_url
from pulsar_txn.records import Position


def admin_topic_path(topic: str) -> str:
    """persistent://t/n/x -> /admin/v2/persistent/t/n/x (short names: public/default)."""
    domain, _, rest = topic.rpartition("://")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"not a topic name: {topic!r}")
    quoted = "/".join(urllib.parse.quote(p, safe="") for p in parts)
    return f"/admin/v2/{domain or 'persistent'}/{quoted}"


@dataclass(frozen=True)
class AdminAuth:
    """How a secured broker's REST admin API is reached: the same credentials and
    TLS trust as the binary protocol (pulsar-client's names), so one set of
    options configures both. The token is never shown (``repr`` leaves it out)."""

    token: str | None = field(default=None, repr=False)
    trust_certs_file: str | None = None  # CA bundle for https://; None = system CAs
    cert_file: str | None = None  # TLS client authentication
    key_file: str | None = None
    validate_hostname: bool = False  # pulsar-client's default, followed for one behaviour
    allow_insecure: bool = False  # accept any server certificate (tests only)

    @classmethod
    def from_client_settings(cls, token: str | None, settings: dict,
                             cert_file: str | None = None,
                             key_file: str | None = None) -> AdminAuth:
        """From pulsar.Client keyword arguments (``tls_trust_certs_file_path``, ...)."""
        return cls(token=token,
                   trust_certs_file=settings.get("tls_trust_certs_file_path") or None,
                   cert_file=cert_file or settings.get("tls_certificate_file_path") or None,
                   key_file=key_file or settings.get("tls_private_key_file_path") or None,
                   validate_hostname=bool(settings.get("tls_validate_hostname", False)),
                   allow_insecure=bool(settings.get("tls_allow_insecure_connection", False)))

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.trust_certs_file)
        ctx.check_hostname = self.validate_hostname and not self.allow_insecure
        if self.allow_insecure:
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"TLS client certificate {self.cert_file} / key "
                                  f"{self.key_file} cannot be loaded: {e}") from None
        return ctx


def admin_request(admin_url: str, method: str, path: str, timeout: float = 30.0,
                  auth: AdminAuth | None = None, body: Any = None) -> Any:
    """One REST admin call; the broker's error text is kept, it says what went wrong.
    ``auth``: a bearer token and the TLS trust for ``https://`` (a secured broker);
    ``body``: sent as JSON."""
    data = (json.dumps(body).encode() if body is not None else
            b"" if method in ("POST", "PUT") else None)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    target, basic = _split_userinfo(admin_url)
    if auth and auth.token:
        headers["Authorization"] = f"Bearer {auth.token}"
    elif basic:
        headers["Authorization"] = f"Basic {basic}"
    context = auth.ssl_context() if auth and admin_url.startswith("https://") else None
    req = urllib.request.Request(target + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:500]
        raise AdminError(f"{method} {path}: HTTP {e.code}: {detail}", e.code) from None
    except (urllib.error.URLError, OSError) as e:
        raise AdminError(f"{method} {redact_url(admin_url)}{path}: {e}") from None
    return json.loads(body) if body.strip() else None


def admin_terminate(admin_url: str, topic: str,
                    auth: AdminAuth | None = None) -> Position:
    """Terminate a topic (no more publishes); returns its last entry."""
    body = admin_request(admin_url, "POST", admin_topic_path(topic) + "/terminate",
                         auth=auth)
    if isinstance(body, dict) and "ledgerId" in body:
        return Position(int(body["ledgerId"]), int(body["entryId"]))
    return admin_last_message_id(admin_url, topic, auth)


def admin_last_message_id(admin_url: str, topic: str,
                          auth: AdminAuth | None = None) -> Position:
    body = admin_request(admin_url, "GET", admin_topic_path(topic) + "/lastMessageId",
                         auth=auth)
    return Position(int(body["ledgerId"]), int(body["entryId"]))


def native_scalable_topic(admin_url: str, topic: str,
                          auth: AdminAuth | None = None) -> bool | None:
    """Whether the broker (Apache Pulsar 5.0 and later) has a native scalable topic
    ``topic://<topic>`` of its own; None when it did not answer. Brokers without
    scalable topics answer 404, as for a missing one."""
    parts = topic.split("/")
    if len(parts) != 3:
        return False
    path = "/admin/v2/scalable/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    try:
        return isinstance(admin_request(admin_url, "GET", path, timeout=10, auth=auth), dict)
    except AdminError as e:
        return False if e.status in (404, 405) else None


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """``http://user:pw@host`` → (``http://host``, base64 ``user:pw``): urllib would take
    ``user:pw@host`` for the host name; credentials in a URL are basic authentication."""
    parsed = urllib.parse.urlsplit(url)
    if "@" not in parsed.netloc:
        return url, None
    userinfo, _, hostport = parsed.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    creds = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return (urllib.parse.urlunsplit(parsed._replace(netloc=hostport)),
            base64.b64encode(creds.encode()).decode())


def check_admin_url(url: str | None, option: str = "admin.url") -> str | None:
    if url in (None, ""):
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{option} {redact_url(url)!r} must start with http:// or https://")
    parsed = urllib.parse.urlparse(url)
    try:  # checked here: http.client's own error (at the first call) may show the password
        port = parsed.port
    except ValueError:
        port = -1
    if not parsed.hostname or port == -1 or port == 0:
        raise ConfigError(f"{option} {redact_url(url)!r} must be http[s]://host[:port] with "
                          "a port 1..65535")
    return url.rstrip("/")
