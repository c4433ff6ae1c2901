"""Per-process runtime health of each backend: in-flight, latency, probes, breaker.

Invariants:
- A `BackendState` is mutated only by its own process (one event loop, no
  awaits between `Selector.pick()` and `on_start()`), so it needs no locks.
- Clocks are passed in (`now`, monotonic seconds); nothing here reads time.
- A backend is `usable` when the active probe says healthy AND the passive
  circuit breaker admits traffic. The two are independent: probes hit a cheap
  listing path, the breaker watches real requests (connect errors / 5xx).
- Breaker: closed -> (failure_threshold consecutive failures) -> open for
  `cooldown`; once the cooldown has elapsed exactly ONE trial request is
  admitted (half-open). Its success closes the breaker and resets the
  cooldown; its failure re-opens it with the cooldown multiplied by `backoff`
  (capped at `max_cooldown_s`).
- Every `on_start()` is matched by exactly one of `on_success()`,
  `on_failure()` or `on_cancel()`; in-flight never goes below zero.
- Warm-up is not down. A backend that is starting (it loads a model) answers
  the probe 503 or refuses connections; that opens a warm-up window of
  `warmup_timeout_s` when the backend is first probed, when it answers 503
  after being unreachable since its last good probe (it restarted), or when
  a 503 says it is loading (llama.cpp: "Loading model"). Inside the window
  the backend is `warming` — out of rotation, probed every
  `warmup_interval_s`, and no failed probe counts; a good probe ends it
  (healthy_threshold still applies). A window that runs out leaves the
  backend down, and no new one opens until the backend is unreachable or
  healthy again (a server stuck answering 503 is down, not warming forever).
  `warmup_timeout_s` 0 turns warm-up off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum


class Probe(Enum):
    """What one active probe found."""

    OK = "ok"
    LOADING = "loading"  # a 503 that says it is loading a model
    UNAVAILABLE = "unavailable"  # any other 503
    UNREACHABLE = "unreachable"  # connection refused (nothing listens yet)
    FAILED = "failed"  # anything else: a timeout, another 5xx


MAX_COOLDOWN_S = 120.0  # where the breaker's cooldown backoff stops growing (unless cooldown is longer)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    # Passive circuit breaker.
    failure_threshold: int = 3
    cooldown_s: float = 10.0
    max_cooldown_s: float = MAX_COOLDOWN_S
    backoff: float = 2.0
    # Latency EWMA weight of the newest sample.
    ewma_alpha: float = 0.3
    # Active probes: unhealthy after N consecutive failures, healthy after M oks.
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2
    interval_s: float = 10.0
    timeout_s: float = 2.0
    # health.path: the probe path for OpenAI-compatible servers. A provider
    # decides how it applies (router.providers.probe_url); core knows no kinds.
    path: str = "/v1/models"
    # Where OpenAI-compatible servers publish their load (Prometheus text:
    # vLLM, SGLang, llama.cpp), read every load_interval_s; "" reads none.
    load_path: str = "/metrics"
    load_interval_s: float = 5.0
    # Warm-up (a backend loading a model after a start): probed this often,
    # for at most this long, before it counts as down; 0 = no warm-up.
    warmup_interval_s: float = 2.0
    warmup_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("HealthPolicy.failure_threshold must be >= 1")
        if self.unhealthy_threshold < 1 or self.healthy_threshold < 1:
            raise ValueError("HealthPolicy probe thresholds must be >= 1")
        if not 0.0 < self.ewma_alpha <= 1.0:
            raise ValueError("HealthPolicy.ewma_alpha must be in (0, 1]")
        if self.cooldown_s <= 0 or self.max_cooldown_s < self.cooldown_s:
            raise ValueError("HealthPolicy needs 0 < cooldown_s <= max_cooldown_s")
        if self.backoff < 1.0:
            raise ValueError("HealthPolicy.backoff must be >= 1")
        if self.interval_s <= 0 or self.timeout_s <= 0 or self.load_interval_s <= 0:
            raise ValueError("HealthPolicy probe interval/timeout must be > 0")
        if self.warmup_interval_s <= 0 or self.warmup_timeout_s < 0:
            raise ValueError("HealthPolicy needs warmup_interval_s > 0 and warmup_timeout_s >= 0")


DEFAULT_POLICY = HealthPolicy()


@dataclass(slots=True)
class BackendState:
    in_flight: int = 0
    ewma_ms: float | None = None
    probe_healthy: bool = True
    probe_ok_streak: int = 0
    probe_fail_streak: int = 0
    last_probe_at: float | None = None
    consecutive_failures: int = 0
    open_until: float | None = None  # None = breaker closed
    cooldown: float = 0.0  # current open period; grows with backoff
    trial: bool = False  # the single half-open trial request is in flight
    total: int = 0
    failures: int = 0
    # What the backend itself last reported (its /metrics, read by the health
    # probe): requests running + waiting there, from every client, good until
    # `reported_until` (monotonic); and its KV-cache usage (0..1) when known.
    reported: int = 0
    reported_until: float = 0.0
    kv_usage: float | None = None
    # Prompt tokens of the answers whose usage said how many came from the
    # backend's prompt cache, and those cached tokens (its hit ratio).
    prompt_tokens: int = 0
    cached_tokens: int = 0
    # Its upstream quota (core.buckets) refused a request: skipped by
    # selection like a full backend until then (monotonic).
    limited_until: float = 0.0
    # Warm-up: `warming` is what readers show (the prober sets it from its
    # window; a web process from the prober's verdict); the rest is the
    # prober's own bookkeeping.
    warming: bool = False
    warm_until: float | None = None
    warm_spent: bool = False  # a window ran out; none opens until unreachable or healthy again
    unreachable_since_ok: bool = False
    policy: HealthPolicy = field(default=DEFAULT_POLICY, repr=False)

    # -- queries -----------------------------------------------------------

    def reported_load(self, now: float) -> int | None:
        """What the backend last reported running and waiting, while fresh."""
        return self.reported if self.reported_until > now else None

    @property
    def cache_hit_ratio(self) -> float | None:
        """Cached ÷ prompt tokens over the answers that reported both."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def usable(self, now: float) -> bool:
        """Probe-healthy and the breaker admits a request at `now`."""
        if not self.probe_healthy:
            return False
        open_until = self.open_until
        if open_until is None:
            return True
        return now >= open_until and not self.trial

    def has_capacity(self, capacity: int | None) -> bool:
        return capacity is None or self.in_flight < capacity

    @property
    def breaker(self) -> str:
        """'closed', 'open' or 'half_open' (for display; `usable` decides)."""
        if self.open_until is None:
            return "closed"
        return "half_open" if self.trial else "open"

    # -- request lifecycle -------------------------------------------------

    def on_start(self) -> None:
        """A request was dispatched here (call right after selection)."""
        self.in_flight += 1
        self.total += 1
        if self.open_until is not None:
            # Selection only admits an open breaker after its cooldown, so
            # this request is the half-open trial; block others until it ends.
            self.trial = True

    def on_success(self, latency_ms: float, now: float) -> None:
        """The backend answered (any non-5xx); `latency_ms` feeds the EWMA."""
        del now  # part of the uniform lifecycle signature
        self._release()
        prev = self.ewma_ms
        if prev is None:
            self.ewma_ms = latency_ms
        else:
            a = self.policy.ewma_alpha
            self.ewma_ms = a * latency_ms + (1.0 - a) * prev
        self.consecutive_failures = 0
        if self.open_until is not None:
            self.open_until = None
            self.trial = False
            self.cooldown = 0.0

    def on_failure(self, now: float) -> None:
        """Connect error, timeout or 5xx before a usable answer."""
        self._release()
        self.failures += 1
        self.consecutive_failures += 1
        policy = self.policy
        if self.open_until is None:
            if self.consecutive_failures >= policy.failure_threshold:
                self.cooldown = policy.cooldown_s
                self.open_until = now + self.cooldown
        elif self.trial:
            self.trial = False
            self.cooldown = min(self.cooldown * policy.backoff, policy.max_cooldown_s)
            self.open_until = now + self.cooldown
        # else: a request started before the breaker opened; already counted.

    def on_cancel(self) -> None:
        """The request ended with no verdict (client left); frees the trial."""
        self._release()
        self.trial = False

    def _release(self) -> None:
        if self.in_flight > 0:
            self.in_flight -= 1

    # -- active probes -----------------------------------------------------

    def probe_interval(self) -> float:
        """How long after its last probe this backend is due another."""
        return self.policy.warmup_interval_s if self.warming else self.policy.interval_s

    def on_probe(self, result: Probe | bool, now: float) -> None:
        if isinstance(result, bool):
            result = Probe.OK if result else Probe.FAILED
        first = self.last_probe_at is None
        self.last_probe_at = now
        policy = self.policy
        if result is Probe.OK:
            self.unreachable_since_ok = self.warm_spent = False
            self.probe_fail_streak = 0
            self.probe_ok_streak += 1
            if self.probe_ok_streak >= policy.healthy_threshold:
                self.probe_healthy = True
                self.warming, self.warm_until = False, None
            return
        if result is Probe.UNREACHABLE:
            self.warm_spent = False  # down or restarting: its next start may warm up
        if self._warm(result, first, now):
            return
        if result is Probe.UNREACHABLE:
            self.unreachable_since_ok = True
        self.probe_ok_streak = 0
        self.probe_fail_streak += 1
        if self.probe_fail_streak >= policy.unhealthy_threshold:
            self.probe_healthy = False

    def _warm(self, result: Probe, first: bool, now: float) -> bool:
        """A failed probe inside (or opening) a warm-up window: True when it
        is not to be counted as a failure."""
        policy = self.policy
        if self.warm_until is None:
            starting = (
                result is Probe.LOADING
                or (first and result in (Probe.UNAVAILABLE, Probe.UNREACHABLE))
                or (result is Probe.UNAVAILABLE and self.unreachable_since_ok)
            )
            if not starting or self.warm_spent or policy.warmup_timeout_s <= 0:
                return False
            self.warm_until = now + policy.warmup_timeout_s
        elif now >= self.warm_until:
            # It never came up: down, at once.
            self.warming, self.warm_until, self.warm_spent = False, None, True
            self.unreachable_since_ok = False
            self.probe_healthy, self.probe_ok_streak = False, 0
            self.probe_fail_streak = max(self.probe_fail_streak, policy.unhealthy_threshold)
            return True
        self.warming, self.probe_healthy = True, False
        self.probe_ok_streak = 0
        return True


