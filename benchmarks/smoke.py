"""Run every benchmark in its smoke mode (tiny sizes, seconds each) so none can rot.

    python benchmarks/smoke.py            (PULSAR_TXN_BROKER picks the broker; lite default)

peer/run is the exception: it starts its own brokers (Apache Pulsar 4.0.7 and 5.0.0-M1
standalone, whatever PULSAR_TXN_BROKER says) and builds its Java side with Maven.

Fails on an exception or a non-zero exit, never on a figure: benchmarks assert
nothing. `.ci/run` calls it after the test suite. Two lanes run at once (the Java and
broker ones, the Spark ones): smoke figures mean nothing, and CI's 60 minutes are tight.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["bench_core.py", "bench_scalable.py", "bench_source.py", "bench_sink.py",
              "bench_pipeline.py", "bench_soak.py", "bench_cluster.py", "bench_schemas.py",
              "bench_plugin.py", "peer/run"]


# each lane runs its benchmarks one after another; the lanes run side by side
LANES = [["peer/run", "bench_plugin.py", "bench_core.py", "bench_scalable.py", "bench_cluster.py"],
         ["bench_pipeline.py", "bench_source.py", "bench_sink.py", "bench_schemas.py",
          "bench_soak.py"]]
assert sorted(sum(LANES, [])) == sorted(BENCHMARKS), "every benchmark in one lane"


def main() -> int:
    env = {**os.environ, "PULSAR_TXN_BROKER": os.environ.get("PULSAR_TXN_BROKER", "lite")}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    failed: list[str] = []
    ran: list[str] = []
    lock = threading.Lock()

    def lane(names: list[str]) -> None:
        for name in names:
            t0 = time.monotonic()
            try:
                proc = subprocess.run([sys.executable, str(HERE / name), "--smoke"], env=env,
                                      cwd=HERE, capture_output=True, text=True,
                                      errors="replace", timeout=900)
            except BaseException as e:  # noqa: BLE001 - a lane never ends silently
                with lock:
                    failed.append(name)
                    print(f"{name}: FAILED ({e!r})", flush=True)
                continue
            took = time.monotonic() - t0
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            with lock:
                ran.append(name)
                print(f"{name}: {status} in {took:.0f} s", flush=True)
                if proc.returncode != 0:
                    failed.append(name)
                    print(proc.stdout[-3000:], proc.stderr[-6000:], sep="\n", flush=True)

    threads = [threading.Thread(target=lane, args=(names,)) for names in LANES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed or len(ran) != len(BENCHMARKS):
        print(f"benchmark smoke failed: {', '.join(failed)}; ran {len(ran)} of {len(BENCHMARKS)}")
        return 1
    print(f"benchmark smoke: all {len(BENCHMARKS)} ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
