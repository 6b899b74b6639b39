"""The training-quality fixture runs are what their generator writes, and read like cookbook runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.training_gen.__main__ import all_scenarios
from trace_doctor.api import analyze, load_run
from trace_doctor.knowledge.triage import TRAINING_QUALITY

TRAINING = Path(__file__).resolve().parent.parent / "fixtures" / "training"
SCENARIOS = all_scenarios()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_committed_run_is_what_the_generator_writes(name: str, tmp_path: Path) -> None:
    out = tmp_path / name  # the scenario's name is its folder's name
    SCENARIOS[name](out)
    written = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    committed_dir = TRAINING / name
    committed = {p.relative_to(committed_dir): p.read_bytes() for p in committed_dir.rglob("*") if p.is_file()}
    assert sorted(written) == sorted(committed), "regenerate: python -m fixtures.training_gen --only " + name
    for path, data in written.items():
        assert committed[path] == data, f"{name}/{path} differs from the generator's output"


def test_every_committed_run_has_a_generator() -> None:
    committed = {p.name for p in TRAINING.iterdir() if p.is_dir()}
    assert committed == set(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_run_has_core_files_and_an_expectation(name: str) -> None:
    run = TRAINING / name
    for file in ("metrics.jsonl", "config.json", "EXPECTED.json"):
        assert (run / file).is_file(), f"{name} lacks {file}"
    expected = json.loads((run / "EXPECTED.json").read_text())
    assert expected["scenario"] == name
    assert {"must_fire", "must_not_fire", "shows"} <= set(expected)
    assert not set(expected["must_fire"]) & set(expected["must_not_fire"])
    config = json.loads((run / "config.json").read_text())
    assert {"model_name", "renderer_name", "learning_rate", "log_path"} <= set(config)


# The rules that judge training quality: on a training fixture, none may fire unless the scenario
# was built for it — each run shows one shape and nothing else.
QUALITY_RULES = set(TRAINING_QUALITY) | {
    "renderer-kl-step0",
    "kl-drift",
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_run_fires_exactly_what_it_was_built_for(name: str) -> None:
    run = TRAINING / name
    expected = json.loads((run / "EXPECTED.json").read_text())
    fired = {f.rule for f in analyze(load_run(run)).findings}
    assert set(expected["must_fire"]) <= fired
    assert not set(expected["must_not_fire"]) & fired
    assert (fired & QUALITY_RULES) <= set(expected["must_fire"]), "a training-quality rule fired unasked"
