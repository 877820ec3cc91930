"""Plot the recorded benchmark ratios against their targets (docs/img/*.png).

    pip install '.[bench]' && python benchmarks/plot.py

Reads ``docs/bench-results/*.json`` (written by the bench_*.py scripts with
``--json``); one bar per measure and broker, the target as a tick, the measured
ratio written on the bar. Green: target met; orange: short of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS, OUT = ROOT / "docs" / "bench-results", ROOT / "docs" / "img"

# (label, file stem, path into the JSON, target, True if higher is better)
MEASURES = [
    ("sink: txn ÷ plain rows/s", "sink", ("ratio_wall",), 0.97, True),
    ("sink: ÷ plain pulsar-client producer", "sink", ("sink_vs_plain_producer_wall",), 0.9,
     True),
    ("source: Spark ÷ plain reader", "source", ("throughput", "ratio"), 0.9, True),
    ("reader: READ_COMMITTED ÷ plain", "core", ("reader_throughput", "ratio"), 0.9, True),
    ("commit: 64 segments ÷ 1", "core", ("commit_fanout", "ratio_64_vs_1"), 1.2, False),
    ("gate: 100k open txns ÷ 10", "core", ("gate", "ratio"), 3.0, False),
    ("cold start: 1M history ÷ none", "core", ("cold_start", "ratio"), 1.2, False),
    ("commit: sealed ÷ active segment", "scalable",
     ("sealed_commit", "ratio_cas_sealed_over_active"), 1.2, False),
]


def _get(d: dict, path: tuple[str, ...]):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _newest(stem: str, broker: str) -> Path | None:
    """The newest recorded result: dated files (``<stem>-<broker>-<date>.json``) win
    over the undated first recordings."""
    dated = sorted(RESULTS.glob(f"{stem}-{broker}-20*.json"))
    if dated:
        return dated[-1]
    f = RESULTS / f"{stem}-{broker}.json"
    return f if f.exists() else None


def _peer() -> None:
    """Commit latency p50 by segments touched, the three systems of the peer run."""
    runs = sorted(RESULTS.glob("peer-20*.json"))
    if not runs:
        return
    d = json.loads(runs[-1].read_text())
    names = {"v4": "Pulsar v4 (Java 4.0.7)", "v5": "PIP-473 (Java v5 5.0.0-M1)",
             "ptxn": "pulsar-txn (Python)"}
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    fanouts = [str(f) for f in d["params"]["fanouts"]]
    width = 0.27
    for i, (key, name) in enumerate(names.items()):
        lat = (d["systems"].get(key) or {}).get("commit_latency") or {}
        xs = [j + (i - 1) * width for j in range(len(fanouts))]
        ys = [lat.get(f, {}).get("p50_ms") for f in fanouts]
        ax.bar([x for x, y in zip(xs, ys) if y], [y for y in ys if y], width, label=name)
        for x, y in zip(xs, ys):
            if y:
                ax.text(x, y * 1.08, f"{y:.2g}", ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(fanouts)), [f"{f} segment(s)" for f in fanouts], fontsize=8)
    ax.set_ylabel("commit p50 (ms, log)")
    ax.set_title(f"commit latency, one run ({d['date']}, {d['machine']['cores']} cores)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "peer-commit.png", dpi=110)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    brokers = ["standalone", "lite"]
    fig, ax = plt.subplots(figsize=(9, 5.2))
    y = 0.0
    ticks, labels = [], []
    for label, stem, path, target, higher in reversed(MEASURES):
        for i, broker in enumerate(brokers):
            f = _newest(stem, broker)
            value = _get(json.loads(f.read_text()), path) if f is not None else None
            if value is None:
                continue
            ok = value >= target if higher else value <= target
            pos = y + i * 0.38
            ax.barh(pos, value, height=0.34, color="#2e8b57" if ok else "#e08a1e",
                    alpha=1.0 if broker == "standalone" else 0.6)
            ax.text(value + 0.02, pos, f"{value:.2f} ({broker})", va="center", fontsize=8)
        ax.plot([target, target], [y - 0.25, y + 0.63], color="black", lw=1.5)
        ticks.append(y + 0.19)
        labels.append(f"{label}\n(target {'≥' if higher else '≤'} {target})")
        y += 1.2
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel("ratio against the baseline measured in the same run")
    ax.set_xlim(0, 3.4)
    ax.set_title("pulsar-txn benchmarks (2 cores; solid: reference broker, light: pulsar-lite)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / "ratios.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 2.6))
    rows = []
    for broker in brokers:
        core = RESULTS / f"core-{broker}.json"
        if core.exists():
            v = json.loads(core.read_text())["commit_to_visible"]
            rows.append((f"client reader ({broker})", v["p50_ms"], v["p99_ms"]))
        src = RESULTS / f"source-{broker}.json"
        if src.exists():
            v = json.loads(src.read_text()).get("commit_to_visible_spark")
            if v:
                rows.append((f"Spark source ({broker})", v["p50_ms"], v.get("p99_ms")))
    for i, (_name, p50, p99) in enumerate(rows):
        ax.barh(i, p50, height=0.35, color="#4169e1")
        if p99:
            ax.plot([p99], [i], marker="|", markersize=14, color="black")
        ax.text(max(p50, p99 or 0) + 2, i, f"p50 {p50:.0f} ms, p99 {p99:.0f} ms" if p99
                else f"p50 {p50:.0f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.axvline(20, color="gray", ls="--", lw=1)
    ax.set_xlabel("commit → visible to a waiting reader (ms); dashed: p50 target 20 ms")
    fig.tight_layout()
    fig.savefig(OUT / "commit-to-visible.png", dpi=110)
    _peer()
    print(f"wrote {OUT / 'ratios.png'}, {OUT / 'commit-to-visible.png'} and "
          f"{OUT / 'peer-commit.png'}")


if __name__ == "__main__":
    main()
