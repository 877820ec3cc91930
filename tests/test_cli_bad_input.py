"""The CLI answers bad input in one line on stderr with exit 2, naming the flag, never a
traceback and never a secret (issue 30, The CLI / Errors); ``--version`` exists; the
Pulsar flags are accepted before the subcommand as after it. The store is ``memory://``
and the broker addresses answer nothing: each case is refused before a connection."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pulsar_txn import cli

SECRET = "S3CR3T-pw-4b0a"
PULSAR = "pulsar://127.0.0.1:1"


def _run(*argv: str) -> subprocess.CompletedProcess:
    """The installed entry point's code in a fresh process: what a shell user sees."""
    return subprocess.run([sys.executable, "-m", "pulsar_txn.cli", *argv], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("argv,named", [
    (["topic", "--admin-url", f"http://app:{SECRET}@h:notaport", "describe", "topic://a/b/c"],
     "--admin-url"),
    (["topic", "--admin-url", f"ftp://app:{SECRET}@h:1", "describe", "topic://a/b/c"],
     "--admin-url"),
    (["topic", "describe", "topic://a/b/c", "--admin-url", f"https://:{SECRET}@/x"],
     "--admin-url"),
    (["topic", "--service-url", "pulsar://h:notaport", "describe", "topic://a/b/c"],
     "--service-url"),
])
def test_a_bad_url_flag_is_one_line_exit_2_naming_it_without_the_secret(argv, named):
    done = _run("--metastore", "memory://", *argv[:1], "--service-url", PULSAR, *argv[1:])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pulsar-txn: "), done.stderr
    assert named in lines[0], done.stderr
    assert SECRET not in done.stderr + done.stdout


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as ex:
        cli.main(["--version"])
    assert ex.value.code == 0
    assert version("pulsar-txn") in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--service-url", PULSAR, "--admin-url", "http://h:8080", "topic", "describe", "topic://a/b/c"],
    ["topic", "--service-url", PULSAR, "describe", "topic://a/b/c", "--admin-url", "http://h:8080"],
    ["--service-url", "pulsar://other:1", "topic", "describe", "topic://a/b/c",
     "--service-url", PULSAR, "--admin-url", "http://h:8080"],  # the last one given wins
])
def test_pulsar_flags_are_accepted_before_and_after_the_subcommand(argv):
    args = cli.build_parser().parse_args(["--metastore", "memory://", *argv])
    assert (args.service_url, args.admin_url) == (PULSAR, "http://h:8080")
    assert (args.cmd, args.topic_cmd, args.name) == ("topic", "describe", "topic://a/b/c")


def test_pulsar_flags_before_metrics_serve_are_kept():
    args = cli.build_parser().parse_args(["--metastore", "memory://", "--service-url", PULSAR,
                                          "metrics", "serve", "--port", "1"])
    assert args.service_url == PULSAR and args.port == 1


@pytest.mark.parametrize("value", ["-1", "abc"])
def test_sweep_refuses_a_negative_retention_naming_the_flag(value):
    """``sweep --retention-ms -1`` collected every finalized transaction without a word
    (issue 30; the Spark option refuses -1): nothing is swept, exit 2, one line."""
    done = _run("--metastore", "memory://", "sweep", "--retention-ms", value)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "--retention-ms" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == ""


def test_metrics_serve_on_a_taken_port_names_it_in_one_line():
    """It printed a traceback (issue 30)."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    try:
        done = _run("--metastore", "memory://", "metrics", "serve", "--port", port,
                    "--addr", "127.0.0.1")
    finally:
        taken.close()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "--port" in done.stderr and port in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_metrics_serve_with_redis_down_names_the_metastore_flag_not_the_spark_option():
    """It answered in one line already, but named ``metastore.url``, the Spark option:
    the CLI user's word is ``--metastore`` (issue 30)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    done = _run("--metastore", f"redis://:{SECRET}@127.0.0.1:{port}/0", "metrics", "serve",
                "--port", "0", "--addr", "127.0.0.1")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "--metastore" in lines[0] and "metastore.url" not in lines[0], lines[0]
    assert f"127.0.0.1:{port}" in lines[0] and SECRET not in done.stderr + done.stdout


def test_an_unknown_namespace_names_the_cli_flags(capsys):
    """A read-only command on a namespace that does not exist names ``--namespace`` and
    ``--metastore`` (the options a CLI user can fix), and the namespaces there."""
    import uuid

    from pulsar_txn.metastore import MemoryMetadataStore

    name = f"cli-ns-{uuid.uuid4().hex[:8]}"
    MemoryMetadataStore(name, namespace="real")
    assert cli.main(["--metastore", f"memory://{name}", "--namespace", "typo", "list"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--namespace" in err and "--metastore" in err and "'real'" in err, err
    assert "metastore.namespace" not in err and "metastore.url" not in err, err
