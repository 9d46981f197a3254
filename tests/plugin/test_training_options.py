"""The training plugin's options and fixtures, end to end through pytester (collection only: nothing trains)."""

from __future__ import annotations

import pytest

PROBE = """
import pytest

def test_pair(model, precision):
    pass

@pytest.mark.gpuperf_models("lora")
def test_lora(model):
    assert model.is_lora

@pytest.mark.parametrize("precision", ["mine"])
def test_own_values(precision):
    assert precision == "mine"

def test_tier(training_tier):
    print("TIER", training_tier.name)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_probe=PROBE)
    return pytester


def test_cpu_defaults_are_the_tiny_models_and_four_precisions(project: pytest.Pytester) -> None:
    result = project.runpytest("--gpuperf-device", "cpu", "--collect-only", "-q")
    out = result.stdout.str()
    for model in ("tiny-llama", "tiny-moe", "tiny-lora"):
        for precision in ("fp32", "bf16", "fp8", "fp4"):
            assert f"test_pair[{model}-{precision}]" in out
    assert "test_lora[tiny-lora]" in out and "test_lora[tiny-llama]" not in out
    assert "test_own_values[mine]" in out


def test_options_choose_models_and_precisions_from_cli_env_and_ini(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = project.runpytest(
        "--gpuperf-device",
        "cpu",
        "--collect-only",
        "-q",
        "--gpuperf-models",
        "tiny-moe,llama3-8b@2",
        "--gpuperf-precisions",
        "bf16",
    )
    result.stdout.fnmatch_lines(["*test_pair[[]tiny-moe-bf16[]]*", "*test_pair[[]llama3-8b@2-bf16[]]*"])
    result.stdout.fnmatch_lines(["*test_lora[[]none[]]*"])  # no LoRA model chosen: one skipped item says so
    monkeypatch.setenv("GPUPERF_PRECISIONS", "fp4")
    project.makeini("[pytest]\ngpuperf_models = tiny-llama\n")
    result = project.runpytest("--gpuperf-device", "cpu", "--collect-only", "-q")
    out = result.stdout.str()
    assert "test_pair[tiny-llama-fp4]" in out and "tiny-moe" not in out


def test_unknown_model_is_a_usage_error_listing_the_known_names(project: pytest.Pytester) -> None:
    result = project.runpytest("--gpuperf-models", "tiny-llama,gpt5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*Invalid value 'tiny-llama,gpt5' from --gpuperf-models: unknown model 'gpt5'; known: llama3-8b, *tiny-llama*"]
    )


def test_bad_precision_and_tier_name_the_value_and_source(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPERF_PRECISIONS", "fp3")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'fp3' from environment variable GPUPERF_PRECISIONS: unknown precision*"])
    monkeypatch.delenv("GPUPERF_PRECISIONS")
    result = project.runpytest("--gpuperf-tier", "huge")
    result.stderr.fnmatch_lines(["*'huge' from --gpuperf-tier: expected one of auto, cpu, full, gpu*"])


def test_tier_resolves_from_the_device_and_unsupported_precisions_skip_naming_both(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--gpuperf-device",
        "cpu",
        "-s",
        "-k",
        "tier or tf32",
        "--gpuperf-precisions",
        "tf32",
        "--gpuperf-models",
        "tiny-llama",
        "-rs",
    )
    result.stdout.fnmatch_lines(["*TIER cpu*", "*SKIPPED*tf32 on cpu: TF32 is a GPU tensor-core format*"])
    result = project.runpytest("--gpuperf-device", "cpu", "--gpuperf-tier", "full", "-s", "-k", "tier")
    result.stdout.fnmatch_lines(["*TIER full*"])
