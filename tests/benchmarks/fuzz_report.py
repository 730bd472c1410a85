"""What a fuzz run found (`fuzz.py`), as it prints it: each answer's verdict, the
findings grouped with a repro each, the proxy's log, memory and `/health/live`."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from tests.benchmarks.fuzz_bodies import MODELS, PATHS
from tests.benchmarks.fuzz_upstream import UNKNOWN_ERROR
from tests.benchmarks.load import quantile

PROBE_EVERY = 0.05  # seconds between two `/health/live` probes
WARM_UP = 20  # valid requests before the fresh RSS is read
SETTLE = 10.0  # seconds after the run before RSS is read again
# The run stops when the proxy's RSS passes this (MiB): the machine is shared.
MEMORY_GUARD = 8192.0


@dataclass
class Outcome:
    index: int
    kind: str
    path: str
    model: str
    stream: bool
    session: bool
    upstream: str | None
    status: int | None
    verdict: str  # "2xx", "4xx", "5xx", "event 4xx", "event 5xx" or "dropped: why"
    answer: bytes  # its first 200 bytes (an errored stream's: the error event's)
    request: bytes  # the body's first 200 bytes
    seconds: float
    leak: bytes | None = None  # what in an error answer gave away the proxy's insides

    @property
    def dropped(self) -> bool:
        return self.verdict.startswith("dropped")

    @property
    def unexpected_5xx(self) -> bool:
        """A 5xx (or a stream's server error event) the request did not ask for: a
        request whose upstream misbehaved may be answered 502, 504 or an error event,
        and the upstream's own 500 with its message."""
        if self.verdict not in ("5xx", "event 5xx"):
            return False
        if not self.upstream:
            return True
        if self.verdict == "event 5xx" or self.status in (502, 504):
            return False
        return not (self.status == 500 and UNKNOWN_ERROR.encode() in self.answer)

    def finding(self) -> str | None:
        if self.unexpected_5xx:
            return "5xx"
        if self.dropped:
            return "dropped"
        return "leak" if self.leak else None


@dataclass
class Alone:
    """A case sent again with nothing else in flight."""

    outcome: Outcome
    logged: list[str]  # what the proxy logged meanwhile (`telling`)
    health: float  # the longest `/health/live` took meanwhile, seconds


@dataclass
class Run:
    outcomes: list[Outcome]
    seconds: float
    fresh: float
    after: float
    settled: float
    peak: float
    probes: list[float]
    probe_failures: int
    upstream: dict[str, int]
    log: str
    confirmed: dict[int, Alone]
    warm: Counter[str]
    stopped: bool  # by `MEMORY_GUARD`
    ended: int | None  # the proxy's exit code, if it ended during the run


# -- what the proxy logged -----------------------------------------------------------------


def exception_lines(text: str) -> Counter[str]:
    """Each traceback's last line (the exception), counted."""
    found: Counter[str] = Counter()
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            rest = lines[number + 1 :]
            end = next((x for x in rest if x and not x.startswith((" ", "\t"))), "?")
            found[end[:160]] += 1
    return found


def telling(text: str) -> list[str]:
    """The lines of a log excerpt worth showing: exceptions, warnings, errors."""
    shown = [f"exception: {line}" for line in exception_lines(text)]
    shown += [
        line[:240]
        for line in text.splitlines()
        if (" WARNING " in line or " ERROR " in line) and "Traceback" not in line
    ]
    return shown[:4]


# -- the report ----------------------------------------------------------------------------


def signature(outcome: Outcome) -> str:
    """What an answer said, without its numbers (its error message, or why it dropped)."""
    text = outcome.answer
    found = re.search(rb'"message":\s*"((?:[^"\\]|\\.){0,90})', text)
    said = found[1].decode(errors="replace") if found else text[:60].decode(errors="replace")
    return re.sub(r"\d+", "#", said)


def groups(outcomes: list[Outcome]) -> dict[tuple[str, ...], list[Outcome]]:
    """Findings grouped by what, where and what the answer said."""
    out: dict[tuple[str, ...], list[Outcome]] = {}
    for outcome in outcomes:
        finding = outcome.finding()
        if finding is None:
            continue
        status = str(outcome.status) if outcome.status is not None else "-"
        key = (finding, outcome.verdict, status, outcome.path, outcome.model, signature(outcome))
        out.setdefault(key, []).append(outcome)
    return out


def report(result: Run, count: int, seed: int, concurrency: int) -> str:
    outcomes = result.outcomes
    verdicts = ("2xx", "4xx", "5xx", "event 4xx", "event 5xx")
    sent = len(outcomes)
    lines = [
        f"fuzz: {sent:,} requests (seed {seed}), {concurrency} in flight, in"
        f" {result.seconds:.0f} s ({sent / result.seconds:.1f}/s); context-proxy serve"
        " from .venv-deploy, one worker, default settings; models: " + ", ".join(MODELS),
        f"{'door':<28}{'sent':>7}" + "".join(f"{v:>10}" for v in verdicts) + f"{'dropped':>9}",
    ]
    if result.stopped:
        lines.append(
            f"STOPPED after {sent:,} of {count:,} requests: the proxy's RSS passed"
            f" {MEMORY_GUARD:.0f} MiB (the guard of a shared machine)"
        )
    if result.ended is not None:
        lines.append(f"THE PROXY ENDED during the run (exit code {result.ended})")
    for path in [*PATHS.values(), "all"]:
        mine = [o for o in outcomes if path in (o.path, "all")]
        row = [sum(o.verdict == v for o in mine) for v in verdicts]
        lines.append(
            f"{path:<28}{len(mine):>7}"
            + "".join(f"{n:>10}" for n in row)
            + f"{sum(o.dropped for o in mine):>9}"
        )
    kinds = Counter(o.kind.split(":")[0] for o in outcomes)
    lines.append("sent: " + ", ".join(f"{n:,} {kind}" for kind, n in kinds.most_common()))
    unexpected = [o for o in outcomes if o.unexpected_5xx]
    dropped = [o for o in outcomes if o.dropped]
    leaks = [o for o in outcomes if o.leak]
    allowed = sum(o.verdict in ("5xx", "event 5xx") and not o.unexpected_5xx for o in outcomes)
    lines += [
        f"unexpected 5xx: {len(unexpected)} (target 0); {allowed} answers 502/504 or an"
        " error event to a request whose upstream misbehaved (as they should)",
        f"dropped connections: {len(dropped)} (target 0)"
        + "".join(f"; {n} {why[9:]}" for why, n in Counter(o.verdict for o in dropped).items()),
        f"answers with a traceback, module path or LiteLLM name: {len(leaks)} (target 0)",
    ]
    for name in ("valid", "mutated"):
        said = Counter(o.verdict for o in outcomes if o.kind.split(":")[0] == name)
        shown = ", ".join(f"{n} {v}" for v, n in said.most_common()) or "none"
        lines.append(f"{name} bodies: {shown}")
    probes = result.probes
    lines += [
        f"RSS: fresh {result.fresh:.0f} MiB (after start-up and {WARM_UP} valid requests:"
        f" {', '.join(f'{n} {v}' for v, n in result.warm.items())}), after"
        f" the run {result.after:.0f} MiB ({result.after / result.fresh:.2f}x fresh),"
        f" {SETTLE:.0f} s later {result.settled:.0f} MiB ({result.settled / result.fresh:.2f}x"
        f" fresh), peak {result.peak:.0f} MiB",
        f"/health/live every {PROBE_EVERY * 1000:.0f} ms during the run ({len(probes)} probes,"
        f" {result.probe_failures} failed): p50 {quantile(probes, 0.5) * 1000:.0f} ms, p99"
        f" {quantile(probes, 0.99) * 1000:.0f} ms, max {max(probes, default=0) * 1000:.0f} ms;"
        f" {sum(p > 0.1 for p in probes)} over 100 ms, {sum(p > 1 for p in probes)} over 1 s",
        "the upstream: " + ", ".join(f"{n} {k}" for k, n in sorted(result.upstream.items())),
    ]
    lines += by_kind(outcomes)
    exceptions = exception_lines(result.log)
    lines.append(f"the proxy logged {sum(exceptions.values())} tracebacks")
    lines += [f"  {n:5d}  {line}" for line, n in exceptions.most_common(15)]
    lines += findings(outcomes, result.confirmed, seed)
    return "\n".join(lines)


def by_kind(outcomes: list[Outcome]) -> list[str]:
    """Each repro and each way the upstream misbehaved: how it was answered, how long
    the slowest answer took."""
    kinds: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.kind.startswith(("repro", "upstream")):
            kinds.setdefault(outcome.kind, []).append(outcome)
    lines = ["repros and misbehaving upstreams, by kind: answers (status), slowest"]
    for kind, members in sorted(kinds.items()):
        said = Counter(f"{o.verdict} ({o.status})" for o in members).most_common()
        slowest = max(o.seconds for o in members)
        lines.append(f"  {kind}: " + ", ".join(f"{n} {v}" for v, n in said) + f"; {slowest:.1f} s")
    return lines


def findings(outcomes: list[Outcome], confirmed: dict[int, Alone], seed: int) -> list[str]:
    found = sorted(groups(outcomes).items(), key=lambda item: -len(item[1]))
    lines = [f"findings: {len(found)} groups (largest first; each with its first case's repro)"]
    for (finding, verdict, status, path, model, said), members in found:
        first = members[0]
        kinds = Counter(o.kind for o in members).most_common(3)
        lines += [
            f"[{finding}] {verdict} ({status}) on {path} to {model} x{len(members)}: {said}",
            "    kinds: " + "; ".join(f"{kind} x{n}" for kind, n in kinds),
            f"    case {first.index} (--seed {seed} --case {first.index}):"
            f" {'streamed' if first.stream else 'whole'},"
            f" {'session' if first.session else 'no session'}"
            + (f", upstream {first.upstream}" if first.upstream else ""),
            f"    request: {first.request!r}",
            f"    answer: {first.answer!r}",
        ]
        if first.leak:
            lines.append(f"    gave away: {first.leak!r}")
        if first.index in confirmed:
            again = confirmed[first.index]
            lines.append(
                f"    alone: {again.outcome.verdict} ({again.outcome.status}) in"
                f" {again.outcome.seconds:.1f} s, /health/live at most"
                f" {again.health * 1000:.0f} ms meanwhile"
            )
            lines += [f"    log: {line}" for line in again.logged]
    return lines
