"""What a load test is made of, without Locust: the workloads and their options (each naming
its locustfile), request specs and bodies, prompt text, length distributions, traces,
arrival schedules, calibration, sessions (a conversation's history, its turns and why it
ended) and the conversation datasets they replay, option distributions, the SSE reader that
times a stream, and the record (with its prompt fingerprint) that each request leaves. Pure
Python and import-light, so the CLI, the orchestrator, the bundle writer, the advisor and
the tests use these pieces without gevent's monkey-patching, and `harness.load` puts them to
work inside Locust. May import the standard library only.
"""
