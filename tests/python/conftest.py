"""Fixtures of the Python SDK's tests (run by ctest: tests/python/
CMakeLists.txt). `cluster` starts real executables from the build tree
(PS_BUILD_DIR) and stops them after the test, printing their logs if it
failed."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster, binary, python_path  # noqa: E402

if python_path() not in sys.path:
    sys.path.insert(0, python_path())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture
def cluster(tmp_path, request):
    for name in (binary("coordinator", "ps-coordinator"),
                 binary("server", "ps-server")):
        if not os.access(name, os.X_OK):
            pytest.skip(f"{name} is not built")
    c = Cluster(tmp_path / "run")
    yield c
    c.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(c.logs())


def pytest_sessionfinish(session, exitstatus):
    # Every test skipped (PyTorch or the data set missing): exit 77, which
    # ctest reports as skipped (SKIP_RETURN_CODE).
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    stats = reporter.stats
    if stats.get("skipped") and not stats.get("passed") and not stats.get(
            "failed"):
        session.exitstatus = 77
