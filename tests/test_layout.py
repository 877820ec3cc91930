"""The code's shape, checked: the edges a newcomer relies on stay where the
architecture page says they are (docs/architecture.md, "Module map").

These parse the sources (no imports run), so they take milliseconds and fail
on the line that breaks the rule.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"pulsar_txn": ROOT / "connector", "pulsar_txn.metastore": ROOT / "metastore"}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Import name -> file, for every module of the package (harness and the
    Spark autoload shim included)."""
    out: dict[str, Path] = {}
    for pkg, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if pkg == "pulsar_txn" and parts[:1] == ["spark"] and parts[1:2] == ["autoload"]:
                continue  # re-exports the data source under pyspark's naming rule
            name = ".".join([pkg, *parts])
            out[name] = path
    return out


MODULES = _modules()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imports(name: str, path: Path) -> set[str]:
    """Package modules this one imports, at any depth (function-level too: a
    cycle hidden inside a function is still a cycle)."""
    found: set[str] = set()
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rsplit(".", 1)[0]
    for node in ast.walk(_tree(path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                mod = ".".join([*anchor, mod] if mod else anchor)
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in MODULES:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name and not name.startswith(t + "."):
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    # A package's __init__ only re-exports (lazily); importing pulsar_txn.x runs
    # pulsar_txn/__init__, which is not an edge of the design.
    return {n: {t for t in _imports(n, p) if t not in FOLDERS} for n, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components larger than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_the_metastore_imports_nothing_above_it():
    up = {n: sorted(t for t in deps if not t.startswith("pulsar_txn.metastore")
                    and t not in ("pulsar_txn.records", "pulsar_txn.state",
                                  "pulsar_txn.errors", "pulsar_txn.position"))
          for n, deps in _graph().items() if n.startswith("pulsar_txn.metastore")}
    assert {n: d for n, d in up.items() if d} == {}


def test_nothing_outside_the_client_facade_names_it():
    offenders = []
    for name, path in MODULES.items():
        if name in ("pulsar_txn.client", "pulsar_txn"):
            continue  # the façade itself, and the package's lazy re-export
        for node in ast.walk(_tree(path)):
            ident = (node.id if isinstance(node, ast.Name) else
                     node.attr if isinstance(node, ast.Attribute) else
                     node.value if isinstance(node, ast.Constant) else None)
            if isinstance(node, ast.alias):
                ident = node.name
            if ident == "PulsarTxnClient":
                offenders.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert offenders == []


def _defined_private(path: Path) -> set[str]:
    """``_names`` a module defines itself: functions, classes, methods,
    attributes it assigns on ``self``/``cls`` and module-level names."""
    names: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


# Underscore names of other libraries that we use on purpose, with the reason.
THIRD_PARTY = {
    "_reader": "pulsar-client's native Reader: the hot path skips a wrapper per message",
    "_consumer": "pulsar-client's native Consumer: same",
    "_producer": "pulsar-client's native Producer: send_many builds messages natively",
    "_msg_id": "pulsar-client's native MessageId: compared without a wrapper",
    "_replace": "namedtuple's public API (urllib's ParseResult)",
    "_schema": "pulsar-client's schema object of a reader or consumer (it keeps no public "
               "accessor): a typed reader's messages decode with it, as pulsar-client's",
    "_client": "pulsar-client's native Client: its schema lookup (get_schema_info) has no "
               "wrapper method",
    "_exit": "os._exit: a fault seam kills the driver without cleanup",
    "_sock": "redis-py's connection socket: a fault seam cuts a watch's connection",
    "_parser": "redis-py's connection parser: where a RESP3 invalidation handler is set "
               "(redis-py has no public setter; redis_tracking.py)",
}


def test_no_module_reaches_into_another_modules_private_names():
    """An attribute ``x._name`` is allowed only when ``_name`` is defined in the
    same module (its own objects), and ``from m import _name`` never."""
    offenders = []
    for path in MODULES.values():
        own = _defined_private(path)
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}")
            elif isinstance(node, ast.Attribute):
                a = node.attr
                if (a.startswith("_") and not a.startswith("__") and a not in own
                        and a not in THIRD_PARTY):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} uses .{a}")
    assert offenders == []


def test_no_source_file_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


STATUS = re.compile(r"""["'](OK|UNMATERIALIZED|NOTACTIVE|NOTFOUND|NOT_OPEN|EXISTS|STALE|"""
                    r"""CONFLICT|SEALED|BUSY|GONE|DONE|EXPIRED|NOSUCH)["']""")


def test_no_store_status_string_crosses_the_store_boundary():
    """The store answers in typed values; the literals its scripts return stay
    in metastore/."""
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("pulsar_txn.metastore") or name == "pulsar_txn.state":
            continue  # state.py defines the typed states (SegmentState.SEALED)
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if STATUS.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == []


def test_the_stores_encodings_stay_inside_the_metastore():
    """Issue 32: the store interface speaks Positions, TxnIds and typed records; only
    the backends know keys, fields and their encodings (metastore/keys.py)."""
    offenders = [f"{name} imports {dep}" for name, path in sorted(MODULES.items())
                 if not name.startswith("pulsar_txn.metastore")
                 for dep in sorted(_imports(name, path))
                 if dep == "pulsar_txn.metastore.keys"]
    assert offenders == []


def test_pulsar_txn_imports_sit_at_module_top():
    """Only pyspark and heavy third-party imports are lazy (the reason is in
    pulsar_txn/spark/__init__.py); a package import inside a function hides an
    edge from readers and tools."""
    offenders = []
    for path in MODULES.values():
        tree = _tree(path)
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                mod = (node.module or "" if isinstance(node, ast.ImportFrom)
                       else node.names[0].name)
                if mod.startswith("pulsar_txn") and not _in_type_checking(tree, node):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {mod}")
    assert offenders == []


def _in_type_checking(tree: ast.Module, target: ast.AST) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if any(n is target for n in ast.walk(node)):
                return True
    return False


def test_every_lazy_public_name_resolves():
    """``pulsar_txn.<Name>`` for each name the package exports (issue 32: the lazy map
    named a module that does not define TxnMessage, and no test resolved it)."""
    import pulsar_txn

    for name in pulsar_txn.__all__:
        assert getattr(pulsar_txn, name) is not None, name
        assert getattr(pulsar_txn, name).__name__ == name


# The layers, bottom first (docs/architecture.md, "Layers", prints this table): a
# module imports only modules of its own layer or below. Vocabulary is what every
# layer speaks; the metastore knows nothing of Pulsar; the broker edges know the
# metastore's URL rules only; roles are the PIP's; the client composes them; Spark
# uses the client's pieces; the tools (CLI, harness) sit on top.
LAYERS = [
    ("vocabulary", ["pulsar_txn", "pulsar_txn.errors", "pulsar_txn.state", "pulsar_txn.records",
                    "pulsar_txn.hashing", "pulsar_txn.topics", "pulsar_txn.message",
                    "pulsar_txn.deployments"]),
    ("metastore", ["pulsar_txn.metastore", "pulsar_txn.metastore.*"]),
    ("broker edges", ["pulsar_txn.broker_io", "pulsar_txn.admin", "pulsar_txn.connection",
                      "pulsar_txn.entry_acks", "pulsar_txn.schemas", "pulsar_txn.schema_codec",
                      "pulsar_txn.schema_json", "pulsar_txn.schema_key_value"]),
    ("roles", ["pulsar_txn.buffer", "pulsar_txn.coordinator", "pulsar_txn.pending_ack",
               "pulsar_txn.writer", "pulsar_txn.transaction", "pulsar_txn.readers",
               "pulsar_txn.consumer", "pulsar_txn.producer", "pulsar_txn.metrics",
               "pulsar_txn.scalable", "pulsar_txn.scalable.*"]),
    ("client", ["pulsar_txn.client"]),
    ("spark", ["pulsar_txn.spark", "pulsar_txn.spark.*"]),
    ("tools", ["pulsar_txn.cli", "pulsar_txn.cli_topics", "pulsar_txn.harness",
               "pulsar_txn.harness.*"]),
]


def _layer(module: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if module == m or (m.endswith(".*") and module.startswith(m[:-1])):
                return i
    raise AssertionError(f"{module} is in no layer of LAYERS: give it one")


def test_imports_point_down_the_layer_table():
    """Every import goes to the importer's layer or one below (issue 32: topics.py
    imported scalable/dag.py for the name rule and the hash, the one import up)."""
    up = [f"{name} ({LAYERS[_layer(name)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
          for name, path in sorted(MODULES.items()) for dep in sorted(_imports(name, path))
          if _layer(dep) > _layer(name)]
    assert up == []


def test_the_architecture_page_prints_the_layer_table():
    page = (ROOT / "docs" / "architecture.md").read_text()
    for name, members in LAYERS:
        line = f"| {name} | " + ", ".join(f"`{m}`" for m in members) + " |"
        assert line in page, f"docs/architecture.md must list the layer: {line}"


MAX_FUNCTION_LINES = 80
# Functions allowed over the guard, each with its reason; the list may only shrink
# (an entry whose function got short fails the test too, so it is removed).
LONG_FUNCTIONS = {
}


def test_no_function_is_over_the_size_guard_without_a_named_reason():
    long = {}
    for name, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = size
    assert sorted(set(long) - set(LONG_FUNCTIONS)) == [], long
    assert sorted(set(LONG_FUNCTIONS) - set(long)) == [], "now short: remove from the list"


def test_every_send_async_speaks_pulsar_clients_argument_order():
    """One send vocabulary (issue 32): ``send_async(value, callback, …)`` as
    pulsar-client's ``Producer.send_async(content, callback, …)``, for the client API's
    producers and the writer-runs under them: the two positional arguments everyone
    passes mean the same everywhere (the rest go by keyword: the producers take ``key``
    third, as the client API's ``send`` does, the runs ``properties``)."""
    import inspect

    from pulsar_txn.producer import Producer
    from pulsar_txn.scalable.producer import ScalableProducer
    from pulsar_txn.spark.sink_task import _PlainRun
    from pulsar_txn.writer import WriterRun

    for cls in (Producer, ScalableProducer, WriterRun, _PlainRun):
        names = list(inspect.signature(cls.send_async).parameters)[1:3]
        assert names == ["value", "callback"], f"{cls.__qualname__}.send_async{names}"
