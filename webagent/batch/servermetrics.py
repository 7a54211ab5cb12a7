"""Server-side figures from a vLLM ``/metrics`` endpoint (Prometheus text), sampled before and after a run."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

__all__ = ["MetricsSample", "parse_prometheus", "sample", "server_report"]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")
GENERATION = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
PROMPT = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
CACHE_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
CACHE_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
CACHE_RATE = ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate")


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over label sets."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match:
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            values[match.group(1)] = values.get(match.group(1), 0.0) + value
    return values


@dataclass(frozen=True)
class MetricsSample:
    at: float
    values: dict[str, float]

    def get(self, names: tuple[str, ...]) -> float | None:
        return next((self.values[n] for n in names if n in self.values), None)


async def sample(url: str, *, timeout_s: float = 5.0) -> MetricsSample | None:
    """Scrape the endpoint; None (and no error) when it cannot be read."""

    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body.decode("utf-8", "replace")

    try:
        text = await asyncio.to_thread(fetch)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return MetricsSample(time.monotonic(), parse_prometheus(text))


def server_report(before: MetricsSample | None, after: MetricsSample | None, url: str) -> dict[str, object]:
    """Generation tokens/s, prompt tokens, the prefix cache's hit rate (the cached share of the prompt
    tokens looked up) and the prompt tokens it did not serve (what the GPU prefilled), over the run."""
    report: dict[str, object] = {"url": url}
    if before is None or after is None:
        report["error"] = f"could not read metrics from {url}"
        return report
    elapsed = max(after.at - before.at, 1e-9)

    def delta(names: tuple[str, ...]) -> float | None:
        a, b = before.get(names), after.get(names)
        return None if a is None or b is None else b - a

    generated = delta(GENERATION)
    prompt = delta(PROMPT)
    queries, hits = delta(CACHE_QUERIES), delta(CACHE_HITS)
    report["generation_tokens"] = generated
    report["generation_tokens_per_s"] = None if generated is None else round(generated / elapsed, 1)
    report["prompt_tokens"] = prompt
    report["prompt_tokens_per_s"] = None if prompt is None else round(prompt / elapsed, 1)
    if queries:
        report["prefix_cache_hit_rate"] = round((hits or 0.0) / queries, 4)
        report["uncached_prompt_tokens"] = queries - (hits or 0.0)
    else:
        rate = after.get(CACHE_RATE)
        report["prefix_cache_hit_rate"] = None if rate is None else round(rate, 4)
    return report
