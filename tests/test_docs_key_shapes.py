"""Redis key shapes shown in the docs come from the key builders (metastore/keys.py).

Every inline code span in README.md and docs/*.md that shows a key (or a partition
tag) is turned into a pattern and must match a key that ``Keys`` builds for a sample
namespace, in the plain or the spread tag layout; a renamed key in keys.py fails here.
Every key ``Keys`` builds is in architecture.md's key table, and a Redis command shown
to an operator names the partition tag of either layout (``<tag>`` or ``T(p)``), never
one layout's form only (``DEL {ns:p}:…`` misses every key of a spread namespace).

Notation in the docs: ``{ns:p}``, ``{<ns>:<p>}``, ``{<namespace>:<p>}`` a plain tag;
``{ns~<salt>}`` (``<ns>``, ``<namespace>``) a spread tag; ``<tag>`` and ``T(p)`` either;
``ns``, ``<ns>``, ``<namespace>`` the namespace; any other ``<…>`` any text.
"""

import inspect
import re
from pathlib import Path

import pytest

from pulsar_txn.metastore.keys import LAYOUTS, SPREAD_LAYOUT, Keys

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NS, P = "ptxn", 16
# keys the docs name as no longer used (an upgrade note): they must match no key
RETIRED = {"{ns:sink:<id>}"}
SAMPLE = {"p": 3, "seq": 42, "segment": "persistent://public/default/orders-seg-1",
          "sink_id": "query-0c1f", "topic": "public/default/orders", "subscription": "svc"}
DECODERS = {"key"}  # builders taking a built key back apart (open_writes_segment …)

NSX = r"(?:ns|<ns>|<namespace>)"
PLAIN_TAG = re.compile(r"\{" + NSX + r":(?:p|<p>)\}")
SPREAD_TAG = re.compile(r"\{" + NSX + r"~<salt>\}")
ANY_TAG = re.compile(r"<tag>|T\(p\)")
NAMESPACE = re.compile(NSX + r"(?=[:~])")
PLACEHOLDER = re.compile(r"<[^<>]*>")
NS_RE = re.escape(NS)
TAG_RES = {"plain": r"\{" + NS_RE + r":\d+\}", SPREAD_LAYOUT: r"\{" + NS_RE + r"~\d+\}"}
COMMAND = re.compile(r"^([A-Z]{2,}) +")
# a key or tag shape: what it starts with, after an optional Redis command
KEYISH = re.compile(r"^(?:[A-Z]{2,} +)?(?:\{" + NSX + r"[:~]|" + NSX + r":|\{?<tag>|T\(p\))")


def built() -> dict[str, set[str]]:
    """Every key and tag the builders make for the sample namespace, by builder name
    (both layouts). A builder with an argument not in SAMPLE fails: add a sample."""
    out: dict[str, set[str]] = {}
    for layout in LAYOUTS:
        k = Keys(NS, P, layout)
        for name, fn in inspect.getmembers(k, inspect.ismethod):
            params = list(inspect.signature(fn).parameters)
            if name.startswith("_") or DECODERS & set(params):
                continue
            missing = [a for a in params if a not in SAMPLE]
            assert not missing, f"Keys.{name}: no sample value for {missing}"
            value = fn(**{a: SAMPLE[a] for a in params})
            assert isinstance(value, str), f"Keys.{name} returned {value!r}"
            out.setdefault(name, set()).add(value)
    return out


def _prose(text: str) -> str:
    """The text outside fenced code blocks (line breaks kept)."""
    fenced, out = False, []
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def spans(path: Path):
    """(line, code span text with whitespace collapsed and ``\\|`` unescaped)."""
    text = _prose(path.read_text())
    for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
        yield (text.count("\n", 0, m.start()) + 1,
               " ".join(m.group(2).split()).replace("\\|", "|"))


def key_of(span: str) -> str:
    """The key in a span: a leading Redis command and trailing arguments dropped
    (a placeholder such as ``<sink id>`` may hold a space)."""
    rest = COMMAND.sub("", span)
    return re.match(r"(?:<[^<>]*>|[^\s<])+", rest).group(0)


def pattern(shape: str) -> re.Pattern:
    """A documented key shape as a regular expression over built keys."""
    out, i = [], 0
    while i < len(shape):
        for rx, repl in ((PLAIN_TAG, TAG_RES["plain"]), (SPREAD_TAG, TAG_RES[SPREAD_LAYOUT]),
                         (ANY_TAG, "(?:" + "|".join(TAG_RES.values()) + ")")):
            m = rx.match(shape, i)
            if m:
                out.append(repl)
                i = m.end()
                break
        else:
            m = NAMESPACE.match(shape, i)
            if m and (i == 0 or shape[i - 1] == "{"):
                out.append(NS_RE)
            elif (m := PLACEHOLDER.match(shape, i)):
                out.append(".+")
            else:
                m = re.compile(r".", re.S).match(shape, i)
                out.append(re.escape(m.group(0)))
            i = m.end()
    body = "".join(out)
    if shape.endswith(":"):  # ``h:`` in prose: the key goes on
        body += ".+"
    return re.compile(body)