# What a reader shows for a backend no request or probe has touched (it has
# no state, and reading one must not make one): read only, never mutated.
IDLE = BackendState()


class StateTable:
    """name -> BackendState for one process; states outlive snapshot swaps."""

    __slots__ = ("_policy", "_states")

    def __init__(self, policy: HealthPolicy = DEFAULT_POLICY) -> None:
        self._policy = policy
        self._states: dict[str, BackendState] = {}

    @property
    def policy(self) -> HealthPolicy:
        return self._policy

    def set_policy(self, policy: HealthPolicy) -> None:
        """Apply a reloaded policy to existing and future states."""
        self._policy = policy
        for state in self._states.values():
            state.policy = policy

    def get(self, name: str) -> BackendState:
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = BackendState(policy=self._policy)
        return state

    def peek(self, name: str) -> BackendState | None:
        return self._states.get(name)

    def retain(self, names: Iterable[str]) -> None:
        """Drop the state of every backend not in `names` (removed backends).
        A set or a mapping (a snapshot's `backends`) is asked as it is: the
        cost follows the states held, not the cluster."""
        keep = names if isinstance(names, AbstractSet | Mapping) else set(names)
        for name in [n for n in self._states if n not in keep]:
            del self._states[name]

    def items(self) -> Iterator[tuple[str, BackendState]]:
        return iter(list(self._states.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._states

    def __len__(self) -> int:
        return len(self._states)
