"""Failures to reach the Pulsar broker, said in the user's terms.

pulsar-client reports an unreachable broker after its operation timeout (30 s by
default) as a bare ``Pulsar error: TimeOut`` that names neither the setting nor the
address. Every place that first talks to the broker goes through :func:`naming`,
so the error says which option to fix and which address failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pulsar

from pulsar_txn.admin import AdminAuth
from pulsar_txn.errors import BrokerUnavailable, ConfigError
from pulsar_txn.metastore.redis_url import redact_url


def _transport_errors() -> tuple[type[BaseException], ...]:
    import pulsar

    return tuple(getattr(pulsar, n) for n in ("Timeout", "ConnectError", "LookupError")
                 if isinstance(getattr(pulsar, n, None), type))


def shown_url(url: str) -> str:
    return redact_url(url)


@contextmanager
def naming(service_url: str, option: str = "service.url", what: str = "") -> Iterator[None]:
    """Re-raise a transport failure as :class:`BrokerUnavailable` naming the option
    and the address (never a secret: the URL is redacted)."""
    try:
        yield
    except BrokerUnavailable as e:  # from below (a scan): add what the user can fix
        if "service.url" in str(e):
            raise
        raise BrokerUnavailable(f"{e} (the broker at {shown_url(service_url)}, option "
                                f"'{option}')") from e
    except _transport_errors() as e:
        doing = f" while {what}" if what else ""
        raise BrokerUnavailable(
            f"the Pulsar broker at {shown_url(service_url)} (option '{option}') did not "
            f"answer{doing}: {e}. Check the address and that the broker is up; "
            "pulsar-client gives up after its operation timeout "
            "('pulsar.client.operation_timeout_seconds', default 30 s)") from e


def check_service_url(url: str, option: str = "service.url") -> str:
    """The broker URL, refused (shown redacted) unless ``pulsar[+ssl]://host:port[,...]``.

    Credentials never belong in it (Pulsar takes them in ``authParams``), and
    pulsar-client writes the whole URL into its own log lines and errors, which this
    layer cannot redact: a URL with userinfo, a query or a fragment is refused here,
    before any pulsar-client sees it."""
    if not isinstance(url, str) or not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise ConfigError(f"option '{option}' must start with pulsar:// or pulsar+ssl://, "
                          f"got {redact_url(str(url))!r}")
    rest = url.split("://", 1)[1]
    if any(c in rest for c in "@?#"):
        raise ConfigError(f"option '{option}' {redact_url(url)!r} must be "
                          "pulsar[+ssl]://host:port[,host:port...] with no credentials, "
                          "query or fragment: credentials go in the authentication "
                          "options (pulsar.client.authPluginClassName / authParams)")
    for hp in rest.rstrip("/").split(","):  # pulsar-client says only "invalid hostname"
        host, colon, port = hp.strip().rpartition(":")
        if not colon or "]" in port:  # no port, or a bare [IPv6]: the default port
            host, port = hp.strip(), ""
        elif not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"option '{option}' {redact_url(url)!r}: port {port!r} of "
                              f"{hp.strip()!r} is not a number 1..65535")
        if not host.strip("[]"):
            raise ConfigError(f"option '{option}' {redact_url(url)!r}: a host is missing "
                              "(pulsar[+ssl]://host:port[,host:port...])")
    return url


def check_reachable(client, service_url: str, topic: str, option: str = "service.url") -> None:
    """One lookup, so a wrong address fails when a query starts, not in a task later."""
    with naming(service_url, option, f"looking up {topic}"):
        client.get_topic_partitions(topic)


# ---- authentication (the names pulsar-spark and the Java client use) ----
_TOKEN = ("token", "org.apache.pulsar.client.impl.auth.authenticationtoken")
_TLS = ("tls", "org.apache.pulsar.client.impl.auth.authenticationtls")
_OAUTH2 = ("oauth2", "org.apache.pulsar.client.impl.auth.oauth2.authenticationoauth2")
PLUGIN_OPTION = "pulsar.client.authPluginClassName"
PARAMS_OPTION = "pulsar.client.authParams"


def _token(params: str) -> str:
    """``token:<jwt>``, ``file:///path``, ``env:VAR`` or the bare token."""
    import os

    params = params.strip()
    if params.startswith("token:"):
        return params[len("token:"):]
    if params.startswith("file:"):
        path = params[len("file://"):] if params.startswith("file://") else params[5:]
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError(f"option '{PARAMS_OPTION}': cannot read the token file {path} "
                              f"({e.strerror})") from None
    if params.startswith("env:"):
        value = os.environ.get(params[4:])
        if not value:
            raise ConfigError(f"option '{PARAMS_OPTION}': environment variable "
                              f"{params[4:]} is not set")
        return value
    return params


