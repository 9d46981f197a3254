"""Judge a results document's metrics again with this checkout's session, against the baselines folder it was
judged with: what the verdict rules of this checkout make of samples measured before they changed.

    python benchmarks/rejudge_results.py benchmarks/data/main-job-loaded-8fbab70-2026-12-07.json.gz baselines

Prints the family size, the verdict counts, and every REGRESSED or IMPROVED metric with its reason. The session is
a CPU one on this machine (its identity decides which baseline runs are this machine's).
"""

from __future__ import annotations

import collections
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pytest_gpuperf.core.config.settings import Settings  # noqa: E402
from pytest_gpuperf.core.record.perf import MetricRecord  # noqa: E402
from pytest_gpuperf.core.session.session import GpuperfSession  # noqa: E402


def main() -> int:
    source, baselines = Path(sys.argv[1]), Path(sys.argv[2])
    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    document = json.loads(raw)
    session = GpuperfSession(Settings(baselines_dir=baselines, device_request="cpu"))
    session.planned_tests = sorted({result["test"] for result in document["results"]})
    print(f"family: {session.family_size()} metrics")
    counts: collections.Counter[str] = collections.Counter()
    for result in document["results"]:
        context = dict(result.get("context") or {})
        unjudgeable = context.get("unjudgeable")
        record = MetricRecord(
            name=result["metric"],
            unit=result["unit"],
            higher_is_better=result["higher_is_better"],
            samples=[float(value) for value in result["samples"]],
            rounds=int(result.get("rounds") or 1),
            context=context,
            unjudgeable=unjudgeable if isinstance(unjudgeable, str) else None,
        )
        judged = session.evaluate_metric(result["test"], record)
        counts[judged.verdict.value] += 1
        if judged.verdict.value in ("REGRESSED", "IMPROVED"):
            print(f"{judged.verdict.value} {result['test']} {result['metric']}: {judged.comparison.reason[:300]}")
    print(dict(sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
