"""Timing: the candidate against the reference (and the baseline) in one confined process."""

from __future__ import annotations

import os
import secrets
import select
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from apps.devices.cpu_c.protocol import (
    BASELINE,
    CANDIDATE,
    CHECKED,
    LAST,
    QUIT,
    RECORD,
    REFERENCE,
    RENEW,
    RENEWED,
    SMALL,
    order_tag,
    replies,
)
from apps.devices.evaluator.harness import harness_run, scan_log, start_harness
from apps.devices.evaluator.judging import compare_output
from apps.devices.evaluator.runs import OperatorUnderTest, Run
from apps.devices.evaluator.settings import TARGET, EvalSettings
from apps.devices.evaluator.workspace import Workspace
from apps.operators.spec import OperatorSpec
from apps.sandbox import policies

IMPLAUSIBLE_SPEEDUP = 10.0


def time_candidate(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run],
                   options: EvalSettings, flags: list[str], *,
                   with_baseline: bool = False) -> dict[str, Any]:  # fmt: skip
    timing_runs = [r for r in runs if r.timing and r.repeat_of is None]
    if not timing_runs:
        return {"ok": False, "reason": f"{operator.label} has no timing case for {TARGET}"}
    run = timing_runs[0]
    scaling = scaling_run(runs, run)
    last_outputs = [
        {**m, "file": f"{run.run_id}.last{i}"} for i, m in enumerate(run.generated["outputs"])
    ]
    plan = {
        "run": {**harness_run(run), "outputs": last_outputs, "params": run.params,
                "scalars": run.generated["scalars"]},
        "reference": {"kind": operator.reference_kind, "source": operator.reference_source},
        "scaling": scaling_plan(scaling),
    }  # fmt: skip
    manifest = {
        "mode": "timing",
        "kernel_so": "kernel.so",
        "baseline_so": "baseline.so" if with_baseline else None,
        "threads": options.threads,
        "timing": plan,
        "tolerance": {"max_abs": operator.spec.max_abs, "max_rel": operator.spec.max_rel},
    }
    try:
        measured = run_timing_harness(workspace, manifest, options,
                                      with_scaling=scaling is not None,
                                      with_baseline=with_baseline)  # fmt: skip
    except TimingRefused as error:
        flags.append(f"timing refused: {error}")
        return {"ok": False, "reason": str(error)}
    wrong = wrong_calls(workspace, operator.spec, run, scaling, measured["first_wrong"])
    return timing_summary(run, scaling, {**measured, "wrong_calls": wrong}, options, flags)


def wrong_calls(workspace: Workspace, spec: OperatorSpec, run: Run, scaling: Run | None,
                first_wrong: int) -> list[str]:  # fmt: skip
    """The timed calls whose output was wrong, named: the first of the timed calls the harness
    checked, the last call (judged here) and the smaller case's last call (judged here)."""
    wrong = []
    if first_wrong:
        wrong.append(f"timed call {first_wrong} of case {run.case_id}")
    if not produced_right(workspace, spec, run, "last"):
        wrong.append(f"the last timed call of case {run.case_id}")
    if scaling is not None and not produced_right(workspace, spec, scaling, "small"):
        wrong.append(f"the last call of the smaller case {scaling.case_id}")
    return wrong


def produced_right(workspace: Workspace, spec: OperatorSpec, run: Run, produced: str) -> bool:
    return all(
        compare_output(workspace, run, i, m, spec, produced=produced)["within_tolerance"]
        for i, m in enumerate(run.generated["outputs"])
    )


# --- the judge's clock: it drives every timed call over a pipe and timestamps the replies ----


class TimingRefused(RuntimeError):
    """The candidate process broke the timing protocol, died, or overran; the message says how."""


