"""Markdown, JUnit and SARIF renderers over one analysis: structure, gate semantics, limits."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from ci_fixtures import hand_analysis
from conftest import fixture_run

from trace_doctor.decision import decide
from trace_doctor.model import Finding
from trace_doctor.report.junit import render_junit
from trace_doctor.report.markdown import MAX_BYTES, render_markdown
from trace_doctor.report.sarif import build_sarif, render_sarif

# The parts of the SARIF 2.1.0 schema (OASIS sarif-schema-2.1.0.json) that our output exercises,
# transcribed: no PyPI package ships the schema file and tests stay offline.
SARIF_SUBSET_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"enum": ["2.1.0"]},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": {"$ref": "#/definitions/message"},
                                                "fullDescription": {"$ref": "#/definitions/message"},
                                                "help": {"$ref": "#/definitions/message"},
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {
                                                        "level": {"enum": ["none", "note", "warning", "error"]}
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"$ref": "#/definitions/message"},
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "properties": {
                                                    "artifactLocation": {
                                                        "type": "object",
                                                        "properties": {
                                                            "uri": {"type": "string", "format": "uri-reference"}
                                                        },
                                                    },
                                                    "region": {
                                                        "type": "object",
                                                        "properties": {"startLine": {"type": "integer", "minimum": 1}},
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                                "partialFingerprints": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        },
    },
    "definitions": {
        "message": {
            "type": "object",
            "anyOf": [{"required": ["text"]}, {"required": ["id"]}],
            "properties": {"text": {"type": "string"}, "markdown": {"type": "string"}},
        }
    },
}


def test_sarif_validates_and_locates_findings_at_their_evidence():
    result = hand_analysis()
    sarif = build_sarif(result)
    jsonschema.validate(sarif, SARIF_SUBSET_SCHEMA)
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert len(run["results"]) == len(result.findings)
    assert rules[by_rule["warmup-slowness"]["ruleIndex"]]["id"] == "warmup-slowness"
    assert rules[by_rule["warmup-slowness"]["ruleIndex"]]["help"]["text"]
    location = by_rule["warmup-slowness"]["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "run/logs.log"}, "region": {"startLine": 7}}
    # No evidence reference: the metrics.jsonl line of the first affected step (step 1 -> line 2).
    location = by_rule["decoded-error"]["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "run/metrics.jsonl"}, "region": {"startLine": 2}}
    assert by_rule["warmup-slowness"]["level"] == "note" and by_rule["decoded-error"]["level"] == "error"


def test_sarif_fingerprints_are_stable_across_runs_and_numbers():
    first, second = hand_analysis(), hand_analysis()
    for finding in second.findings:
        finding.seconds_lost, finding.steps = 99.0, [7, 8]

    def prints(result):
        return sorted(
            x["partialFingerprints"]["traceDoctorFingerprint/v1"] for x in build_sarif(result)["runs"][0]["results"]
        )

    assert prints(first) == prints(second)
    assert len(set(prints(first))) == 3


def test_sarif_of_real_fixture_validates():
    from trace_doctor.api import analyze, load_run

    result = analyze(load_run(fixture_run("sl_gil_stall")))
    sarif = json.loads(render_sarif(result))
    jsonschema.validate(sarif, SARIF_SUBSET_SCHEMA)
    lines = [
        r["locations"][0]["physicalLocation"].get("region", {}).get("startLine") for r in sarif["runs"][0]["results"]
    ]
    assert any(line and line > 1 for line in lines)  # at least one finding points into a log file


def test_junit_one_case_per_rule_with_gate_semantics():
    result = hand_analysis(fail_on="warning")
    root = ET.fromstring(render_junit(result))
    suite = root.find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {o.rule for o in result.outcomes}
    assert cases["pipelining-gap"].find("failure") is not None
    assert cases["decoded-error"].find("failure").get("type") == "error"
    assert cases["warmup-slowness"].find("failure") is None  # info is below the gate
    assert "Slow first step" in cases["warmup-slowness"].find("system-out").text
    assert cases["gil-stall"].find("skipped").get("message") == "no dumps, no GIL-monitor lines"
    assert cases["kl-drift"].find("error") is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "6",
        "2",
        "1",
        "1",
    )


def test_junit_gate_never_has_no_failures_and_control_chars_are_safe():
    result = hand_analysis()
    result.findings[0].message += " \x1b[31mred\x1b[0m \x00"
    root = ET.fromstring(render_junit(result))
    assert root.get("failures") == "0"


def test_markdown_gate_baseline_and_escaping():
    text = render_markdown(hand_analysis(with_baseline=True, fail_on="error"))
    assert "**Gate: FAILED**" in text and "1 finding(s) at or above error" in text
    assert "🔴 **regression**" in text
    assert "| waits | 0.30 s | 0.42 s | +0.120 s |" in text
    assert "<b>" not in text.replace("<b>TD", "")  # finding text is escaped, only our own tags remain
    assert "context window \\| 8 times" in text  # a pipe cannot break the table


def test_markdown_stays_under_one_mebibyte_with_huge_inputs():
    result = hand_analysis()
    template = result.findings[0]
    result.findings = []
    for i in range(5000):
        clone = copy.deepcopy(template)
        clone.message = "x" * 5000
        clone.fingerprint = f"pipelining-gap:{i}"
        result.findings.append(clone)
    text = render_markdown(decide(result, fail_on="warning"))
    assert len(text.encode("utf-8")) < MAX_BYTES
    assert "… and 4940 more finding(s)" in text


@pytest.mark.parametrize("fail_on", ["never", "info", "warning", "error"])
def test_every_renderer_handles_an_empty_analysis(fail_on):
    result = hand_analysis()
    result.findings, result.outcomes = [], []
    decide(result, fail_on=fail_on)
    assert "No problems found" in render_markdown(result)
    assert ET.fromstring(render_junit(result)).get("tests") == "0"
    assert json.loads(render_sarif(result))["runs"][0]["results"] == []


def test_finding_without_any_location_falls_back_to_the_metrics_file():
    result = hand_analysis()
    result.findings = [Finding(rule="kl-drift", code="TD202", severity="warning", title="t", message="m", fix="f")]
    location = build_sarif(result)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "run/metrics.jsonl"}}


def test_json_document_values_are_cleaned_at_every_depth():
    """Non-finite floats become null and floats are rounded to 6 places, in lists of lists (time
    ranges), dicts in lists, tuples; ints, bools, strings and None pass unchanged."""
    import math

    from trace_doctor.report.json_doc import _clean

    value = {
        "ranges": [[1.23456789, math.inf], [float("nan"), 2]],
        "rows": [{"x": -0.0000004, "ok": True, "name": "a"}, None, (3.1234567, "b")],
        1: 7,
        "deep": [[[0.1 + 0.2]]],
    }
    assert _clean(value) == {
        "ranges": [[1.234568, None], [None, 2]],
        "rows": [{"x": -0.0, "ok": True, "name": "a"}, None, [3.123457, "b"]],
        "1": 7,
        "deep": [[[0.3]]],
    }
    assert type(_clean([True])[0]) is bool
