"""No error, log line or CLI output shows a password, token or ``authParams`` value
(issue 26, hole 10).

One sweep: every entry point that formats a URL or an option in an error is fed
secret-bearing values (credentials in a URL's userinfo or query, ``metastore.url``
and ``service.url`` swapped, a token given where a URL or a plugin name belongs) and
must fail without the secret in the exception (str, repr, its causes) or in anything
logged or printed on the way. Every message goes through one redaction helper,
``pulsar_txn.metastore.redis_url.redact_url``.
"""

from __future__ import annotations

import logging

import pytest

from pulsar_txn.errors import PulsarTxnError

SECRET = "S3CR3T-pw-9f2c"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0." + SECRET
PULSAR = "pulsar://127.0.0.1:1"
REDIS = "redis://127.0.0.1:1/0"

# values a user may put where a URL belongs: each carries SECRET
SECRET_URLS = [
    f"redis://app:{SECRET}@127.0.0.1:1/0",           # the metastore URL, given as service.url
    f"rediss://:{SECRET}@127.0.0.1:1/0",
    f"redis://{SECRET}@127.0.0.1:1/0",                # a bare token as user name
    f"redis://127.0.0.1:1/0?password={SECRET}",
    f"pulsar://app:{SECRET}@127.0.0.1:1",
    f"pulsar+ssl://127.0.0.1:1?token={SECRET}",
    f"http://127.0.0.1:1?authParams=token:{SECRET}",
    f"token:{TOKEN}",                                 # authParams given as a URL
    TOKEN,
    f"{SECRET}@127.0.0.1:1",
]


def _text(e: BaseException) -> str:
    """Everything an error shows, with its causes and contexts."""
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out += [str(e), repr(e), *map(str, getattr(e, "args", ()))]
        e = e.__cause__ or e.__context__
    return "\n".join(out)


@pytest.fixture
def shown(caplog, capfd):
    """Calls ``fn``; returns all it showed: its error (if any), logs and output."""
    caplog.set_level(logging.DEBUG)

    def run(fn) -> str:
        shown_error = ""
        try:
            made = fn()  # a value that passes its check: its logs must be clean too
            if hasattr(made, "close"):
                made.close()
        except (PulsarTxnError, ValueError, SystemExit) as e:
            shown_error = _text(e)
        out = capfd.readouterr()  # the file descriptors: pulsar-client's C++ log too
        return "\n".join([shown_error, caplog.text, out.out, out.err])

    return run


def _clean(text: str) -> None:
    assert SECRET not in text, text
    assert "eyJhbGciOiJIUzI1NiJ9" not in text, text


def _lower(d: dict) -> dict:
    return {k.lower(): v for k, v in d.items()}


def _producer_on(service_url: str) -> None:
    """A client whose broker does not answer: pulsar-client logs each connection attempt
    (with the URL it was given) and raises at the operation timeout."""
    from pulsar_txn.client import PulsarTxnClient

    c = PulsarTxnClient(service_url, "memory://", sweeper=False, operation_timeout_seconds=1)
    try:
        c.create_producer("persistent://public/default/x")
    finally:
        c.close()


@pytest.mark.parametrize("url", SECRET_URLS)
def test_client_errors_never_show_a_secret(shown, url):
    from pulsar_txn.client import PulsarTxnClient

    _clean(shown(lambda: PulsarTxnClient(url, REDIS)))                 # as service.url
    _clean(shown(lambda: _producer_on(url)))  # pulsar-client logs and errors on the way
    _clean(shown(lambda: PulsarTxnClient(PULSAR, url, sweeper=False)))  # as metastore.url
    _clean(shown(lambda: PulsarTxnClient(PULSAR, "memory://", admin_url=url,
                                         sweeper=False)))


@pytest.mark.parametrize("url", SECRET_URLS)
@pytest.mark.parametrize("option", ["service.url", "metastore.url", "admin.url"])
def test_spark_option_errors_never_show_a_secret(shown, url, option):
    from pulsar_txn.spark.options import SinkOptions, SourceOptions

    opts = {"service.url": PULSAR, "metastore.url": REDIS, option: url}
    if option != "admin.url":
        _clean(shown(lambda: SinkOptions.from_options(_lower({**opts, "topic": "t"}))))
    _clean(shown(lambda: SourceOptions.from_options(
        _lower({**opts, "topics": "t", "startingOffsets": "nonsense"}))))


def test_auth_option_errors_never_show_the_parameters(shown):
    """``authPluginClassName`` and ``authParams`` swapped, or a token in a wrong place."""
    from pulsar_txn.connection import authentication

    _clean(shown(lambda: authentication(f"token:{TOKEN}", "token")))
    _clean(shown(lambda: authentication(TOKEN, None)))
    _clean(shown(lambda: authentication(None, f"token:{TOKEN}")))
    _clean(shown(lambda: authentication("tls", f"tlsCertFile:{SECRET}")))
    _clean(shown(lambda: authentication("oauth2", "{not json " + SECRET)))  # C++ log too


@pytest.mark.parametrize("url", SECRET_URLS)
def test_metastore_open_never_shows_a_secret(shown, url):
    from pulsar_txn.metastore import open_store

    _clean(shown(lambda: open_store(url)))
    for extra in ("?durability=bogus", "&durability=bogus"):
        if ("?" in url) == extra.startswith("&"):
            _clean(shown(lambda e=extra: open_store(url + e)))


@pytest.mark.parametrize("url", SECRET_URLS)
def test_cli_output_never_shows_a_secret(shown, url):
    from pulsar_txn.cli import main

    _clean(shown(lambda: main(["--metastore", url, "list"])))
    _clean(shown(lambda: main(["--metastore", url, "topic", "--service-url", PULSAR, "list"])))
    _clean(shown(lambda: main(["--metastore", REDIS, "topic", "--service-url", url, "list"])))


def test_broker_errors_never_show_a_secret(shown):
    """``naming`` turns pulsar-client's transport errors into BrokerUnavailable."""
    import pulsar

    from pulsar_txn.connection import naming

    def fail():
        with naming(f"pulsar://app:{SECRET}@127.0.0.1:1?token={SECRET}"):
            raise pulsar.Timeout("TimeOut")

    _clean(shown(fail))


def test_parsed_spark_options_never_show_a_secret():
    """Option objects are printed in Spark's logs and error pages."""
    from pulsar_txn.spark.options import SinkOptions, SourceOptions

    opts = _lower({"service.url": "pulsar+ssl://127.0.0.1:1",
                   "metastore.url": f"redis://app:{SECRET}@127.0.0.1:1/0",
                   "pulsar.client.authPluginClassName": "token",
                   "pulsar.client.authParams": f"token:{TOKEN}"})
    admin = {"admin.url": f"https://app:{SECRET}@127.0.0.1:1"}
    for parsed in (SinkOptions.from_options({**opts, "topic": "t"}),
                   SourceOptions.from_options({**opts, **admin, "topics": "t"})):
        _clean(repr(parsed) + str(parsed))