class Channel:
    def __init__(self, go: int, report: int, deadline: float) -> None:
        self.go, self.report, self.deadline = go, report, deadline

    def order(self, tag: bytes, iteration: int) -> tuple[int, int]:
        """Send one order; (the nonce it carries, the time it was sent)."""
        nonce = secrets.randbits(63)
        os.write(self.go, RECORD.pack(tag, iteration, nonce, 0))
        return nonce, time.perf_counter_ns()

    def expect(self, tag: bytes, iteration: int, nonce: int) -> int:
        """Wait for the reply; the time it arrived. Anything else refuses the timing."""
        arrived, status = self.receive(tag, iteration, nonce)
        if status != 0:
            raise TimingRefused(f"kope_kernel returned {status} during timing")
        return arrived

    def renew(self, iteration: int) -> bool:
        """Have the harness put new contents in the timed inputs; whether it did."""
        nonce, _ = self.order(RENEW, iteration)
        _, status = self.receive(RENEW, iteration, nonce)
        return status == RENEWED

    def receive(self, tag: bytes, iteration: int, nonce: int) -> tuple[int, int]:
        """The reply to an order: the time it arrived and its status."""
        data = b""
        while len(data) < RECORD.size:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.report], [], [], remaining)[0]:
                raise TimingRefused(f"no reply within the {settings.KOPE_EVAL_TIMEOUT_S} s limit")
            chunk = os.read(self.report, RECORD.size - len(data))
            if not chunk:
                raise TimingRefused("the candidate process stopped during timing")
            data += chunk
        arrived = time.perf_counter_ns()
        got_tag, got_iteration, got_nonce, status = RECORD.unpack(data)
        if (got_tag, got_iteration, got_nonce) != (tag, iteration, nonce):
            raise TimingRefused(
                "a reply the harness did not send (the kernel wrote to the timing channel)"
            )
        return arrived, status


def drive_timing(channel: Channel, options: EvalSettings, *, with_scaling: bool,
                 with_baseline: bool = False) -> dict[str, Any]:  # fmt: skip
    reference_ns: list[int] = []
    timed_ns: dict[bytes, list[int]] = {CANDIDATE: [], BASELINE: []}
    scaling_ns = []
    renewed = 0
    for iteration in range(options.warmup + options.repeats):
        new_contents = channel.renew(iteration)
        tag = order_tag(iteration, with_baseline)
        nonce, sent = channel.order(tag, iteration)
        reference_done = previous = channel.expect(REFERENCE, iteration, nonce)
        for timed in replies(tag, with_baseline):
            done = channel.expect(timed, iteration, nonce)
            if iteration >= options.warmup:
                timed_ns[timed].append(done - previous)
            previous = done
        if iteration >= options.warmup:
            reference_ns.append(reference_done - sent)
            renewed += new_contents
    for iteration in range(scaling_repeats(options) if with_scaling else 0):
        nonce, sent = channel.order(SMALL, iteration)
        scaling_ns.append(channel.expect(SMALL, iteration, nonce) - sent)
    nonce, _ = channel.order(LAST, 0)
    channel.expect(LAST, 0, nonce)
    nonce, _ = channel.order(CHECKED, 0)
    _, first_wrong = channel.receive(CHECKED, 0, nonce)
    channel.order(QUIT, 0)
    return {"reference_ns": reference_ns, "candidate_ns": timed_ns[CANDIDATE],
            "baseline_ns": timed_ns[BASELINE], "scaling_ns": scaling_ns, "status": 0,
            "inputs_renewed": renewed, "first_wrong": first_wrong}  # fmt: skip


