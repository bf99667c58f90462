"""The fleet commands end to end on emulated runs (baseline, judge, page, export), and the
files written for the cluster's tools, each loaded by that tool where one is packaged:
promtool for the rules and metrics, protobuf's own parser for NVSentinel's HealthEvents,
node-problem-detector's plugin protocol for its check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nodecert.certs.signing import init_key
from nodecert.cli import main
from nodecert.fleet import baseline as fb
from nodecert.fleet import export as fx
from nodecert.fleet.judging import fleet_limits
from nodecert.fleet.page import FleetPage, render
from nodecert.fleet.peers import judge
from nodecert.fleet.repair import NVIDIA_ACTIONS, action, load
from nodecert.lab.fleet import FleetSpec
from nodecert.lab.fleetruns import write_run
from nodecert.runs.records import HostRecord
from support.env import REPO, require

FIXTURES = REPO / "tests" / "fixtures"
# NVIDIA NVSentinel's published files, verbatim (not this project's code)
NVSENTINEL = FIXTURES / "third_party" / "nvsentinel"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """40 emulated nodes validated four times; a key; a signed baseline of the first run."""
    root = tmp_path_factory.mktemp("site")
    spec = FleetSpec(40, weak=2, wearing=1, repaired=1, seed=3)
    t0 = time.time() - 5 * 3600
    runs = [write_run(root / "runs", spec, k, started=t0 + k * 3600) for k in range(1, 5)]
    kp = init_key(root / "keys")
    kinds = {f"n{i:05d}": k for i, k in enumerate(spec.kinds())}
    res = CliRunner().invoke(main, ["fleet", "baseline", str(runs[0]), "--out",
                                    str(root / "b.json"), "--key", str(kp.private)])
    assert res.exit_code == 0, res.output
    return {"root": root, "runs": runs, "key": kp, "kinds": kinds, "b": root / "b.json"}


def test_baseline_judge_names_the_slow_nodes_and_exits_1(site: dict[str, Any]) -> None:
    r = CliRunner().invoke(main, ["fleet", "judge", str(site["runs"][0]), "--baseline",
                                  str(site["b"]), "--pubkey", str(site["key"].public),
                                  "--runs-dir", str(site["root"] / "runs"), "--json"])
    assert r.exit_code == 1, r.output
    hosts = json.loads(r.output)["hosts"]
    failing = {h for h, rs in hosts.items() if any(x["verdict"] == "FAIL" for x in rs)}
    assert failing == {h for h, k in site["kinds"].items() if k == "weak"}
    human = CliRunner().invoke(main, ["fleet", "judge", str(site["runs"][0]), "--baseline",
                                      str(site["b"]), "--pubkey", str(site["key"].public),
                                      "--no-trends"])
    assert "40 node(s) judged, 2 flagged against baseline" in human.output


def test_a_baseline_from_another_signer_is_bad_input(site: dict[str, Any],
                                                     tmp_path: Path) -> None:
    other = init_key(tmp_path / "k")
    r = CliRunner().invoke(main, ["fleet", "judge", str(site["runs"][0]), "--baseline",
                                  str(site["b"]), "--pubkey", str(other.public)])
    assert r.exit_code == 2 and "signature does not verify" in r.output
    r = CliRunner().invoke(main, ["fleet", "baseline", str(tmp_path), "--out",
                                  str(tmp_path / "x.json"), "--key", str(other.private)])
    assert r.exit_code == 2 and "no validate.json" in r.output
    assert not (tmp_path / "x.json").exists()


def test_the_page_marks_outliers_and_trends_without_script(site: dict[str, Any]) -> None:
    out = site["root"] / "fleet.html"
    r = CliRunner().invoke(main, ["fleet", "page", str(site["runs"][3]), "--baseline",
                                  str(site["b"]), "--pubkey", str(site["key"].public),
                                  "--runs-dir", str(site["root"] / "runs"), "--out", str(out),
                                  "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    wearing = next(h for h, k in site["kinds"].items() if k == "wearing")
    weak = {h for h, k in site["kinds"].items() if k == "weak"}
    assert {o["host"] for o in s["outliers"]} == weak | {wearing}
    assert {t["host"] for t in s["trends"]} == {wearing}
    html = out.read_text()
    assert "<script" not in html.lower() and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count('class="outlier"') >= 3 and "SIMULATED" in html
    assert html.count('data-plot="trend"') >= 3  # the wearing node's figures over its runs


def test_node_text_on_the_page_is_escaped() -> None:
    recs = [HostRecord(Path(f"/x/r/h{i}/results.json"), {
        "host": f"h{i}" if i else "<img src=x onerror=alert(1)>", "verdict": "PASS",
        "results": [{"check": "hardware.inventory", "verdict": "PASS",
                     "value": {"gpu_model": "<b>GPU</b>"}},
                    {"check": "load.burnin", "verdict": "PASS",
                     "value": {"tflops_per_gpu": {"0": 600.0 if i == 0 else 660.0 + i % 3}}}]})
        for i in range(10)]
    b = fb.build(recs)
    judged = {r.host: [judge(r.results, b, fleet_limits(None))] for r in recs}
    html = render(FleetPage(recs, b, "test", judged))
    assert "<img" not in html and "<b>GPU" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_export_writes_what_each_tool_reads(site: dict[str, Any]) -> None:
    out = site["root"] / "export"
    r = CliRunner().invoke(main, ["fleet", "export", str(site["runs"][3]), "--baseline",
                                  str(site["b"]), "--pubkey", str(site["key"].public),
                                  "--runs-dir", str(site["root"] / "runs"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    weak = sorted(h for h, k in site["kinds"].items() if k == "weak")
    healthy = next(h for h, k in site["kinds"].items() if k == "ok")
    patch = json.loads((out / "k8s" / f"{weak[0]}.json").read_text())
    assert all(LABEL_VALUE.match(v) and len(v) <= 63
               for v in patch["metadata"]["labels"].values())
    cond = {c["type"]: c for c in patch["status"]["conditions"]}
    assert cond["NodecertValidated"]["status"] == "False"
    assert cond["NodecertFleetOutlier"]["status"] == "True"
    assert set(cond["NodecertValidated"]) == {"type", "status", "reason", "message",
                                              "lastHeartbeatTime", "lastTransitionTime"}
    ok = json.loads((out / "k8s" / f"{healthy}.json").read_text())
    assert {c["type"]: c["status"] for c in ok["status"]["conditions"]} == {
        "NodecertValidated": "True", "NodecertFleetOutlier": "False",
        "NodecertWorseningTrend": "False"}
    monitor = json.loads((out / "npd" / "nodecert-monitor.json").read_text())
    assert monitor["plugin"] == "custom" and monitor["rules"][0]["type"] == "permanent"


def test_the_npd_plugin_speaks_its_protocol(site: dict[str, Any], tmp_path: Path) -> None:
    out = site["root"] / "export"
    if not out.is_dir():
        test_export_writes_what_each_tool_reads(site)
    plugin = out / "npd" / "nodecert-npd-check"
    weak = next(h for h, k in site["kinds"].items() if k == "weak")
    healthy = next(h for h, k in site["kinds"].items() if k == "ok")
    bad = subprocess.run(["sh", str(plugin), str(out / "npd" / f"{weak}.json")],
                         capture_output=True, text=True, timeout=30, check=False)
    good = subprocess.run(["sh", str(plugin), str(out / "npd" / f"{healthy}.json")],
                          capture_output=True, text=True, timeout=30, check=False)
    gone = subprocess.run(["sh", str(plugin), str(tmp_path / "absent.json")],
                          capture_output=True, text=True, timeout=30, check=False)
    assert (bad.returncode, good.returncode, gone.returncode) == (1, 0, 2)
    assert bad.stdout.startswith("nodecert FAIL: fleet.peers FAIL")
    assert gone.stdout.startswith("no nodecert verdict readable")


def test_nvsentinel_events_parse_with_protobuf(site: dict[str, Any], tmp_path: Path) -> None:
    out = site["root"] / "export"
    if not out.is_dir():
        test_export_writes_what_each_tool_reads(site)
    weak = next(h for h, k in site["kinds"].items() if k == "weak")
    files = sorted(f for f in (out / "nvsentinel").glob("*.json")
                   if not f.name.endswith(".externalfault.json"))
    docs = [json.loads(f.read_text()) for f in files]
    assert all(set(d) == {"version", "events"} and d["version"] == 1 and d["events"]
               for d in docs)  # HealthEvents: the wrapper's two fields
    broken = json.loads((out / "nvsentinel" / f"{weak}.json").read_text())["events"][0]
    broken["recommendedAction"] = "REBOOT_PLEASE"
    parsed = _health_events(tmp_path, PROTO, [e for d in docs for e in d["events"]] + [broken])
    assert "REBOOT_PLEASE" in parsed.pop()["error"]
    events = iter(parsed)
    for f, d in zip(files, docs, strict=True):
        mine = [next(events) for _ in d["events"]]
        assert all("error" not in e and e["nodeName"] == f.stem for e in mine), mine
    ev = next(e for f, d in zip(files, docs, strict=True) if f.stem == weak
              for e in d["events"])
    assert (ev["checkName"], ev["isHealthy"], ev["errorCode"][0],
            ev["recommendedAction"]) == ("fleet.peers", False, "NC-FLEET-OUTLIER",
                                         "CONTACT_SUPPORT")


_PARSE = """
import json, sys
from google.protobuf import json_format
sys.path.insert(0, sys.argv[1])
import he_pb2
out = []
for doc in json.load(sys.stdin):
    try:
        ev = json_format.ParseDict(doc, he_pb2.HealthEvent())
        out.append(json_format.MessageToDict(ev))
    except json_format.ParseError as exc:
        out.append({"error": str(exc)})
