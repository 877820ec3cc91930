"""Every relative link in README.md and docs/*.md resolves: the file exists, and an
``#anchor`` names a heading of that file under GitHub's rules (lowercased, punctuation
but ``-`` and ``_`` dropped, each space a ``-``, a repeated heading ``-1``, ``-2`` …)."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target) and ![alt](target); the text may hold one level of [...] or `...`
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's rendered text (github-slugger)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = "".join(c for c in text.lower() if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path):
    """(line number, target) of every relative link outside code; a link's text may
    wrap onto the next line."""
    prose = dict(_prose_lines(path.read_text()))
    text = "\n".join(prose.get(n, "") for n in range(1, max(prose, default=0) + 1))
    # code spans (which may wrap too) become blanks, keeping the line breaks
    text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto: …
            continue
        yield text.count("\n", 0, m.start(1)) + 1, target


def broken(path: Path) -> list[str]:
    bad = []
    for n, target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file)).resolve() if file else path
        where = f"{path.relative_to(ROOT)}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            bad.append(f"{where} (no heading with that anchor in {dest.relative_to(ROOT)})")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken(path) == []


def test_the_rules_match_githubs():
    assert slug("Records (Redis keys, `metastore/keys.py`)") == "records-redis-keys-metastorekeyspy"
    assert slug("Batch `df.write`") == "batch-dfwrite"
    assert slug("The wrong metastore, and a reset under a running process") == (
        "the-wrong-metastore-and-a-reset-under-a-running-process")
    assert slug("Known limits (kept on purpose, with the reason)") == (
        "known-limits-kept-on-purpose-with-the-reason")
    assert slug("A → B ÷ C") == "a--b--c"


def test_the_checker_finds_what_is_broken(tmp_path):
    (tmp_path / "a.md").write_text(
        "# Top\n## Same\n## Same\n```\n# not a heading\n```\n"
        "[ok](#same-1) [ok](#top) [bad](#same-2) [bad](#not-a-heading)\n"
        "[ok](b.md) [bad](c.md) `[in code](c.md)` [web](https://x/y) [wrapped\n"
        "text](#nowhere)\n")
    (tmp_path / "b.md").write_text("x\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        got = broken(tmp_path / "a.md")
    finally:
        ROOT = old
    assert [g.split(": ", 1)[1].split(" ")[0] for g in got] == [
        "#same-2", "#not-a-heading", "c.md", "#nowhere"]
    assert [g.split(":")[1] for g in got] == ["7", "7", "8", "9"]
