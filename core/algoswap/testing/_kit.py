"""The kit's plan and run: which checks a backend's implementations get, and their failures as records
naming the op, the implementation, the case, the seed and the command that replays them.

Every check draws its inputs from the run's seed and its own id, so that one op's checks, replayed alone
(``--ops OP --seed N``), see the numbers they saw in the whole run."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

import numpy as np

import algoswap
from algoswap._records import UnsupportedRecord

from ._cases import cases_for, checked_dtypes, skip_reason
from ._conformance import check_conformance
from ._gradients import check_gradients, gradient_dtype
from ._nonfinite_check import TOLERANCE, Oracle, check_nonfinite, reference_oracle
from ._refusals import check_refusal
from ._tolerance import UNIT_ROUNDOFF

KINDS = ("values", "non-finite", "gradients", "refusal")
Subject = Union[algoswap.ImplRecord, UnsupportedRecord]


def fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def replay_command(backends: Sequence[str], op: str, seed: int) -> str:
    return f"python -m algoswap.testing {' '.join(backends)} --ops {op} --seed {seed}"


@dataclass(frozen=True)
class Failure:
    """One check that failed: what it checked, on which implementation and dtype, what went wrong on which
    case (its shapes and attributes), and how to replay it."""

    kind: str
    op: str
    implementation: str
    dtype: str
    problems: tuple[str, ...]
    seed: int
    replay: str

    def __str__(self) -> str:
        lines = [f"{self.op} {self.implementation} ({self.dtype}), {self.kind}: {len(self.problems)} failed"]
        lines += [f"  {problem}" for problem in self.problems]
        return "\n".join(lines + [f"  seed {self.seed}; replay: {self.replay}"])


@dataclass(frozen=True)
class Check:
    """One kind of check of one implementation (or declared refusal) in one dtype."""

    kind: str
    subject: Subject
    dtype: str
    skip: str = ""

    @property
    def op(self) -> str:
        return self.subject.op

    @property
    def qualified(self) -> str:
        return f"{self.subject.backend}:{self.subject.algorithm}"

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.op}-{self.qualified}-{self.dtype}"

    def rng(self, seed: int) -> np.random.Generator:
        return np.random.default_rng([seed, zlib.crc32(self.id.encode())])

    def run(self, seed: int, oracle: Oracle = reference_oracle, replay: str = "") -> Failure | None:
        """None if the check passes, else its failure (a check that finds no case to run fails too)."""
        ran, problems = self._outcome(seed, oracle)
        if not ran and not problems:
            problems = [f"no case of {self.op} could be checked (does its predicate refuse them all?)"]
        if not problems:
            return None
        return Failure(self.kind, self.op, self.qualified, self.dtype, tuple(problems), seed,
                       replay or replay_command([self.subject.backend], self.op, seed))

    def _outcome(self, seed: int, oracle: Oracle) -> tuple[int, list[str]]:
        subject = self.subject
        try:
            if isinstance(subject, UnsupportedRecord):
                return check_refusal(subject, self.dtype)
            if self.kind == "values":
                return check_conformance(subject, self.dtype, self.rng(seed))
            if self.kind == "non-finite":
                return check_nonfinite(subject, self.dtype, seed, oracle)
            forward = algoswap.registry().spec(subject.op).grad_of
            return check_gradients(str(forward), self.rng(seed), subject)
        except algoswap.AlgoswapError as error:
            return 0, [f"raised {type(error).__name__}: {error}"]
        except Exception as error:
            return 0, [f"raised {type(error).__name__} (not an algoswap error): {error}"]


def _implementation_checks(impl: algoswap.ImplRecord) -> list[Check]:
    checks = [Check("values", impl, d, skip_reason(impl, d)) for d in checked_dtypes(impl, tuple(UNIT_ROUNDOFF), True)]
    checks += [Check("non-finite", impl, d, skip_reason(impl, d)) for d in checked_dtypes(impl, tuple(TOLERANCE))]
    forward = algoswap.registry().spec(impl.op).grad_of
    dtype = gradient_dtype(impl)
    if forward and dtype and any(rule.op == impl.op for rule in algoswap.registry().spec(forward).gradients):
        checks.append(Check("gradients", impl, dtype, skip_reason(impl, dtype)))
    return checks


def plan(backends: Sequence[str] | None = None, ops: Sequence[str] | None = None) -> list[Check]:
    """Every check of the implementations and declared refusals of ``backends`` (None: every registered
    backend), restricted to ``ops`` if given. Unknown backends and ops are refused (an algoswap error)."""
    registry = algoswap.registry()
    for name in backends or ():
        if name not in registry.backends:
            raise algoswap.NoImplementationError(f"algoswap.testing: {registry.absent_backend(name)}")
    for op in ops or ():
        registry.spec(op)
    chosen = set(backends or registry.backends)
    wanted = set(ops) if ops else None
    checks: list[Check] = []
    for impl in registry.implementations():
        if impl.backend in chosen and (wanted is None or impl.op in wanted):
            checks += _implementation_checks(impl)
    for refusal in registry.unsupported.values():
        if refusal.backend in chosen and (wanted is None or refusal.op in wanted):
            checks.append(Check("refusal", refusal, "float32", skip_reason(refusal, "float32")))
    return [c if c.skip or cases_for(c.op) else Check(c.kind, c.subject, c.dtype, f"the kit has no cases for op {c.op!r}")
            for c in checks]


@dataclass
class Report:
    """What a run of the kit found."""

    backends: tuple[str, ...]
    seed: int
    passed: int = 0
    failures: list[Failure] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (check id, why)

    @property
    def ok(self) -> bool:
        return self.passed > 0 and not self.failures

    def summary(self) -> str:
        return (f"{self.passed} checks passed, {len(self.failures)} failed, {len(self.skipped)} skipped "
                f"(seed {self.seed}; replay: python -m algoswap.testing {' '.join(self.backends)} --seed {self.seed})")

    def text(self) -> str:
        """Every failure, the reasons of skipped checks grouped, and the summary."""
        reasons = sorted({why for _, why in self.skipped})
        lines = [str(f) for f in self.failures] + [f"skipped: {why}" for why in reasons]
        if self.passed == 0 and not self.failures:
            lines.append(f"nothing was checked on {', '.join(self.backends)}")
        return "\n".join(lines + [self.summary()])


def run(backends: Sequence[str], *, ops: Sequence[str] | None = None, seed: int | None = None, first_failure: bool = False,
        oracle: Oracle = reference_oracle, progress: Callable[[Check, Failure | None], None] | None = None) -> Report:
    """Run every check of ``backends`` (restricted to ``ops``) on inputs drawn from ``seed`` (None: a fresh
    one); stop at the first failure if ``first_failure``. ``progress`` is told each check's outcome."""
    report = Report(tuple(backends), fresh_seed() if seed is None else seed)
    for check in plan(backends, ops):
        if check.skip:
            report.skipped.append((check.id, check.skip))
            continue
        failure = check.run(report.seed, oracle, replay_command(backends, check.op, report.seed))
        if progress is not None:
            progress(check, failure)
        if failure is None:
            report.passed += 1
            continue
        report.failures.append(failure)
        if first_failure:
            break
    return report


def assert_conformant(backend: str, *, ops: Sequence[str] | None = None, seed: int | None = None) -> None:
    """Run the kit on ``backend`` in-process; raise AssertionError listing every failure (and when nothing
    could be checked, e.g. the backend is unavailable here)."""
    report = run([backend], ops=ops, seed=seed)
    if not report.ok:
        raise AssertionError(f"algoswap.testing on {backend}:\n{report.text()}")