def _tls(params: str) -> tuple[str, str]:
    """``tlsCertFile:/c.pem,tlsKeyFile:/k.pem`` (the Java form) or that as JSON."""
    import json

    try:
        parsed = (json.loads(params) if params.strip().startswith("{") else
                  dict(kv.split(":", 1) for kv in params.split(",") if kv.strip()))
        return parsed["tlsCertFile"].strip(), parsed["tlsKeyFile"].strip()
    except (ValueError, KeyError, AttributeError):
        raise ConfigError(f"option '{PARAMS_OPTION}': TLS authentication needs "
                          "'tlsCertFile:<path>,tlsKeyFile:<path>'") from None


def authentication(plugin: str | None, params: str | None):
    """A pulsar-client authentication object from a plugin name and its parameters,
    or None. Errors name the options, never the parameters (they hold secrets)."""
    import pulsar

    if not plugin:
        if params:
            raise ConfigError(f"option '{PARAMS_OPTION}' is set but '{PLUGIN_OPTION}' is not")
        return None
    kind = plugin.strip().lower()
    if kind in _TOKEN:
        raw = (params or "").strip()
        _token(raw)  # checked now: a missing file or variable is a clear error here
        if raw.startswith(("file:", "env:")):  # re-read on each (re)connect: rotation
            return pulsar.AuthenticationToken(lambda: _token(raw))
        return pulsar.AuthenticationToken(_token(raw))
    if kind in _TLS:
        return pulsar.AuthenticationTLS(*_tls(params or ""))
    if kind in _OAUTH2:
        if not params:
            raise ConfigError(f"option '{PARAMS_OPTION}': OAuth2 needs its JSON parameters "
                              "(type, issuerUrl, privateKey, audience)")
        return pulsar.AuthenticationOauth2(params)
    # the value is not shown: swapped with authParams, it would be the secret
    raise ConfigError(f"option '{PLUGIN_OPTION}' names an unsupported plugin; supported: "
                      "token, tls, oauth2 or their Java class names")


def is_supported_auth(plugin: str) -> bool:
    """Whether ``authentication`` can build this plugin (checked when options are parsed)."""
    return plugin.strip().lower() in (*_TOKEN, *_TLS, *_OAUTH2)


def bearer_token(plugin: str | None, params: str | None) -> str | None:
    """The token for the broker's REST admin API (token authentication only)."""
    if plugin and plugin.strip().lower() in _TOKEN:
        return _token(params or "")
    return None


def admin_auth(plugin: str | None, params: str | None, client_settings: dict):
    """The REST admin API's credentials and TLS trust, from the same options as the
    binary protocol: the token, or the TLS client certificate, and the ``tls_*``
    pulsar.Client settings (trust store, hostname verification)."""
    cert = key = None
    if plugin and plugin.strip().lower() in _TLS:
        cert, key = _tls(params or "")
    return AdminAuth.from_client_settings(bearer_token(plugin, params), client_settings,
                                          cert_file=cert, key_file=key)


def quiet_logger():
    """pulsar-client's own log at warnings and above (its info lines are per
    connection), on stderr: never on stdout, where a command's ``--json`` goes.

    pulsar-client's ConsoleLogger writes to stdout; its FileLogger on this process's
    stderr (fd 2) logs from the C++ threads without calling into Python (a Python
    ``logger=`` is called from those threads, up to the interpreter's exit: known to
    hang or abort processes). A log file that stderr was redirected to without
    appending (``job > log 2>&1``) is switched to appending first, so the C++ lines
    and the process's own go to its end rather than over each other. Only where fd 2
    cannot be opened again (a socket, none at all) do the lines go to the Python
    logger ``pulsar_txn.pulsar_client``."""
    path = _stderr_path()
    if path is not None:
        return pulsar.FileLogger(pulsar.LoggerLevel.Warn, path)
    import logging

    logger = logging.getLogger("pulsar_txn.pulsar_client")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    return logger


def _stderr_path() -> str | None:
    """A path that appends to this process's stderr (fd 2), or None."""
    import fcntl
    import os
    import stat

    try:
        mode = os.fstat(2).st_mode
        flags = fcntl.fcntl(2, fcntl.F_GETFL)
        if stat.S_ISREG(mode) and not flags & os.O_APPEND:
            fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_APPEND)
    except OSError:  # no fd 2
        return None
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    path = "/proc/self/fd/2" if os.path.exists("/proc/self/fd") else "/dev/stderr"
    try:
        with open(path, "a"):
            return path
    except OSError:
        return None
