#!/usr/bin/env bash
# Resolve the reference broker (Apache Pulsar standalone) jars from Maven Central
# into the cache once; the test harness also does this on first use.
set -euo pipefail
exec python3 -m pulsar_txn.harness.standalone provision
