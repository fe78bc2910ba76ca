"""The run report's sections and their tables' headers as they were before the report was
built from blocks (captured from report.md and report.html of a bundle with every section),
which the report keeps."""

# The section titles, in order.
RUN_SECTIONS = [
    "Advice",
    "Measurement self-check",
    "Summary",
    "Latency",
    "Throughput and goodput",
    "Server and KV cache",
    "Preemptions and latency",
    "Latency by KV usage at send time",
    "Client vs server timing",
    "Server-side split by latency band",
    "Errors",
    "Request lengths",
]
# Their tables' headers, section by section (the Advice had none outside its Markdown).
RUN_TABLES = {
    "Measurement self-check": [["check", "value"]],
    "Latency": [["metric", "n", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"]],
    "Throughput and goodput": [["quantity", "value"]],
    "Server and KV cache": [["quantity", "value"]],
    "Preemptions and latency": [["requests sent", "n", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms"]],
    "Latency by KV usage at send time": [
        ["KV usage", "requests", "failed", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms"]
    ],
    "Client vs server timing": [["metric", "n", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"]],
    "Server-side split by latency band": [
        [
            "client E2E band",
            "requests",
            "E2E p50 ms",
            "queue p50 ms",
            "prefill p50 ms",
            "decode p50 ms",
            "queue share of server E2E",
        ]  # fmt: skip
    ],
    "Errors": [["error class", "requests", "example message"]],
    "Request lengths": [["metric", "n", "mean", "p50", "p90", "p99", "max"]],
}
