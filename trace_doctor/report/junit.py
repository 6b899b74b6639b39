"""JUnit XML: one test case per rule; a failure for each rule the analysis's gate says tripped it.

A rule that was not applicable is skipped (with the missing input as the message); a rule that
crashed is an error; a rule that fired below the gate passes with its findings in system-out.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from trace_doctor.model import Analysis, Finding
from trace_doctor.report.redaction_notice import unredacted
from trace_doctor.report.terminal_text import inert

# XML 1.0 forbids most control characters, which can appear in log lines.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    """Text for an attribute or element: CI pages show it, so bidi overrides and zero-width characters from
    the run are shown as escapes (a name cannot read as another), as in every other report."""
    return _INVALID_XML.sub("\ufffd", inert("" if value is None else str(value)))


def _finding_text(finding: Finding) -> str:
    lost = f" ({finding.seconds_lost:.2f} s lost)" if finding.seconds_lost else ""
    lines = [f"[{finding.severity}] {finding.code} {finding.title}{lost}", finding.message, f"Fix: {finding.fix}"]
    if finding.steps:
        lines.append(f"Steps: {', '.join(str(s) for s in finding.steps[:50])}{' …' if len(finding.steps) > 50 else ''}")
    return "\n".join(lines)


def render_junit(result: Analysis) -> str:
    gate = result.gate
    by_rule: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_rule.setdefault(finding.rule, []).append(finding)
    codes = {f.rule: f.code for f in result.findings}

    suites = ET.Element("testsuites", name="trace-doctor")
    suite = ET.SubElement(suites, "testsuite", name="trace-doctor", hostname="trace-doctor")
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="run", value=_text(result.run.meta.path))
    if unredacted(result):
        ET.SubElement(properties, "property", name="redacted", value="false")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for outcome in sorted(result.outcomes, key=lambda o: (codes.get(o.rule) or _code(o.rule), o.rule)):
        counts["tests"] += 1
        case = ET.SubElement(
            suite, "testcase", classname=f"trace-doctor.{_code(outcome.rule)}", name=outcome.rule, time="0"
        )
        findings = by_rule.get(outcome.rule, [])
        tripped = outcome.rule in gate.tripping_rules
        gated = [f for f in findings if gate.trips_on(f)] or (findings if tripped else [])
        if outcome.status == "error":
            counts["errors"] += 1
            ET.SubElement(case, "error", message=_text(outcome.reason), type="RuleError").text = _text(outcome.reason)
        elif tripped:
            # The gate decided this rule trips it; the test case fails whatever the rule's own status.
            counts["failures"] += 1
            if gated:
                worst = gated[0]
                message = f"{len(gated)} finding(s) trip the gate ({'; '.join(gate.reasons)}): {worst.title}"
                kind, text = worst.severity, "\n\n".join(_finding_text(f) for f in gated)
            else:
                message = f"gate tripped: {'; '.join(gate.reasons)}"
                kind, text = "gate", outcome.reason or message
            ET.SubElement(case, "failure", message=_text(message), type=kind).text = _text(text)
        elif outcome.status == "not_applicable":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_text(outcome.reason))
        elif findings:
            ET.SubElement(case, "system-out").text = _text("\n\n".join(_finding_text(f) for f in findings))
        elif outcome.reason:
            ET.SubElement(case, "system-out").text = _text(outcome.reason)
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    suite.set("time", "0")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _code(slug: str) -> str:
    from trace_doctor.rules.base import REGISTRY

    rule = REGISTRY.get(slug)
    return rule.code if rule else slug
