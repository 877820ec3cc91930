"""Errors a user can act on: options named as documented, bad topics refused at parse."""

from __future__ import annotations

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.spark.options import SinkOptions, SourceOptions

BASE = {"service.url": "pulsar://localhost:6650", "metastore.url": "redis://localhost:6379"}


def _lower(d: dict) -> dict:
    return {k.lower(): v for k, v in d.items()}  # what Spark hands over


@pytest.mark.parametrize("key,value,named", [
    ("startingOffsets", "yesterday", "startingOffsets"),
    ("maxRecordsPerTrigger", "many", "maxRecordsPerTrigger"),
    ("failOnDataLoss", "perhaps", "failOnDataLoss"),
    ("maxTriggerDelay", "soon", "maxTriggerDelay"),
    ("dataTimeoutMs", "10", "dataTimeoutMs"),
    ("minPartitions", "-1", "minPartitions"),
])
def test_source_errors_name_the_option_as_documented(key, value, named):
    with pytest.raises(ConfigError) as err:
        SourceOptions.from_options(_lower({**BASE, "topic": "t", key: value}))
    assert repr(named) in str(err.value), str(err.value)


def test_max_trigger_delay_zero_means_zero_not_the_default():
    opts = SourceOptions.from_options(_lower({**BASE, "topic": "t", "maxTriggerDelay": "0",
                                              "minRecordsPerTrigger": "10"}))
    assert opts.max_trigger_delay_ms == 0


@pytest.mark.parametrize("topic", ["a b", "persistent://public/default/x y",
                                   "persistent://pub lic/default/x", "tab\there"])
def test_invalid_topic_names_are_refused_when_options_are_parsed(topic):
    with pytest.raises(ConfigError, match="option 'topic'"):
        SourceOptions.from_options(_lower({**BASE, "topic": topic}))
    with pytest.raises(ConfigError, match="option 'topic'"):
        SinkOptions.from_options(_lower({**BASE, "topic": topic}))
    with pytest.raises(ConfigError, match="option 'topics'"):
        SourceOptions.from_options(_lower({**BASE, "topics": f"ok,{topic}"}))


def test_java_client_tls_names_are_accepted_and_a_setting_given_twice_is_refused():
    import pulsar
    import pytest

    from pulsar_txn.errors import ConfigError
    from pulsar_txn.spark.options import _passthrough

    got = _passthrough({"pulsar.client.tlstrustcertsfilepath": "/ca.pem",
                        "pulsar.client.tlshostnameverificationenable": "true",
                        "pulsar.client.tlsallowinsecureconnection": "false"},
                       "pulsar.client.", pulsar.Client.__init__)
    assert got == {"tls_trust_certs_file_path": "/ca.pem", "tls_validate_hostname": True,
                   "tls_allow_insecure_connection": False}
    with pytest.raises(ConfigError, match="given twice"):
        _passthrough({"pulsar.client.tlstrustcertsfilepath": "/a.pem",
                      "pulsar.client.tls_trust_certs_file_path": "/b.pem"},
                     "pulsar.client.", pulsar.Client.__init__)


def test_admin_credentials_never_show_the_token():
    from pulsar_txn.admin import AdminAuth
    from pulsar_txn.connection import admin_auth

    auth = admin_auth("token", "token:s3cr3t-t0ken", {"tls_trust_certs_file_path": "/ca.pem",
                                                     "tls_validate_hostname": True})
    assert auth.token == "s3cr3t-t0ken" and auth.trust_certs_file == "/ca.pem"
    assert auth.validate_hostname
    assert "s3cr3t" not in repr(auth) and "s3cr3t" not in str(auth)
    tls = admin_auth("tls", "tlsCertFile:/c.pem,tlsKeyFile:/k.pem", {})
    assert (tls.cert_file, tls.key_file, tls.token) == ("/c.pem", "/k.pem", None)
    assert AdminAuth().ssl_context().check_hostname is False  # pulsar-client's default


def test_parsed_options_never_show_the_metastore_password():
    """Spark logs and error pages print option objects; the metastore URL's password
    (userinfo or ?password=) must not be in them."""
    opts = {**BASE, "metastore.url": "redis://app:s3cr3t-pw@localhost:6379/0"}
    sink = SinkOptions.from_options(_lower({**opts, "topic": "t"}))
    source = SourceOptions.from_options(_lower({**opts, "topics": "t"}))
    for parsed in (sink, source):
        assert parsed.metastore_url.endswith("@localhost:6379/0")  # still usable
        assert "s3cr3t" not in repr(parsed) and "s3cr3t" not in str(parsed)


def test_a_token_only_metastore_url_never_shows_the_token():
    """``redis://TOKEN@host`` (userinfo without a colon) is how some services hand out a
    bare access token; redis-py reads it as a user name, but what it holds is a secret:
    messages, logs and option objects must not show it (the address still shows)."""
    from pulsar_txn.metastore.redis_url import redact_url

    assert redact_url("redis://t0ken-s3cr3t@localhost:6379/0") == "redis://***@localhost:6379/0"
    assert (redact_url("redis+cluster://t0ken-s3cr3t@10.0.0.1:7000,10.0.0.2:7000/0")
            == "redis+cluster://***@10.0.0.1:7000,10.0.0.2:7000/0")
    opts = {**BASE, "metastore.url": "redis://t0ken-s3cr3t@localhost:6379/0"}
    for parsed in (SinkOptions.from_options(_lower({**opts, "topic": "t"})),
                   SourceOptions.from_options(_lower({**opts, "topics": "t"}))):
        assert "t0ken-s3cr3t" not in repr(parsed) and "t0ken-s3cr3t" not in str(parsed)
    # a user name with a password keeps the user name: it helps and is no secret
    assert redact_url("redis://app:pw-s3cr3t@h:1/0") == "redis://app:***@h:1/0"


def test_a_metastore_url_the_parser_cannot_split_never_shows_its_secret():
    """Without ``//`` (a forgotten scheme) or with an unencoded ``/``, ``?`` or ``#``
    in the password, URL parsing finds no userinfo: everything before the last ``@``
    is hidden then (review finding: these came back unchanged)."""
    from pulsar_txn.metastore.redis_url import redact_url

    for url in (":s3cret@host:6379", "user:s3cret@host:6379", "redis://:pa/s3cret@host:6379",
                "redis://:pa#s3cret@host:6379", "redis://:pa?s3cret@host:6379/0",
                "rediss://u:p/s3cret@h1:1,h2:2/0"):
        shown = redact_url(url)
        assert "s3cret" not in shown and shown.endswith(url.rpartition("@")[2]), shown
