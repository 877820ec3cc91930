"""Schemas registered as an operator does (``pulsar-admin schemas upload``, the REST
admin API): the primitive and KEY_VALUE ones pulsar-client registers through no
producer."""

from __future__ import annotations

import json
import urllib.parse

from pulsar_txn.admin import admin_request

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"],
                                    "default": None}]}


def upload(broker, topic: str, kind: str, schema: str = "", properties: dict | None = None
           ) -> None:
    parts = topic.split("://", 1)[1].split("/")
    path = "/admin/v2/schemas/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    admin_request(broker.admin_url, "POST", path + "/schema",
                  body={"type": kind, "schema": schema, "properties": properties or {}})


def upload_key_value(broker, topic: str, encoding: str = "INLINE", key: str = "STRING",
                     value: str = "AVRO") -> None:
    """A KEY_VALUE schema registered as ``pulsar-admin schemas upload`` does."""
    upload(broker, topic, "KEY_VALUE",
           json.dumps({"key": "", "value": ORDER if value == "AVRO" else ""}),
           {"key.schema.type": key, "key.schema.name": "", "key.schema.properties": "{}",
            "value.schema.type": value, "value.schema.name": "",
            "value.schema.properties": "{}", "kv.encoding.type": encoding})