def scaling_repeats(options: EvalSettings) -> int:
    return max(5, options.repeats // 5)


def run_timing_harness(
    workspace: Workspace, manifest: dict[str, Any], options: EvalSettings, *,
    with_scaling: bool, with_baseline: bool = False,
) -> dict[str, Any]:  # fmt: skip
    go_read, go_write = os.pipe()
    report_read, report_write = os.pipe()
    manifest["channel"] = {"go": go_read, "report": report_write}
    child, log = start_harness(workspace, manifest, options, pass_fds=(go_read, report_write))
    os.close(go_read)
    os.close(report_write)
    deadline = time.monotonic() + settings.KOPE_EVAL_TIMEOUT_S
    try:
        return drive_timing(Channel(go_write, report_read, deadline), options,
                            with_scaling=with_scaling, with_baseline=with_baseline)  # fmt: skip
    except TimingRefused as error:
        policies.kill_group(child)
        raise TimingRefused(f"{error}{crash_detail(child.returncode, log)}") from None
    finally:
        os.close(go_write)
        os.close(report_read)
        policies.wait_or_kill(child, 10)  # an overrun after its last reply changes nothing


def crash_detail(returncode: int, log: Path) -> str:
    if returncode >= 0:
        return ""
    _, others = scan_log(log)
    return f" (killed by {signal.Signals(-returncode).name}: {' | '.join(others) or 'no message'})"


def scaling_plan(scaling: Run | None) -> dict[str, Any] | None:
    """The smaller case's calls write files of their own: the correctness run's stay as judged."""
    if scaling is None:
        return None
    outputs = [{**m, "file": f"{scaling.run_id}.small{i}"}
               for i, m in enumerate(harness_run(scaling)["outputs"])]  # fmt: skip
    return {**harness_run(scaling), "outputs": outputs}


def scaling_run(runs: list[Run], timing: Run) -> Run | None:
    """A smaller case to time as well: a kernel whose time does not grow with size is suspect."""
    size = input_elements(timing)
    smaller = [r for r in runs if r.repeat_of is None and not r.timing and r.run_id.endswith("s0")
               and input_elements(r) * 4 <= size]  # fmt: skip
    return max(smaller, key=input_elements, default=None)


def input_elements(run: Run) -> int:
    return sum(int(np.prod(m["shape"], dtype=np.int64)) for m in run.generated["inputs"])


def stats_ms(samples_ns: list[int]) -> dict[str, float]:
    values = np.array(samples_ns, dtype=np.float64) / 1e6
    return {"mean_ms": float(values.mean()), "median_ms": float(np.median(values)),
            "min_ms": float(values.min()), "samples": len(values)}  # fmt: skip


def paired_ratio(baseline_ns: list[int], candidate_ns: list[int]) -> float:
    """How many times faster the candidate ran than the baseline: the median, over the timed
    orders, of the baseline's time over the candidate's in that order. The two calls of an
    order run one after the other, so a host that slows down midway slows both; the ratio of
    the two medians can take each from another side of the change."""
    ratios = [b / max(c, 1) for b, c in zip(baseline_ns, candidate_ns, strict=True)]
    return float(np.median(np.array(ratios, dtype=np.float64)))


def timing_summary(run: Run, scaling: Run | None, result: dict[str, Any], options: EvalSettings,
                   flags: list[str]) -> dict[str, Any]:  # fmt: skip
    candidate, reference = stats_ms(result["candidate_ns"]), stats_ms(result["reference_ns"])
    speedup = reference["median_ms"] / max(candidate["median_ms"], 1e-9)
    summary: dict[str, Any] = {
        "ok": not result["wrong_calls"] and result.get("status") == 0, "case_id": run.case_id,
        "threads": options.threads, "warmup": options.warmup, "repeats": options.repeats,
        "candidate": candidate, "reference": reference, "speedup": speedup,
        "candidate_samples_ms": [n / 1e6 for n in result["candidate_ns"]],
        "inputs_renewed": result.get("inputs_renewed", 0),
    }  # fmt: skip
    if result.get("baseline_ns"):
        summary["baseline"] = stats_ms(result["baseline_ns"])
        summary["baseline_samples_ms"] = [n / 1e6 for n in result["baseline_ns"]]
        summary["vs_baseline"] = paired_ratio(result["baseline_ns"], result["candidate_ns"])
    if result["wrong_calls"]:
        summary["wrong_calls"] = result["wrong_calls"]
        summary["reason"] = (f"wrong output on {'; '.join(result['wrong_calls'])} (results "
                             "remembered between calls?)")  # fmt: skip
    if speedup > IMPLAUSIBLE_SPEEDUP:
        flags.append(f"implausible speedup {speedup:.1f}x vs the reference: review before trusting")
    scaling_ns = result.get("scaling_ns")
    if scaling is not None and isinstance(scaling_ns, list) and scaling_ns:
        small = float(np.median(np.array(scaling_ns, dtype=np.float64))) / 1e6
        work_ratio = input_elements(run) / max(1, input_elements(scaling))
        time_ratio = candidate["median_ms"] / max(small, 1e-9)
        summary["scaling"] = {"case_id": scaling.case_id, "median_ms": small,
                              "work_ratio": work_ratio, "time_ratio": time_ratio}  # fmt: skip
        if time_ratio < 1.5:
            flags.append(f"time does not grow with input size ({work_ratio:.0f}x the elements, "
                         f"{time_ratio:.2f}x the time)")  # fmt: skip
    return summary
