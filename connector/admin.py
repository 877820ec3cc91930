"""The few Pulsar REST admin calls the connector uses, on brokers that have them.

pulsar-client has no admin API. Topic termination is the broker-side fence of a
sealed segment: once terminated, any append by a producer holding a stale layout
fails (TopicTerminated) and the producer re-routes. pulsar-lite has no admin
API; callers then pass no admin URL and fall back as documented.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from pulsar_txn.errors import ConfigError, PulsarTxnError


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


class AdminError(PulsarTxnError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def admin_request(admin_url: str, method: str, path: str, timeout: float = 30.0,
                  token: str | None = None) -> Any:
    """One REST admin call; the broker's error text is kept, it says what went wrong.
    ``token``: sent as a bearer token (a broker with token authentication)."""
    data = b"" if method in ("POST", "PUT") else None
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(admin_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:500]
        raise AdminError(f"{method} {path}: HTTP {e.code}: {detail}", e.code) from None
    except (urllib.error.URLError, OSError) as e:
        from pulsar_txn.metastore.redis_store import redact_url

        raise AdminError(f"{method} {redact_url(admin_url)}{path}: {e}") from None
    return json.loads(body) if body.strip() else None


def admin_terminate(admin_url: str, topic: str, token: str | None = None) -> tuple[int, int]:
    """Terminate a topic (no more publishes); returns its last (ledgerId, entryId)."""
    body = admin_request(admin_url, "POST", admin_topic_path(topic) + "/terminate",
                         token=token)
    if isinstance(body, dict) and "ledgerId" in body:
        return int(body["ledgerId"]), int(body["entryId"])
    return admin_last_message_id(admin_url, topic, token)


def admin_last_message_id(admin_url: str, topic: str,
                          token: str | None = None) -> tuple[int, int]:
    body = admin_request(admin_url, "GET", admin_topic_path(topic) + "/lastMessageId",
                         token=token)
    return int(body["ledgerId"]), int(body["entryId"])


def check_admin_url(url: str | None, option: str = "admin.url") -> str | None:
    if url in (None, ""):
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{option} {url!r} must start with http:// or https://")
    return url.rstrip("/")