print(json.dumps(out))
"""


def _health_events(tmp_path: Path, name: str, events: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Each event parsed by protobuf's JSON parser against NVSentinel's health_event.proto
    (a copy in tests/fixtures/third_party/nvsentinel), in a process of its own: two
    versions of the proto define the same package and cannot share one descriptor pool. Each is the
    parsed event, or {"error": ...} where the parser refused it."""
    protoc = pytest.importorskip("grpc_tools.protoc")
    shutil.copy(NVSENTINEL / name, tmp_path / "he.proto")
    include = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{include}",
                        f"--python_out={tmp_path}", str(tmp_path / "he.proto")]) == 0
    p = subprocess.run([sys.executable, "-c", _PARSE, str(tmp_path)], input=json.dumps(events),
                       capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(p.stdout))


SCHEMA_EF = NVSENTINEL / "externalfault.schema.json"
PROTO = "health_event-d87e985.proto"


def test_a_failed_node_is_an_nvsentinel_externalfault(site: dict[str, Any],
                                                      tmp_path: Path) -> None:
    import jsonschema
    schema = json.loads(SCHEMA_EF.read_text())
    out = site["root"] / "export"
    if not out.is_dir():
        test_export_writes_what_each_tool_reads(site)
    failed = {f.stem for f in (out / "npd").glob("n0*.json")
              if json.loads(f.read_text())["verdict"] == "FAIL"}
    files = {f.name.removesuffix(".externalfault.json"): f
             for f in (out / "nvsentinel").glob("*.externalfault.json")}
    assert failed and set(files) == failed  # only the nodes that FAILed; the others none
    assert len(failed) < 40
    docs = {h: json.loads(f.read_text()) for h, f in sorted(files.items())}
    # NVSentinel's own example resource passes the same checks as ours
    example = yaml.safe_load((NVSENTINEL / "adr-049-externalfault-example.yaml").read_text())
    for doc in [example, *docs.values()]:
        jsonschema.validate(doc, schema)
    broken = {**example["spec"]["healthEvent"], "recommendedAction": "REBOOT_PLEASE"}
    parsed = _health_events(tmp_path, PROTO,
                            [example["spec"]["healthEvent"], broken]
                            + [d["spec"]["healthEvent"] for d in docs.values()])
    assert parsed[0]["customRecommendedAction"] == "external-remediation"
    assert "error" in parsed[1] and "REBOOT_PLEASE" in parsed[1]["error"]
    for (host, doc), ev in zip(docs.items(), parsed[2:], strict=True):
        assert "error" not in ev, ev
        assert doc["metadata"]["name"] == f"nodecert-{host}"
        assert (ev["nodeName"], ev["agent"], ev["isFatal"]) == (host, "nodecert", True)
        assert not ev.get("isHealthy")  # false: protobuf's JSON leaves it out
        assert ev["recommendedAction"] == "CUSTOM"
        assert ev["errorCode"] and all(c.startswith("NC-") for c in ev["errorCode"])
        assert ev["message"].startswith("SIMULATED -- nodecert FAIL: ")
        assert ev["metadata"]["simulated"] == "true" and ev["metadata"]["failed_checks"]
    # a resource off ADR-049's shape is refused: another group, a namespace, a bare event
    doc = next(iter(docs.values()))
    for bad in ({**doc, "apiVersion": "nvsentinel.nvidia.com/v1alpha1"},
                {**doc, "metadata": {**doc["metadata"], "namespace": "nvsentinel"}},
                {**doc, "spec": doc["spec"]["healthEvent"]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_an_externalfault_name_is_a_dns_subdomain_for_any_node_name() -> None:
    from nodecert.certs.externalfault import Failed, external_fault, resource_name
    assert resource_name("gpu-node-07") == "nodecert-gpu-node-07"
    odd = {resource_name(n) for n in ("GPU_Node 7", "gpu-node-7", "GPU-NODE-7", "x" * 400)}
    assert len(odd) == 4
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n) and len(n) <= 253
               for n in odd)
    with pytest.raises(ValueError, match="no failed check"):
        external_fault("n1", [], verdict="FAIL", run_id="r", simulated=False, when="t")
    long = external_fault("n1", [Failed("load.burnin", "NC-X", "\x1b[31m" + "y" * 5000)],
                          verdict="FAIL", run_id="r", simulated=False, when="t")
    msg = long["spec"]["healthEvent"]["message"]
    assert len(msg) <= 1024 and "\x1b" not in msg


