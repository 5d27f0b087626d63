"""The step loop: one background thread owns the model and runs steps; callers on any thread submit sequences and
read their own outboxes.

A step: drop what was cancelled (its slot is free for this very step), let the scheduler plan (admit waiting
sequences, decode the running ones, chunk the prefills into what is left of the token budget, and the cache
copies: restores and saves), run the model with those copies, sample, hand every stepped sequence its delta,
retire the finished. The loop itself never touches the cache: the scheduler's cache manager owns it
(engine/cache_manager.py), the runner makes the copies. The lock covers one step, never a generation,
so a new request joins the running batch at the next step. A step that fails fails only its own sequences (their
callers get the exception); the loop keeps serving the others.

With `overlap` (on a GPU by default, `AW_OVERLAP_SCHEDULE`), the host never waits for the device between two
launches, as in SGLang's overlap scheduler. Step k's sampled tokens stay on the device (`ModelRunner.sample`):
step k + 1 takes its input ids from them (gathered by sequence, newly prefilled sequences mixed in; a CUDA graph's
static input buffer is filled by an on-device copy), and their copy into pinned host memory is queued behind them
with an event. Step k + 1 is planned and launched first; only then does the loop wait on that event and settle
step k (detokenize, stop checks, deltas, retire) while the device computes step k + 1, then sample step k + 1 on
the device and go on to plan step k + 2. A sequence that step k's tokens finish has gone through step k + 1 too:
that row is dropped unsampled (its slot is free only from then on, and stream order puts any later use of it
after). Greedy tokens and seeded draws are those of the serial loop; each request's last token comes one step
later. Without overlap the same code runs and settles each step at once (on CPU the copy and event are no-ops).

What needs a step's tokens on the host gets them in time without leaving that path: the next launch needs none
(which sequences decode, their positions and slots are host state; their ids come from the device). What step
k + 1's sampling needs from step k's tokens on the host is there, since step k is settled between the launch and
the sampling: a grammar-constrained row's mask (its matcher accepted token k), a forced `</think>` (the thinking
budget counts token k), a repetition penalty's seen set, the end tokens masked while a constrained answer waits,
and which rows finished. What falls back to waiting for the copy before planning, as the serial loop does: a
stop or abort request on a sequence whose token is unsettled (the token sampled before the stop is handed out
first), a job between steps (`call`, `logits`: it sees every token handed out), and a failed step (the previous
step's tokens are handed out before its sequences fail). A decode row whose token the last step's device tensor
does not hold (none in steady operation) is uploaded from the host."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from engine.forward_batch import to_device
from engine.metrics import EngineMetrics
from engine.model_runner import ModelRunner, SampledTokens
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
        overlap: bool = False,
    ) -> None:
        self.runner = runner
        self.scheduler = scheduler
        self.processor = processor
        self.overlap = overlap
        # The last step's sampled tokens, on the device: the next decode's inputs. Until settled (handed to their
        # sequences) they are also `_unsettled`; with overlap that lasts until the next step has launched.
        self._last: SampledTokens | None = None
        self._unsettled: SampledTokens | None = None
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
                    self._settle()  # a job sees every sampled token handed out
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
                self._settle()  # the previous step's tokens are good: hand them out first
                for seq in plan.sequences:
                    if not seq.finished:
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
                rows.append(_rows(logits, done) if len(done) < len(plan.prefills) else logits)
                stepped += [plan.prefills[i].seq for i in done]
        if plan.decodes:
            rows.append(runner.decode(plan.decodes, self._last))  # input ids: the last step's, on the device
            stepped += plan.decodes
        self.scheduler.advance(plan, runner.take_snapshots(plan.saves))
        self._settle()  # with overlap, the first wait for the device: this step is queued behind it
        if not stepped:
            return
        logits = rows[0] if len(rows) == 1 else torch.cat(rows)
        live = [i for i, seq in enumerate(stepped) if not seq.finished]  # finished by the tokens just settled
        if not live:
            return
        if len(live) < len(stepped):
            logits, stepped = _rows(logits, live), [stepped[i] for i in live]
        self._last = self._unsettled = runner.sample(stepped, logits, self.processor)  # no host read
        if not self.overlap:
            self._settle()

    def _settle(self) -> None:
        """Hand the last step's sampled tokens to their sequences: detokenize, stop checks, deltas, retire. A
        sequence whose token breaks (its grammar, a stop check) fails alone."""
        unsettled, self._unsettled = self._unsettled, None
        if unsettled is None:
            return
        tokens = unsettled.tolist()  # waits for the tokens' copy to the host, not for the step behind it
        now = time.monotonic()
        for seq, token in zip(unsettled.seqs, tokens, strict=True):
            if seq.finished:  # aborted or failed meanwhile
                continue
            self.metrics.generation_tokens.inc()
            if seq.first_token_time is None:
                seq.first_token_time = now
                self.metrics.ttft.observe(now - seq.arrival_time)
            try:
                self.processor.append_token(seq, token)
            except Exception as exc:  # noqa: BLE001 -- this sequence's failure only
                self._fail(seq, exc)
                continue
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
        stopped = [seq for seq in [*self.scheduler.running, *self.scheduler.waiting] if _stop_requested(seq)]
        if self._unsettled is not None and any(seq in self._unsettled for seq in stopped):
            self._settle()  # the token sampled before the stop is handed out, as without overlap
        for seq in stopped:
            if not seq.finished:
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
            self._settle()
            self._last = None
            for seq in [*self.scheduler.running, *self.scheduler.waiting, *self._inbox]:
                self._fail(seq, EngineClosed("the engine is shut down"))
            for _, future, _ in self._jobs:
                future.set_exception(EngineClosed("the engine is shut down"))
            self._jobs.clear()
            self.runner.close()


def _rows(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Those rows of a step's logits, the index moved without a host sync."""
    return logits.index_select(0, to_device([rows], logits.device)[0])


def _stop_requested(seq: Sequence) -> bool:
    try:
        return seq.stop_requested()
    except Exception:  # noqa: BLE001 -- a stop check that raises counts as a stop
        return True
