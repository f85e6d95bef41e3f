#!/usr/bin/env python3
"""Checks that FILE is the JUnit XML `opreg check --junit` promises: <testsuites> of
<testsuite name tests failures errors skipped> of <testcase classname name>, each with
at most one <failure message> or <skipped>; the counts agree with the testcases; and
when EXPECT_FAIL is 1 at least one testcase failed, when 0 none did.
usage: junit_check.py FILE EXPECT_FAIL"""
import sys
import xml.etree.ElementTree as ET


def main():
    path, expect_fail = sys.argv[1], sys.argv[2] == "1"
    root = ET.parse(path).getroot()
    errors = []
    if root.tag != "testsuites":
        errors.append(f"root element is <{root.tag}>, not <testsuites>")
    total_failed = 0
    for suite in root:
        if suite.tag != "testsuite":
            errors.append(f"<{suite.tag}> inside <testsuites>")
            continue
        for attr in ("name", "tests", "failures", "errors", "skipped"):
            if attr not in suite.attrib:
                errors.append(f"testsuite without {attr}")
        cases = list(suite)
        failed = skipped = 0
        for case in cases:
            if case.tag != "testcase" or not case.get("name") or not case.get("classname"):
                errors.append(f"bad testcase {case.tag} {case.attrib}")
            kids = list(case)
            if len(kids) > 1 or any(k.tag not in ("failure", "skipped") for k in kids):
                errors.append(f"testcase {case.get('name')}: children {[k.tag for k in kids]}")
            for k in kids:
                if k.tag == "failure":
                    failed += 1
                    if not k.get("message"):
                        errors.append(f"testcase {case.get('name')}: failure without a message")
                else:
                    skipped += 1
        if int(suite.get("tests", -1)) != len(cases):
            errors.append(f"testsuite {suite.get('name')}: tests={suite.get('tests')}, {len(cases)} testcases")
        if int(suite.get("failures", -1)) != failed:
            errors.append(f"testsuite {suite.get('name')}: failures={suite.get('failures')}, {failed} failed")
        if int(suite.get("skipped", -1)) != skipped:
            errors.append(f"testsuite {suite.get('name')}: skipped={suite.get('skipped')}, {skipped} skipped")
        total_failed += failed
    if expect_fail and not total_failed:
        errors.append("no testcase failed")
    if not expect_fail and total_failed:
        errors.append(f"{total_failed} testcase(s) failed")
    for e in errors:
        print(f"{path}: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
