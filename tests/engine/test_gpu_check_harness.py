"""bench/gpu_check.py's harness: each part in its own process and budget, so a part that fails, crashes or hangs
loses only itself; every row is on disk the moment it is measured; SIGTERM prints the table so far. Fake parts
(small Python commands writing rows) stand in for the GPU ones; the real CLI runs its smoke part on a dry run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import gpu_check  # noqa: E402
from gpu_check_rows import FAIL, OK, PART_ROW, TIMEOUT, read_rows  # noqa: E402

PREAMBLE = f"""
import os, signal, sys, time
from pathlib import Path
sys.path.insert(0, {str(BENCH)!r})
from gpu_check_rows import Rows
rows = Rows(Path(os.environ["GPU_CHECK_ROWS"]), sys.argv[1])
"""
BEHAVIOURS = {
    "works": "rows.measure('rate', 123.0, 'tok/s', at_least=100)\nrows.check('graph == eager', True)",
    "fails": "rows.info('before the error', 'measured')\nraise RuntimeError('CUDA error: an illegal memory access')",
    "crashes": "rows.info('before the fault', 'measured')\nos.kill(os.getpid(), signal.SIGSEGV)",
    "hangs": "rows.info('before the hang', f'pid {os.getpid()}')\ntime.sleep(600)",
    # A hung CUDA call does not answer SIGTERM: the harness must follow with SIGKILL.
    "ignores_term": "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nrows.info('deaf', 'measured')\ntime.sleep(600)",
}


def _job(name: str, behaviour: str, budget_s: float = 60.0) -> gpu_check.Job:
    return gpu_check.Job(name, [sys.executable, "-c", PREAMBLE + BEHAVIOURS[behaviour], name], budget_s)


def _by_part(rows) -> dict[str, dict[str, object]]:  # noqa: ANN001
    parts: dict[str, dict[str, object]] = {}
    for row in rows:
        parts.setdefault(row.part, {})[row.name] = row
    return parts


def test_a_failing_a_crashing_and_a_hanging_part_lose_only_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "GRACE_S", 0.5)
    jobs = [
        _job("first", "works"),
        _job("broken", "fails"),
        _job("faulty", "crashes"),
        _job("stuck", "hangs", budget_s=3.0),
        _job("deaf", "ignores_term", budget_s=3.0),
        _job("last", "works"),
    ]
    assert gpu_check.run_jobs(jobs, tmp_path, total_budget_s=300, title="harness") == 1
    parts = _by_part(read_rows(tmp_path / "gpu_check.jsonl"))
    for name in ("first", "last"):  # the parts around the broken ones report in full
        assert parts[name][PART_ROW].status == OK
        assert parts[name]["rate"].value == 123.0 and parts[name]["graph == eager"].status == OK
    assert parts["broken"][PART_ROW].status == FAIL
    assert "illegal memory access" in parts["broken"][PART_ROW].note
    assert parts["faulty"][PART_ROW].status == FAIL and "SIGSEGV" in parts["faulty"][PART_ROW].note
    for name in ("stuck", "deaf"):
        assert parts[name][PART_ROW].status == TIMEOUT
        assert parts[name][PART_ROW].value < 30  # killed at its 3 s budget (+ the grace), not left running
    # Rows measured before the failure, the fault and the hang are kept.
    assert {"before the error", "before the fault", "before the hang", "deaf"} <= {
        row for part in parts.values() for row in part
    }
    table = (tmp_path / "gpu_check.txt").read_text()
    assert "illegal memory access" in table and "TIMEOUT" in table and "123 tok/s" in table
    pid = int(parts["stuck"]["before the hang"].note.split()[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_part_is_not_started_without_time_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "MIN_START_S", 1.0)
    monkeypatch.setattr(gpu_check, "GRACE_S", 0.5)
    jobs = [_job("slow", "hangs", budget_s=60.0), _job("never", "works")]
    assert gpu_check.run_jobs(jobs, tmp_path, total_budget_s=2.0, title="t") == 1
    parts = _by_part(read_rows(tmp_path / "gpu_check.jsonl"))
    assert parts["slow"][PART_ROW].status == TIMEOUT
    assert parts["never"][PART_ROW].status == "skip" and "not started" in parts["never"][PART_ROW].note


DRIVER = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(BENCH)!r})
sys.path.insert(0, {str(REPO)!r})
import gpu_check
from tests.engine.test_gpu_check_harness import _job
jobs = [_job("first", "works"), _job("stuck", "hangs"), _job("after", "works")]
sys.exit(gpu_check.run_jobs(jobs, Path(sys.argv[1]), 300, "interrupted run"))
"""


def test_sigterm_prints_the_table_so_far_and_stops_the_running_part(tmp_path: Path) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        text=True,
    )
    rows_path = tmp_path / "gpu_check.jsonl"
    deadline = (
        time.monotonic() + 120
    )  # the wait is for an event (the hung part's row), the bound only a guard
    while not any(r.name == "before the hang" for r in read_rows(rows_path)):
        assert driver.poll() is None and time.monotonic() < deadline, "the hung part never wrote its row"
        time.sleep(0.05)
    driver.send_signal(signal.SIGTERM)
    output, _ = driver.communicate(timeout=60)
    assert driver.returncode == 143
    assert "interrupted run (interrupted by SIGTERM)" in output
    parts = _by_part(read_rows(rows_path))
    assert parts["first"][PART_ROW].status == OK and parts["first"]["rate"].value == 123.0
    assert parts["stuck"][PART_ROW].status == TIMEOUT and "SIGTERM" in parts["stuck"][PART_ROW].note
    assert "after" not in parts  # stopped: the rest never started
    for text in (output, (tmp_path / "gpu_check.txt").read_text()):
        assert "123 tok/s" in text and "before the hang" in text and "stopped by SIGTERM" in text
    pid = int(parts["stuck"]["before the hang"].note.split()[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_real_cli_runs_its_smoke_part_on_a_dry_run(tmp_path: Path) -> None:
    """The CLI's own child path (`--part`, the budget and rows file in the environment, the interpreter switch)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py"), "--dry-run", "--only", "smoke"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "OUT": str(tmp_path)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    names = {(r["name"], r["status"]) for r in rows}
    assert ("Triton kernel compiled and run", OK) in names and (PART_ROW, OK) in names
    assert "CUDA graph captured and replayed" in (tmp_path / "gpu_check.txt").read_text()
