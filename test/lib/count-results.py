#!/usr/bin/python3
"""Counts test cases across meson's unit test logs (TAP from cmocka) and pytest
JUnit reports, and prints the closing line "N passed, N failed[, N skipped]".

Usage: count-results.py [--meson testlog.json]... [--junit report.xml]...
Exit status 0 when nothing failed, 1 otherwise."""
import json
import re
import sys
import xml.etree.ElementTree as ET

TAP_LINE = re.compile(r"^(not ok|ok)\b.*?(#\s*(SKIP|skip).*)?$")


def count_meson(path, totals):
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            passed = failed = skipped = 0
            for out in entry.get("stdout", "").splitlines():
                m = TAP_LINE.match(out.strip())
                if not m:
                    continue
                if m.group(1) == "not ok":
                    failed += 1
                elif m.group(2):
                    skipped += 1
                else:
                    passed += 1
            # A crash or timeout may leave no "not ok" line: the executable failed.
            if entry["result"] not in ("OK", "SKIP", "EXPECTEDFAIL") and failed == 0:
                failed = 1
            if entry["result"] == "SKIP" and passed + failed + skipped == 0:
                skipped = 1
            for k, v in (("passed", passed), ("failed", failed), ("skipped", skipped)):
                totals[k] += v
            if failed:
                print(f"FAILED (unit): {entry['name']}", file=sys.stderr)


def count_junit(path, totals):
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            totals["failed"] += 1
            print(f"FAILED (integration): {case.get('classname')}::{case.get('name')}", file=sys.stderr)
        elif case.find("skipped") is not None:
            totals["skipped"] += 1
        else:
            totals["passed"] += 1


def main(argv):
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    it = iter(argv)
    for flag in it:
        path = next(it)
        if flag == "--meson":
            count_meson(path, totals)
        elif flag == "--junit":
            count_junit(path, totals)
        else:
            raise SystemExit(f"unknown option {flag}")
    line = f"{totals['passed']} passed, {totals['failed']} failed"
    if totals["skipped"]:
        line += f", {totals['skipped']} skipped"
    print(line)
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
