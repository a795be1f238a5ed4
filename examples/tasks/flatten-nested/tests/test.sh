#!/bin/bash
# Verifier for a pymethods2test-style task: hidden tests in /tests, the agent's code in /app.
# Reward 1 only if pytest exits 0 AND its JUnit report shows at least one passed test and no
# failure, error or skip: "0 tests ran" (or everything skipped) must never count as a pass.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json /logs/verifier/reward.txt
report="$(mktemp -d)/junit.xml"

cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
# -I: neither the cwd nor PYTHONPATH go first on sys.path, so files the agent left in /app
# (a fake pytest.py, sitecustomize.py, xml/) cannot stand in for real modules; /app is
# appended last, only so the tests can import the solution.
python3 -I -c 'import sys; sys.path.append("/app"); import pytest; sys.exit(pytest.main(sys.argv[1:]))' \
    -q -p no:cacheprovider --junitxml="$report" /tests/test_solution.py
rc=$?

passed=$(python3 -I - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0)
    raise SystemExit
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get(k, 0)) for s in suites for k in ("failures", "errors", "skipped"))
print(tests if bad == 0 else 0)
PY
)

if [ "$rc" -eq 0 ] && [ "${passed:-0}" -ge 1 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
