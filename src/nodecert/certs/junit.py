"""JUnit XML for CI systems: a testsuite per node, a testcase per check.

FAIL is a <failure>, ERROR an <error>, WARN passes with the warning in
<system-out>; the certificate's verdict and the SIMULATED flag are suite
properties, and a simulated suite's name says so.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from nodecert.core.textsafe import clean


def _suite(statement: dict[str, Any]) -> ET.Element:
    p = statement["predicate"]
    results = p["results"]
    name = f"nodecert.{p['host']}" + (" (SIMULATED)" if p["simulated"] else "")
    suite = ET.Element("testsuite", {
        "name": name, "tests": str(len(results)),
        "failures": str(sum(r["verdict"] == "FAIL" for r in results)),
        "errors": str(sum(r["verdict"] == "ERROR" for r in results)),
        "skipped": "0", "time": f"{sum(float(r.get('duration_s') or 0) for r in results):.3f}",
        "timestamp": str(p["validity"]["issued"])})
    props = ET.SubElement(suite, "properties")
    for k, v in (("verdict", p["verdict"]), ("simulated", str(p["simulated"]).lower()),
                 ("run_id", str(p.get("run_id"))), ("suite", str(p.get("suite"))),
                 ("subject_sha256", statement["subject"][0]["digest"]["sha256"])):
        ET.SubElement(props, "property", {"name": k, "value": v})
    for r in results:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"nodecert.{p['host']}", "name": r["check"],
            "time": f"{float(r.get('duration_s') or 0):.3f}"})
        detail = "\n".join([*r.get("findings", []), r.get("remediation", "")]).strip()
        if r["verdict"] == "FAIL":
            ET.SubElement(case, "failure", {"message": r["summary"],
                                            "type": r.get("fault_code") or "FAIL"}).text = detail
        elif r["verdict"] == "ERROR":
            ET.SubElement(case, "error", {"message": r["summary"],
                                          "type": r.get("fault_code") or "ERROR"}).text = detail
        elif r["verdict"] == "WARN":
            ET.SubElement(case, "system-out").text = f"WARN: {r['summary']}\n{detail}".strip()
    return suite


def _xml(root: ET.Element) -> bytes:
    # node text is untrusted: XML 1.0 cannot hold most control characters, and a CI page
    # must not show escape sequences; clean every text and attribute value
    for el in root.iter():
        if el.text:
            el.text = clean(el.text)
        for k, v in el.attrib.items():
            el.set(k, clean(v))
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=False)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + body


def node_xml(statement: dict[str, Any]) -> bytes:
    root = ET.Element("testsuites", {"name": "nodecert"})
    root.append(_suite(statement))
    return _xml(root)


def fleet_xml(statements: list[dict[str, Any]]) -> bytes:
    root = ET.Element("testsuites", {"name": "nodecert"})
    for st in statements:
        root.append(_suite(st))
    return _xml(root)


__all__ = ["fleet_xml", "node_xml"]
