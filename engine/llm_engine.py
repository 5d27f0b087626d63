"""The step loop: one background thread owns the model and runs steps; callers on any thread submit sequences and
read their own outboxes.

A step: drop what was cancelled (its slot is free for this very step), let the scheduler plan (admit waiting
sequences, decode the running ones, chunk the prefills into what is left of the token budget, and the cache
copies: restores and saves), run the model with those copies, sample, hand every stepped sequence its delta,
retire the finished. The loop itself never touches the cache: the scheduler's cache manager owns it
(engine/cache_manager.py), the runner makes the copies. The lock covers one step, never a generation,
so a new request joins the running batch at the next step. A step that fails fails only its own sequences (their
callers get the exception); the loop keeps serving the others."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from engine.metrics import EngineMetrics
from engine.model_runner import ModelRunner
from engine.output_processor import OutputProcessor
from engine.prefix_cache import PrefixCache
from engine.scheduler import Scheduler, StepPlan
from engine.sequence import Sequence


class EngineClosed(RuntimeError):
    pass


class LLMEngine:
    def __init__(
        self,
        runner: ModelRunner,
        scheduler: Scheduler,
        processor: OutputProcessor,
    ) -> None:
        self.runner = runner
        self.scheduler = scheduler
        self.processor = processor
        self.metrics = EngineMetrics()
        self.num_steps = 0
        self.lock = threading.Lock()  # held for exactly one step (or one job between steps)
        self._wakeup = threading.Condition()
        self._inbox: deque[Sequence] = deque()
        self._jobs: deque[tuple[Callable[[], Any], Future, bool]] = deque()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="engine-step-loop", daemon=True)
        self._thread.start()

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return self.scheduler.cache_manager.prefix_cache

    # -- callers' side (any thread) ---------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        with self._wakeup:
            if self._closed:
                raise EngineClosed("the engine is shut down")
            self._inbox.append(seq)
            self._wakeup.notify()

    def abort(self, seq: Sequence) -> None:
        """Cancel a request: it leaves at the next step with finish_reason "abort" and frees its slot."""
        seq.abort_requested = True
        with self._wakeup:
            self._wakeup.notify()

    def call(self, fn: Callable[[], Any], needs_slot: bool = False) -> Any:
        """Run `fn` on the loop thread between two steps (with `needs_slot`, once a cache slot is free)."""
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        with self._wakeup:
            if self._closed:
                raise EngineClosed("the engine is shut down")
            self._jobs.append((fn, future, needs_slot))
            self._wakeup.notify()
        return future.result()

    def logits(self, token_ids: torch.Tensor) -> torch.Tensor:
        """fp32 logits [T, vocab] of every position of one sequence, run between two steps in a borrowed slot."""

        def run() -> torch.Tensor:
            with self.scheduler.cache_manager.borrowed_slot() as slot:
                return self.runner.logits(token_ids, slot)

        return self.call(run, needs_slot=True)

    def close(self) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    # -- the loop thread --------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._wakeup:
                while not (self._closed or self._inbox or self._ready_jobs() or self.scheduler.has_work):
                    self._wakeup.wait()
                if self._closed:
                    break
                while self._inbox:
                    self._admit(self._inbox.popleft())
                jobs = self._ready_jobs()
                for job in jobs:
                    self._jobs.remove(job)
            for fn, future, _ in jobs:
                with self.lock:
                    self._run_job(fn, future)
            self.step()
        self._shut_down()

    def _ready_jobs(self) -> list[tuple[Callable[[], Any], Future, bool]]:
        has_slot = self.scheduler.cache_manager.num_free > 0  # a job borrows a slot for its own call only
        return [job for job in self._jobs if not job[2] or has_slot]

    @staticmethod
    def _run_job(fn: Callable[[], Any], future: Future) -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the caller
            future.set_exception(exc)

    def _admit(self, seq: Sequence) -> None:
        self.metrics.prompt_tokens.inc(len(seq.prompt_ids))
        self.scheduler.add(seq)

    def step(self) -> None:
        with self.lock:
            self._drop_stopped()
            plan = self.scheduler.schedule()
            self._record_queue()
            if plan.empty:
                return
            started = time.perf_counter()
            try:
                self._run(plan)
            except Exception as exc:  # noqa: BLE001 -- one bad step must not end the loop
                self.scheduler.step_failed(plan, exc)
                for seq in plan.sequences:
                    self._fail(seq, exc)
            self.num_steps += 1
            self.metrics.step_time.observe(time.perf_counter() - started)
            self._record_queue()

    def _run(self, plan: StepPlan) -> None:
        runner = self.runner
        rows: list[torch.Tensor] = []
        stepped: list[Sequence] = []
        runner.fill_slots(plan.restores)
        if plan.prefills:
            logits = runner.prefill(plan.prefills)
            done = [i for i, chunk in enumerate(plan.prefills) if chunk.completes_prompt]
            if done:
                rows.append(logits[done])
                stepped += [plan.prefills[i].seq for i in done]
        if plan.decodes:
            rows.append(runner.decode(plan.decodes))
            stepped += plan.decodes
        self.scheduler.advance(plan, runner.take_snapshots(plan.saves))
        if not stepped:
            return
        logits = rows[0] if len(rows) == 1 else torch.cat(rows)
        tokens = runner.pick_tokens(stepped, logits, self.processor)
        now = time.monotonic()
        self.metrics.generation_tokens.inc(len(tokens))
        for seq, token in zip(stepped, tokens, strict=True):
            if seq.first_token_time is None:
                seq.first_token_time = now
                self.metrics.ttft.observe(now - seq.arrival_time)
            self.processor.append_token(seq, token)
            self._emit(seq)

    def _emit(self, seq: Sequence) -> None:
        try:
            seq.sink(self.processor.take_delta(seq))
        except Exception:  # noqa: BLE001 -- the caller's side is gone (closed event loop): nobody reads on
            seq.abort_requested = True
            return
        if seq.finished:
            self.metrics.finished.labels(seq.finish_reason).inc()
            self.scheduler.retire(seq)

    def _drop_stopped(self) -> None:
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            try:
                stopped = seq.stop_requested()
            except Exception:  # noqa: BLE001 -- a stop check that raises counts as a stop
                stopped = True
            if stopped:
                seq.finish_reason = "abort"
                self.scheduler.retire(seq)
                self.metrics.finished.labels("abort").inc()
                try:
                    seq.sink(self.processor.take_delta(seq))
                except Exception:  # noqa: BLE001 -- nobody listens any more
                    pass

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        seq.finish_reason = "error"
        self.scheduler.retire(seq)
        self.metrics.finished.labels("error").inc()
        try:
            seq.sink(exc)
        except Exception:  # noqa: BLE001
            pass

    def _record_queue(self) -> None:
        self.metrics.running.set(len(self.scheduler.running))
        self.metrics.waiting.set(len(self.scheduler.waiting))
        if self.prefix_cache is not None:
            pc = self.prefix_cache
            self.metrics.record_prefix_cache(pc.stats, pc.used_bytes, len(pc))

    def _shut_down(self) -> None:
        with self.lock:
            for seq in [*self.scheduler.running, *self.scheduler.waiting, *self._inbox]:
                self._fail(seq, EngineClosed("the engine is shut down"))
            for _, future, _ in self._jobs:
                future.set_exception(EngineClosed("the engine is shut down"))
            self._jobs.clear()
