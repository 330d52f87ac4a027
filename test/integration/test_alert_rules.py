"""The alert rules the package ships (conf/kvolumed-alerts.yaml, issue 34
item 6) are valid Prometheus rules (`promtool check rules`), page the team
whose each failure is, only after its "for" (`promtool test rules` replays
test/integration/kvolumed-alerts-test.yaml), and name only metrics kvolumed
exports.  promtool is Debian's prometheus package (test/deps/integration.txt)."""
import os
import re
import shutil
import subprocess

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "conf", "kvolumed-alerts.yaml")
REPLAY = os.path.join(HERE, "kvolumed-alerts-test.yaml")


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool is missing: apt-get install prometheus (test/deps/integration.txt; ./test/check installs it)"
    return path


def test_the_alert_rules_are_valid():
    r = subprocess.run([promtool(), "check", "rules", RULES], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_the_alert_rules_page_the_right_team_in_a_replay():
    r = subprocess.run([promtool(), "test", "rules", os.path.basename(REPLAY)], cwd=HERE, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_has_a_team_and_names_metrics_kvolumed_exports():
    with open(RULES) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    with open(os.path.join(HERE, "..", "..", "agent", "metrics.c")) as f:
        exported = set(re.findall(r'"(kvolumed_[a-z_]+)"', f.read()))
    for rule in rules:
        assert rule["labels"]["team"] in ("node", "tenant") and rule["labels"]["severity"], rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
        for name in re.findall(r"\b(kvolumed_[a-z_]+)", rule["expr"]):
            assert name in exported, f"{rule['alert']}: {name} is not a metric of agent/metrics.c"
    # The tenant's failures never page.
    assert {r["labels"]["severity"] for r in rules if r["labels"]["team"] == "tenant"} == {"ticket"}
