"""The framework adapters' parsers, on text written as each framework's own format code writes it (the format calls
below are copied from the file each adapter cites), and on real output where a run here produced some
(tests/helpers/data/frameworks/README.md says where and how). No torch, no subprocess."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from pytest_gpuperf.core.record.readings import (
    DEFAULT_WARMUP,
    Adapter,
    OutputError,
    Reading,
    RunOutput,
    Series,
    Warmup,
    parse_warmup,
    pool_series,
)
from pytest_gpuperf.frameworks import JsonlAdapter, Metric, RegexAdapter
from pytest_gpuperf.frameworks.maxtext import ADAPTER as MAXTEXT
from pytest_gpuperf.frameworks.megatron import ADAPTER as MEGATRON
from pytest_gpuperf.frameworks.serving import SGLANG, VLLM, SglangBenchAdapter
from pytest_gpuperf.frameworks.torchtitan import ADAPTER as TORCHTITAN

DATA = Path(__file__).parents[1] / "helpers" / "data" / "frameworks"


# -- Megatron: megatron/training/training.py training_log, utils.py report_memory, arguments.py _print_args --------


def megatron_args(**values: object) -> str:
    lines = ["------------------------ arguments ------------------------"]
    for arg, value in sorted(values.items()):
        dots = "." * (48 - len(arg))
        lines.append(f"  {arg} {dots} {value}")
    lines.append("-------------------- end of arguments ---------------------")
    return "\n".join(lines)


def megatron_line(iteration: int, ms: float, tflops: float, loss: float, batch: int = 8, train_iters: int = 20) -> str:
    log_string = f" [{datetime(2026, 12, 6, 1, 2, 3, 456789).strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    log_string += f" iteration {iteration:8d}/{train_iters:8d} |"
    log_string += f" consumed samples: {iteration * batch:12d} |"
    log_string += f" elapsed time per iteration (ms): {ms:.1f} |"
    log_string += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    log_string += f" learning rate: {1.5e-4:.6E} |"
    log_string += f" global batch size: {batch:5d} |"
    log_string += " {}: {:.6E} |".format("lm loss", loss)
    log_string += f" loss scale: {1.0:.1f} |"
    log_string += f" grad norm: {2.345:.3f} |"
    log_string += f" number of skipped iterations: {0:3d} |"
    log_string += f" number of nan iterations: {0:3d} |"
    return log_string


def megatron_memory(rank: int, iteration: int, max_allocated_mib: float) -> str:
    string = f"(after {iteration} iterations)" + " memory (MB)"
    string += f" | allocated: {100.0:.2f}"
    string += f" | max allocated: {max_allocated_mib:.2f}"
    string += f" | reserved: {300.0:.2f}"
    string += f" | max reserved: {300.0:.2f}"
    return f"[Rank {rank}] {string}"


def test_megatron_reads_step_time_tflops_tokens_memory_and_loss() -> None:
    log = "\n".join(
        [
            "using world size: 2, data-parallel size: 2",
            megatron_args(seq_length=128, world_size=2, train_iters=20),
            megatron_line(1, 900.0, 10.0, 10.5),
            megatron_memory(0, 1, 1000.0),
            megatron_memory(1, 1, 1200.0),
            megatron_line(2, 400.0, 22.5, 10.2),
            megatron_line(3, 500.0, 18.0, 9.9),
            " validation loss at iteration 3 | lm loss value: 9.800000E+00 | lm loss PPL: 1.8E+04 |",
        ]
    )
    reading = MEGATRON.read(RunOutput(log=log))
    assert reading.series["step_time"].points == [(1, 0.9), (2, 0.4), (3, 0.5)]
    assert reading.series["tflops"].points == [(1, 10.0), (2, 22.5), (3, 18.0)]
    # per GPU: global batch 8 x 128 tokens / step seconds / world size 2
    assert reading.series["tokens_per_s"].points[1] == (2, pytest.approx(8 * 128 / 0.4 / 2))
    assert reading.series["memory"].points == [(1, 1200.0)]  # the largest rank's peak of the report
    assert reading.loss == [(1, 10.5), (2, 10.2), (3, 9.9)]
    assert reading.context["seq_length"] == 128 and reading.context["nan_iterations"] == 0


def test_megatron_reads_the_argument_dump_behind_torchruns_rank_prefix() -> None:
    prefixed = "\n".join(f"[default0]:{line}" for line in megatron_args(seq_length=64, world_size=1).splitlines())
    log = "\n".join([prefixed, *(f"[default0]:{megatron_line(i, 100.0, 5.0, 3.0)}" for i in range(1, 5))])
    reading = MEGATRON.read(RunOutput(log=log))
    assert reading.series["tokens_per_s"].points[0] == (1, pytest.approx(8 * 64 / 0.1))


def test_megatron_without_the_argument_dump_records_no_tokens_and_says_why() -> None:
    reading = MEGATRON.read(RunOutput(log="\n".join(megatron_line(i, 100.0 + i, 5.0, 3.0) for i in range(1, 6))))
    assert "tokens_per_s" not in reading.series
    assert "argument dump" in reading.context["tokens_per_s"]


# -- TorchTitan: torchtitan/components/metrics.py MetricsProcessor.log ---------------------------------------------


@dataclass(frozen=True)
class Color:
    """torchtitan/tools/utils.py Color (and NoColor, all "")."""

    red: str = "\033[31m"
    green: str = "\033[32m"
    orange: str = "\033[38;2;180;60;0m"
    turquoise: str = "\033[38;2;54;234;195m"
    blue: str = "\033[34m"
    cyan: str = "\033[36m"
    magenta: str = "\033[35m"
    reset: str = "\033[39m"


NO_COLOR = Color(*([""] * 8))


def titan_line(step: int, loss: float, tps: float, tflops: float, mfu: float, gib: float, color: Color) -> str:
    grad_norm, max_reserved_pct = 1.25, gib / 80 * 100
    return "[titan] 2026-12-06 01:02:03,456 - root - INFO - " + (
        f"{color.red}step: {step:2}  "
        f"{color.green}loss: {loss:7.4f}  "
        f"{color.orange}grad_norm: {grad_norm:7.4f}  "
        f"{color.turquoise}memory: {gib:5.2f}GiB"
        f"({max_reserved_pct:.2f}%)  "
        f"{color.blue}tps: {round(tps):,}  "
        f"{color.cyan}tflops: {tflops:,.2f}  "
        f"{color.magenta}mfu: {mfu:.2f}%{color.reset}"
    )


@pytest.mark.parametrize("color", [Color(), NO_COLOR], ids=["colour", "no-colour"])
def test_torchtitan_reads_tps_tflops_mfu_memory_and_loss(color: Color) -> None:
    log = "\n".join(
        [
            titan_line(1, 12.25, 1234.4, 1056.5, 34.5, 5.7, color),
            titan_line(10, 8.5, 57729.0, 1078.76, 37.96, 5.71, color),
            "[titan] ... - INFO - validate step: 10  loss:  8.4000  memory:  5.71GiB(7.14%)  tps: 99,999",
        ]
    )
    reading = TORCHTITAN.read(RunOutput(log=log))
    assert reading.series["tokens_per_s"].points == [(1, 1234.0), (10, 57729.0)]
    assert reading.series["tflops"].points == [(1, 1056.5), (10, 1078.76)]
    assert reading.series["mfu"].points == [(1, 34.5), (10, 37.96)]
    assert reading.series["memory"].points == [(1, 5.7), (10, 5.71)]
    assert reading.loss == [(1, 12.25), (10, 8.5)]


def test_torchtitan_leaves_out_an_mfu_computed_against_the_a100_fallback() -> None:
    log = "\n".join(
        ["[titan] ... WARNING - Peak flops undefined for: AMD Instinct MI999, fallback to A100"]
        + [titan_line(s, 9.0, 1000.0, 50.0, 16.0, 3.0, NO_COLOR) for s in (1, 10, 20, 30)]
    )
    reading = TORCHTITAN.read(RunOutput(log=log))
    assert "mfu" not in reading.series and "A100" in reading.context["mfu"]
    assert "tflops" in reading.series


# -- MaxText: MaxText/metric_logger.py _prepare_metrics_for_json, write_metrics_locally, log_metrics ----------------


def maxtext_line(step: int, seconds: float, tflops: float, tokens: float, loss: float) -> str:
    metrics = {
        "scalar": {
            "learning/loss": loss,
            "learning/total_weights": 4096.0,
            "perf/step_time_seconds": seconds,
            "perf/per_device_tflops": tflops * seconds,
            "perf/per_device_tflops_per_sec": tflops,
            "perf/per_device_tokens": tokens * seconds,
            "perf/per_device_tokens_per_sec": tokens,
            "learning/current_learning_rate": 1e-5,
        }
    }
    metrics_dict = {val: float(metrics["scalar"][val]) for val in metrics["scalar"]}
    metrics_dict["step"] = float(step)
    return str(json.dumps({**metrics_dict, "run_name": "gpuperf"}))


def test_maxtext_reads_the_metrics_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(maxtext_line(s, 0.5 + s / 100, 1.5, 3000.0 + s, 10.0 - s / 10) for s in range(5)) + "\n")
    reading = MAXTEXT.read(RunOutput(log="", file=path))
    assert reading.series["step_time"].points[0] == (0, 0.5)
    assert reading.series["tflops"].points[4] == (4, 1.5)
    assert reading.series["tokens_per_s"].points[2] == (2, 3002.0)
    assert reading.loss[1] == (1, pytest.approx(9.9))


def test_maxtext_reads_its_log_lines_without_a_file() -> None:
    def line(step: int, seconds: float, tflops: float, tokens: float, loss: float) -> str:
        return (
            f"completed step: {step}, seconds: {seconds:.3f}, "
            f"TFLOP/s/device: {tflops:.3f}, "
            f"Tokens/s/device: {tokens:.3f}, "
            f"total_weights: {4096}, "
            f"loss: {loss:.3f}"
        )

    reading = MAXTEXT.read(RunOutput(log="\n".join(line(s, 0.25, 2.0, 800.0, 9.0) for s in range(4))))
    assert reading.series["step_time"].points == [(s, 0.25) for s in range(4)]
    assert reading.loss[3] == (3, 9.0)


# -- vLLM and SGLang result files ---------------------------------------------------------------------------------


def vllm_result(**overrides: object) -> dict[str, object]:
    """The keys vllm/benchmarks/serve.py writes without --save-detailed (v0.32.0), default percentiles (99)."""
    result: dict[str, object] = {
        "date": "20261206-010203",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "tiny",
        "tokenizer_id": "/tmp/tiny",
        "num_prompts": 8,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 2,
        "duration": 2.5,
        "completed": 8,
        "failed": 0,
        "total_input_tokens": 256,
        "total_output_tokens": 128,
        "request_throughput": 3.2,
        "request_goodput": None,
        "output_throughput": 51.2,
        "total_token_throughput": 153.6,
        "max_output_tokens_per_s": 60.0,
        "max_concurrent_requests": 2,
        "rtfx": 0.0,
    }
    for name, scale in (("ttft", 20.0), ("tpot", 5.0), ("itl", 5.0)):
        result[f"mean_{name}_ms"] = scale
        result[f"median_{name}_ms"] = scale * 0.9
        result[f"std_{name}_ms"] = scale * 0.1
        result[f"p99_{name}_ms"] = scale * 2
    result.update(overrides)
    return result


def test_vllm_bench_names_and_units_follow_the_inference_suite(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(vllm_result()))
    reading = VLLM.read(RunOutput(log="", file=path))
    assert reading.figures["c2.ttft_p50"].value == pytest.approx(0.018)
    assert reading.figures["c2.ttft_p99"].value == pytest.approx(0.040)
    assert reading.figures["c2.output_tok_s"].value == 51.2
    assert reading.figures["c2.total_tok_s"].unit == "tok/s"
    assert reading.figures["c2.requests_s"].higher_is_better
    # 8 requests carry a p50 (6 needed), not a p99 (299 needed): that one is judged NOISY
    assert reading.figures["c2.ttft_p50"].unjudgeable is None
    assert "p99 from 8 requests" in (reading.figures["c2.ttft_p99"].unjudgeable or "")
    assert reading.figures["c2.itl_p50"].unjudgeable is None  # 128 - 8 = 120 token gaps
    assert reading.context["model_id"] == "tiny"


def test_vllm_bench_a_rate_run_is_named_by_its_rate_and_a_failed_request_fails_the_run(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(vllm_result(max_concurrency=None, request_rate=4.0, p99_e2el_ms=90.0)))
    reading = VLLM.read(RunOutput(log="", file=path))
    assert "rate4.ttft_p99" in reading.figures and "rate4.e2e_p99" in reading.figures
    path.write_text(json.dumps(vllm_result(failed=1)))
    with pytest.raises(OutputError, match="1 of 9 request"):
        VLLM.read(RunOutput(log="", file=path))


def sglang_result(**overrides: object) -> dict[str, object]:
    """The dict python/sglang/bench_serving.py benchmark() appends to --output-file."""
    result: dict[str, object] = {
        "backend": "sglang-oai",
        "dataset_name": "random",
        "request_rate": float("inf"),
        "max_concurrency": 4,
        "sharegpt_output_len": None,
        "random_input_len": 32,
        "random_output_len": 16,
        "random_range_ratio": 0.0,
        "duration": 3.0,
        "completed": 40,
        "total_input_tokens": 1280,
        "total_output_tokens": 640,
        "total_output_tokens_retokenized": 640,
        "request_throughput": 13.3,
        "input_throughput": 426.6,
        "output_throughput": 213.3,
        "mean_e2e_latency_ms": 300.0,
        "median_e2e_latency_ms": 290.0,
        "std_e2e_latency_ms": 10.0,
        "p99_e2e_latency_ms": 330.0,
        "mean_ttft_ms": 30.0,
        "median_ttft_ms": 29.0,
        "std_ttft_ms": 2.0,
        "p99_ttft_ms": 40.0,
        "mean_tpot_ms": 18.0,
        "median_tpot_ms": 17.5,
        "std_tpot_ms": 1.0,
        "p99_tpot_ms": 21.0,
        "mean_itl_ms": 18.0,
        "median_itl_ms": 17.0,
        "std_itl_ms": 2.0,
        "p95_itl_ms": 20.0,
        "p99_itl_ms": 25.0,
        "concurrency": 3.9,
        "accept_length": None,
    }
    result.update(overrides)
    return result


def test_sglang_bench_reads_its_appended_line_with_its_own_key_names(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with open(path, "a") as file:
        file.write(json.dumps(sglang_result(completed=1)) + "\n")  # an earlier run in the same file
        file.write(json.dumps(sglang_result()) + "\n")
    reading = SGLANG.read(RunOutput(log="", file=path))
    assert reading.figures["c4.e2e_p50"].value == pytest.approx(0.290)
    assert reading.figures["c4.itl_p95"].value == pytest.approx(0.020)
    assert reading.figures["c4.total_tok_s"].value == pytest.approx(426.6 + 213.3)
    assert reading.context["request_rate"] == "inf"
    with pytest.raises(OutputError, match="39 of 40"):
        SglangBenchAdapter(expected_requests=40).read(
            RunOutput(log="", file=_write(tmp_path / "short.jsonl", sglang_result(completed=39)))
        )


def _write(path: Path, document: dict[str, object]) -> Path:
    path.write_text(json.dumps(document) + "\n")
    return path


def test_a_result_file_that_is_missing_or_not_json_is_an_output_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="wrote no result file"):
        VLLM.read(RunOutput(log="", file=tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(OutputError, match="not the JSON"):
        VLLM.read(RunOutput(log="", file=tmp_path / "bad.json"))


@pytest.mark.parametrize(
    ("adapter", "captured"),
    [(VLLM, "vllm_bench_serve_cpu.json"), (SglangBenchAdapter(expected_requests=96), "sglang_bench_serving_cpu.jsonl")],
    ids=["vllm", "sglang"],
)
def test_serving_bench_real_result_captured_on_this_machine(adapter: Adapter, captured: str) -> None:
    """A result file the real client wrote here (tests/helpers/data/frameworks/README.md says when and how)."""
    reading = adapter.read(RunOutput(log="", file=DATA / captured))
    names = set(reading.figures)
    for metric in ("ttft_p50", "ttft_p99", "tpot_p50", "itl_p99", "output_tok_s", "total_tok_s", "requests_s"):
        assert f"c2.{metric}" in names, (metric, sorted(names))
    assert all(f.value > 0 and math.isfinite(f.value) for f in reading.figures.values())
    # the p99 of one run's requests is recorded, judged NOISY (too few requests for its interval)
    assert reading.figures["c2.ttft_p99"].unjudgeable and not reading.figures["c2.ttft_p50"].unjudgeable
    assert reading.figures["c2.total_tok_s"].value > reading.figures["c2.output_tok_s"].value
    assert reading.context["max_concurrency"] == 2 and reading.context["completed"] > 0


def test_sglang_bench_real_result_holds_every_percentile_it_wrote() -> None:
    """SGLang 0.5.23 writes p90, p95 and p99 of each latency and the end-to-end latency (vLLM's default writes
    p99 only): each becomes a figure, its total throughput read from its own key."""
    reading = SGLANG.read(RunOutput(log="", file=DATA / "sglang_bench_serving_cpu.jsonl"))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for p in (50, 90, 95, 99):
            assert f"c2.{metric}_p{p}" in reading.figures, (metric, p, sorted(reading.figures))
    written = json.loads((DATA / "sglang_bench_serving_cpu.jsonl").read_text())
    assert reading.figures["c2.total_tok_s"].value == written["total_throughput"]
    assert reading.context["request_rate"] == "inf"


# -- the generic adapters and the warm-up rule ---------------------------------------------------------------------


def test_jsonl_adapter_reads_configured_keys_from_the_output_and_skips_other_lines() -> None:
    adapter = JsonlAdapter(
        metrics={
            "tokens_per_s": Metric(key="tps", unit="tok/s", higher_is_better=True),
            "step_time": Metric(key="timing.step_ms", unit="s", higher_is_better=False, scale=1e-3),
        },
        loss="loss",
    )
    log = "\n".join(
        ["starting", '{"step": 1, "tps": 100, "timing": {"step_ms": 250}, "loss": 3.0}', "[1, 2]", "{bad"]
        + ['{"step": 2, "tps": "1,200", "timing": {"step_ms": 200}, "loss": 2.5}']
    )
    reading = adapter.read(RunOutput(log=log))
    assert reading.series["tokens_per_s"].points == [(1, 100.0), (2, 1200.0)]
    assert reading.series["step_time"].points == [(1, 0.25), (2, 0.2)]
    assert reading.loss == [(1, 3.0), (2, 2.5)]
    assert isinstance(adapter, Adapter)


def test_regex_adapter_reads_named_groups_and_refuses_a_pattern_without_them() -> None:
    adapter = RegexAdapter(
        pattern=r"it (?P<step>\d+): (?P<ms>[\d.]+) ms, loss (?P<loss>[\d.]+)",
        metrics={"step_time": Metric(key="ms", unit="s", higher_is_better=False, scale=1e-3)},
        loss="loss",
    )
    reading = adapter.read(RunOutput(log="it 1: 20.0 ms, loss 2.0\nnoise\nit 2: 10.0 ms, loss 1.5\n"))
    assert reading.series["step_time"].points == [(1, 0.02), (2, 0.01)]
    assert reading.loss == [(1, 2.0), (2, 1.5)]
    with pytest.raises(ValueError, match="no named group"):
        RegexAdapter(pattern=r"it (\d+)", metrics={"x": Metric(key="ms", unit="s", higher_is_better=False)})


def test_warmup_rule_parses_and_counts() -> None:
    assert parse_warmup(None) == DEFAULT_WARMUP
    assert DEFAULT_WARMUP.count(10) == 2 and DEFAULT_WARMUP.count(3) == 1 and DEFAULT_WARMUP.count(0) == 0
    assert parse_warmup(3).count(10) == 3
    assert parse_warmup("10%").count(25) == 3
    assert Warmup(steps=2, fraction=0.5).count(10) == 5
    with pytest.raises(ValueError, match="percentage"):
        parse_warmup("ten%")
    with pytest.raises(ValueError, match="from 0 to below 1"):
        Warmup(fraction=1.5)


def test_pooling_leaves_out_each_runs_warmup_and_non_positive_values() -> None:
    def run(values: list[float]) -> Reading:
        series = Series(unit="s", higher_is_better=False, points=list(enumerate(values)))
        return Reading(series={"step_time": series, "memory": Series(unit="GiB", higher_is_better=False)})

    pooled, too_few = pool_series([run([9.0, 1.0, 1.1, -1.0]), run([8.0, 1.2])], Warmup(steps=1))
    assert [p.samples for p in pooled] == [[1.0, 1.1, 1.2]]
    assert pooled[0].kept_steps == [[1, 2], [1]]
    assert "0 of 0 logged value" in too_few["memory"]
