"""Prometheus metrics (prometheus-client): HTTP requests by route, tool calls, embedding time, palace size, feeding.

Only the definitions: the site's middleware counts requests, /metrics (palace.routes.operations) reads the
palace gauges and renders them.

With several gunicorn workers, `serve` gives them a shared PROMETHEUS_MULTIPROC_DIR (palazzo_site.gunicorn_conf)
and /metrics sums every worker's counters and histograms (prometheus-client's multiprocess mode); the gauges
read at scrape time report the latest scrape's value, and palazzo_workers the workers alive.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A fixed set of route labels: raw paths would let any client create unbounded series.
ROUTES = ("/mcp", "/ingest", "/export", "/metrics", "/healthz", "/admin", "/api", "/feed", "/wake-up")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUESTS = Counter(
    "palazzo_http_requests", "HTTP requests answered, by route, method and status.", ["route", "method", "status"]
)
HTTP_SECONDS = Histogram(
    "palazzo_http_request_duration_seconds", "HTTP request latency by route.", ["route"], buckets=LATENCY_BUCKETS
)
TOOL_CALLS = Counter(
    "palazzo_tool_calls", "Palace calls (MCP tools, prompt, resource), by tool and outcome.", ["tool", "outcome"]
)
TOOL_SECONDS = Histogram(
    "palazzo_tool_duration_seconds", "Palace call latency by tool.", ["tool"], buckets=LATENCY_BUCKETS
)
EMBEDDING_SECONDS = Histogram(
    "palazzo_embedding_duration_seconds",
    "Time spent embedding, by kind (documents, query).",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
MEMORIES = Gauge(
    "palazzo_memories",
    "Memories in the palace (all, or current: not superseded).",
    ["state"],
    multiprocess_mode="mostrecent",
)
JOURNAL_PENDING = Gauge(
    "palazzo_journal_pending",
    "Journal entries written but not yet applied to the store.",
    multiprocess_mode="mostrecent",
)
STORE_UP = Gauge(
    "palazzo_store_up", "1 when the last scrape could read the store, else 0.", multiprocess_mode="mostrecent"
)
REDACTIONS = Counter(
    "palazzo_redactions",
    "Matches of the redaction rules in written memories, by rule and mode (dry-run counts without changing).",
    ["rule", "mode"],
)
INDEX_BUILDING = Gauge(
    "palazzo_search_index_building",
    "1 while the store builds its search index, else 0.",
    multiprocess_mode="mostrecent",
)
FEED_SESSIONS = Gauge(
    "palazzo_feed_sessions",
    "Transcript sessions fed, by harness and device.",
    ["harness", "device"],
    multiprocess_mode="mostrecent",
)
FEED_EXCHANGES = Gauge(
    "palazzo_feed_exchanges",
    "Transcript exchanges fed, by harness and device.",
    ["harness", "device"],
    multiprocess_mode="mostrecent",
)
FEED_LAST = Gauge(
    "palazzo_feed_last_fed_timestamp_seconds",
    "When a transcript was last fed, by harness and device.",
    ["harness", "device"],
    multiprocess_mode="mostrecent",
)
FEED_FAILING = Gauge(
    "palazzo_feed_last_error_timestamp_seconds",
    "When feeding last failed (0: never), by harness and device.",
    ["harness", "device"],
    multiprocess_mode="mostrecent",
)
FEED_QUEUED = Gauge(
    "palazzo_feed_queued",
    "Transcripts waiting in the hook spool (failed ones included).",
    multiprocess_mode="mostrecent",
)
# 1 in each worker; summed over the live ones in multiprocess mode.
WORKERS = Gauge("palazzo_workers", "Server processes answering (gunicorn workers).", multiprocess_mode="livesum")
WORKERS.set(1)


def route_label(path: str) -> str:
    """The metric label of a request path: one of ROUTES, or 'other'."""
    for route in ROUTES:
        if path == route or path.startswith(route + "/"):
            return route
    return "other"


def observe_tool(*, tool: str, ok: bool, seconds: float) -> None:
    """Count one palace call and its latency."""
    TOOL_CALLS.labels(tool, "ok" if ok else "error").inc()
    TOOL_SECONDS.labels(tool).observe(seconds)