def _promtool() -> str:
    found = shutil.which("promtool") or next(
        (str(p) for p in (Path(sys.executable).parent / "promtool",) if p.is_file()), None)
    require(found, "promtool is not installed (.ci/run extracts it from Debian's prometheus "
                   "package into .venv/bin)")
    return str(found)


def test_rules_metrics_and_dashboard_queries_load_in_promtool(site: dict[str, Any],
                                                              tmp_path: Path) -> None:
    promtool = _promtool()
    out = site["root"] / "export"
    if not out.is_dir():
        test_export_writes_what_each_tool_reads(site)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60,
                              check=False,
                              input=stdin, cwd=tmp_path)
    r = run("check", "rules", str(out / "prometheus" / "nodecert-rules.yml"))
    assert r.returncode == 0 and "SUCCESS: 6 rules found" in r.stdout, r.stdout + r.stderr
    shutil.copy(out / "prometheus" / "nodecert-rules.yml", tmp_path / "nodecert-rules.yml")
    shutil.copy(FIXTURES / "prometheus" / "nodecert-rules.test.yml", tmp_path)
    r = run("test", "rules", "nodecert-rules.test.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("check", "metrics", stdin=(out / "prometheus" / "fleet.prom").read_text())
    assert r.returncode == 0, r.stdout + r.stderr
    # Every dashboard query is PromQL promtool parses (as a recording rule's expression).
    exprs = [t["expr"] for p in fx.dashboard()["panels"] for t in p["targets"]]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"nodecert:dashboard_query_{k}", "expr": e} for k, e in enumerate(exprs)]}]}
    (tmp_path / "dash.yml").write_text(json.dumps(rules))
    r = run("check", "rules", "dash.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "bad.yml").write_text(json.dumps({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "nodecert_gemm_tflops < < 3"}]}]}))
    assert run("check", "rules", "bad.yml").returncode != 0  # the check can fail


def test_the_dashboard_is_a_grafana_dashboard_model() -> None:
    d = fx.dashboard()
    assert d["uid"] and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and p["datasource"]["uid"] == "${datasource}"
        assert p["targets"] and all(t["refId"] for t in p["targets"])
    assert d["templating"]["list"][0]["name"] == "datasource"


def test_every_fault_code_has_an_action_chain() -> None:
    codes = load()
    used = set()
    for path in [*(REPO / "validators").rglob("*.py"), *(REPO / "src").rglob("*.py")]:
        used |= set(re.findall(r'"(NC-[A-Z0-9-]+)"', path.read_text()))
    assert used - set(codes) == set(), "add these to validators/fault-codes.yml"
    assert all(a.nvidia in NVIDIA_ACTIONS for a in codes.values())
    assert action("NC-XID-FATAL").chain[:3] == ("drain", "reset-gpu", "reboot")
    assert action("NC-XID-FATAL").loaded_retest and not action("NC-TOOL-MISSING").loaded_retest
    unknown = action("NC-SOMETHING-NEW")
    assert unknown.loaded_retest and unknown.chain[0] == "drain"  # unknown: as hardware
