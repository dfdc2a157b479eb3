"""The suite's time, reported and guarded (docs/decisions.md, "The suite's
time, a guard").

At the end of every run the terminal summary gives the time per test
folder (setup, call and teardown of each test, summed over the workers:
CPU-seconds of test work, not wall time) and the slowest tests. The run
then fails, even when every test passed, if one test ran past
`GEMMGEN_TEST_BUDGET_S` seconds (default 300: the slowest fast test is
well under a minute on a quiet 2-core machine, so a noisy one has room) or
the whole session past `GEMMGEN_SUITE_BUDGET_S` seconds of wall time
(default 4200: CI's 90 minutes less the install and `gemmgen check`, with
room; 0 turns a budget off). A
test that needs longer belongs under `@pytest.mark.slow`, or its fixture
in the shared cache.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import pytest

_durations: dict[str, float] = defaultdict(float)
_start = time.monotonic()


def _budget(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] += report.duration


def _folder(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return path.rsplit("/", 1)[0] if "/" in path else path


def over_budget(durations: dict[str, float], wall: float, per_test: float,
                session: float) -> list[str]:
    """What broke a budget, one line each (nothing: within both)."""
    out = [f"{nodeid} took {d:.0f} s, past the {per_test:.0f} s budget of one test "
           "(GEMMGEN_TEST_BUDGET_S): make it cheaper or mark it slow"
           for nodeid, d in sorted(durations.items(), key=lambda kv: -kv[1])
           if per_test and d > per_test]
    if session and wall > session:
        out.append(f"the session took {wall:.0f} s, past its {session:.0f} s budget "
                   "(GEMMGEN_SUITE_BUDGET_S)")
    return out


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _durations or hasattr(config, "workerinput"):
        return
    tr = terminalreporter
    folders: dict[str, float] = defaultdict(float)
    for nodeid, d in _durations.items():
        folders[_folder(nodeid)] += d
    tr.section("time per test folder (test-seconds, all workers)")
    for folder, d in sorted(folders.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{d:8.1f} s  {folder}")
    tr.write_line(f"{sum(folders.values()):8.1f} s  in all; wall {time.monotonic() - _start:.1f} s")
    tr.section("slowest tests")
    for nodeid, d in sorted(_durations.items(), key=lambda kv: -kv[1])[:15]:
        tr.write_line(f"{d:8.1f} s  {nodeid}")
    for line in _problems():
        tr.write_line(f"time budget: {line}", red=True)


def _problems() -> list[str]:
    return over_budget(_durations, time.monotonic() - _start,
                       _budget("GEMMGEN_TEST_BUDGET_S", 300.0),
                       _budget("GEMMGEN_SUITE_BUDGET_S", 4200.0))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not _durations:
        return
    if _problems() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the summary says why