def documented() -> list[tuple[str, int, str]]:
    """(file, line, key shape) of every key or tag shown in the docs."""
    found = []
    for path in DOCS:
        for line, span in spans(path):
            if KEYISH.match(span):
                found.append((path.name, line, key_of(span)))
    # storage.md's table names keys by their part after the tag (``h:``, ``ow:<segment>``,
    # ``own``): every span of its first column outside parentheses
    text = (ROOT / "docs" / "storage.md").read_text()
    head, body = text.split("## Redis", 1)
    body = body.split("\n## ", 1)[0]
    for n, row in enumerate(body.splitlines(), head.count("\n") + 1):
        if not row.startswith("| ") or row.startswith("| what"):
            continue
        cell = re.sub(r"\([^()]*\)", "", row.replace("\\|", "\x00").split("|")[1])
        for span in re.findall(r"`([^`]+)`", cell):
            span = span.replace("\x00", "|")
            if not KEYISH.match(span):
                found.append(("storage.md (table)", n, "<tag>:" + span))
    return found


ALL = sorted({k for keys in built().values() for k in keys})


def _matches(shape: str) -> list[str]:
    rx = pattern(shape)
    return [k for k in ALL if rx.fullmatch(k)]


def test_the_docs_show_key_shapes_in_every_file_that_names_keys():
    files = {f.split(" ")[0] for f, _, _ in documented()}
    assert {"architecture.md", "storage.md", "durability.md", "operations.md"} <= files
    assert len(documented()) >= 40


def test_every_documented_key_shape_is_a_key_the_builders_make():
    wrong = [f"{f}:{n}: {shape}" for f, n, shape in documented()
             if shape not in RETIRED and not _matches(shape)]
    assert wrong == [], "shapes no key of keys.Keys matches"


def test_retired_keys_named_in_the_docs_are_no_key_of_today():
    for shape in RETIRED:
        assert _matches(shape) == [], shape


def test_every_key_the_builders_make_is_in_the_architecture_table():
    """architecture.md's table (``{ns:p}:dl`` / ``:fin`` / ``:um`` share one row), where
    ``{ns:p}`` stands for the tag of either layout, as its text says."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Records", 1)[1].split("\n## ", 1)[0]
    assert "Written `{ns:p}` below." in table
    table = table.replace("{ns:p}", "<tag>")
    shapes = []
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        cell = row.replace("\\|", "\x00").split("|")[1].replace("\x00", "|")
        first = None
        for span in re.findall(r"`([^`]+)`", cell):
            if span.startswith(":") and first is not None:
                span = first.rsplit(":", 1)[0] + span  # ``:fin`` after ``{ns:p}:dl``
            first = first or span
            shapes.append(pattern(span))
    missing = {name: sorted(keys) for name, keys in built().items() if not name.endswith("tag")
               and not all(any(rx.fullmatch(k) for rx in shapes) for k in keys)}
    assert missing == {}, "keys.Keys builds keys architecture.md's table does not show"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_redis_commands_in_the_docs_name_either_layouts_tag(path):
    """An operator runs what is shown: a command's key uses ``<tag>`` or ``T(p)``."""
    one_layout = [f"{path.name}:{n}: {span}" for n, span in spans(path)
                  if COMMAND.match(span) and KEYISH.match(span)
                  and (PLAIN_TAG.search(span) or SPREAD_TAG.search(span))]
    assert one_layout == []


def test_a_renamed_key_fails_the_shapes(monkeypatch):
    """What this test is for: ``aborted_writers`` renamed from ``ab:`` to ``abw:``."""
    monkeypatch.setattr(Keys, "aborted_writers", lambda self, p, segment:
                        f"{self.tag(p)}:abw:{segment}")
    keys = sorted({k for ks in built().values() for k in ks})
    rx = pattern("DEL <tag>:ab:<segment>"[4:])
    assert not any(rx.fullmatch(k) for k in keys)
    assert any(pattern("<tag>:abw:<segment>").fullmatch(k) for k in keys)


def test_the_notation():
    assert pattern("{ns:p}:h:<seq>").fullmatch("{ptxn:3}:h:42")
    assert not pattern("{ns:p}:h:<seq>").fullmatch("{ptxn~7}:h:42")
    assert pattern("{<namespace>~<salt>}").fullmatch("{ptxn~1234}")
    assert pattern("T(p):gcs").fullmatch("{ptxn~9}:gcs")
    assert pattern("{ns:st:<tenant/ns/name>}:dag").fullmatch("{ptxn:st:public/default/o}:dag")
    assert pattern("ns:config").fullmatch("ptxn:config")
    assert not pattern("{ns:p}:h:<seq>").fullmatch("{other:3}:h:42")
    assert key_of("ZRANGE T(p):ow:<S> 0 -1") == "T(p):ow:<S>"
    assert key_of("{ns:p}:sink:<sink id>") == "{ns:p}:sink:<sink id>"
