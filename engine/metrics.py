"""Prometheus metrics of one engine (vLLM's names under our `aw_engine:` prefix), rendered by `/metrics`.

prometheus_client is the reference implementation of the exposition format; each engine has its own registry so
several engines in one process (tests) never mix their numbers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.prefix_cache import PrefixCacheStats

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
)


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("aw_engine:num_requests_running", "Requests holding a cache slot.", registry=r)
        self.waiting = Gauge(
            "aw_engine:num_requests_waiting", "Requests queued for a cache slot.", registry=r
        )
        self.prompt_tokens = Counter(
            "aw_engine:prompt_tokens", "Prompt tokens of admitted requests.", registry=r
        )
        self.generation_tokens = Counter("aw_engine:generation_tokens", "Generated tokens.", registry=r)
        self.prefix_queries = Counter(
            "aw_engine:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", registry=r
        )
        self.prefix_hits = Counter(
            "aw_engine:prefix_cache_hits", "Prompt tokens restored from the prefix cache.", registry=r
        )
        self.prefix_hit_rate = Gauge(
            "aw_engine:prefix_cache_hit_rate", "Share of looked-up prompt tokens that hit.", registry=r
        )
        self.prefix_bytes = Gauge(
            "aw_engine:prefix_cache_bytes", "Memory held by prefix snapshots.", registry=r
        )
        self.prefix_snapshots = Gauge(
            "aw_engine:prefix_cache_snapshots", "Prefix snapshots kept.", registry=r
        )
        self.step_time = Histogram(
            "aw_engine:step_duration_seconds",
            "Wall time of one engine step.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "aw_engine:time_to_first_token_seconds",
            "From arrival to the first generated token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.finished = Counter(
            "aw_engine:request_success", "Finished requests by reason.", ["finished_reason"], registry=r
        )
        self.memory_plan = Gauge(
            "aw_engine:memory_plan_bytes",
            "The engine's memory plan (engine/memory_plan.py) by part: weights as stored, cache, prefix_cache, "
            "activations, runtime, total.",
            ["part"],
            registry=r,
        )
        self._seen_query_tokens = self._seen_hit_tokens = 0

    def record_memory_plan(self, plan: dict[str, int]) -> None:
        for part in ("weights", "cache", "prefix_cache", "activations", "runtime", "total", "per_sequence"):
            self.memory_plan.labels(part=part).set(plan[part])

    def record_prefix_cache(self, stats: PrefixCacheStats, used_bytes: int, snapshots: int) -> None:
        self.prefix_queries.inc(stats.query_tokens - self._seen_query_tokens)
        self.prefix_hits.inc(stats.hit_tokens - self._seen_hit_tokens)
        self._seen_query_tokens, self._seen_hit_tokens = stats.query_tokens, stats.hit_tokens
        self.prefix_hit_rate.set(stats.hit_rate)
        self.prefix_bytes.set(used_bytes)
        self.prefix_snapshots.set(snapshots)

    def render(self) -> bytes:
        return generate_latest(self.registry)
