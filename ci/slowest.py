#!/usr/bin/env python3
"""Prints the N slowest tests of a nextest JUnit report, and the total.

    ci/slowest.py target/nextest/default/junit.xml 15

ci/test.sh runs it at the end of every test run, so where the suite's time
goes is in every run's log (docs/testing.md).
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: ci/slowest.py JUNIT.xml N", file=sys.stderr)
        return 2
    path, n = sys.argv[1], int(sys.argv[2])
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"ci/slowest.py: {path}: {e}", file=sys.stderr)
        return 1
    cases = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            if case.find("skipped") is not None:
                continue
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((float(case.get("time", "0")), suite.get("name", "?"), case.get("name", "?"), failed))
    cases.sort(reverse=True)
    total = sum(c[0] for c in cases)
    print(f"The {min(n, len(cases))} slowest of {len(cases)} tests ({total / 60:.1f} min of test time in all):")
    for secs, binary, name, failed in cases[:n]:
        print(f"  {secs:7.1f} s  {binary} {name}{'  FAILED' if failed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
