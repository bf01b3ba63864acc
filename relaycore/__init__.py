"""The ground floor: what every app of the relay stands on, importing no app (docs/architecture.md).

Configuration (`config`), public addressing (`addressing`, `http`), Redis (`redis_topology`:
where it is; `redis_clients`: the clients and their breaker), rate limits (`ratelimit`), the
database thread pool
(`dbthreads`) and connection helpers (`db`), the metric registry and counters (`metrics`,
`request_metrics`), the ASGI bounds (`body_limit`, `connection_limits`), and the DRF edge's base
classes (`edge`: the pipeline, NIP-98, throttles, renderers, the OpenAPI vocabulary). The apps
(`artifacts`, `relayinfo`) hand it what only they know when Django starts: the community lookup
(`edge.views.use_community_lookup`) and the readiness verdict (`readiness_gate`).
"""
