"""The capability matrix: per op, backends by algorithms, built from registered metadata only."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from ._registry import Registry
from ._settings import normalise
from ._version import API_VERSION, __version__

SCHEMA = "algoswap-capabilities"
SCHEMA_VERSION = 1
YES, NO = "✓", "✗"
SPREADS = "~"  # after YES: the implementation registered nan="spreads"
SPREADS_LEGEND = (f"{SPREADS} spreads NaN: a NaN or inf input may also make other outputs NaN (FFT and Winograd, "
                  "or a library's pick that may be one); it never loses one")
LEGEND = (f"{YES} offered   {YES}{SPREADS} offered, spreads NaN (see the note under its table)   {NO} not offered   "
          f"{NO}* declared unsupported or not importable (the reason under its table)")
DECLARED = "declared"  # a backend's status in a matrix built with declared=True: not probed
RUNNABLE = ("available", DECLARED)  # statuses shown without "(unavailable)"
SUMMARY_LEGEND = "each cell: the algorithms the backend offers for the op; - none"


@dataclass(frozen=True)
class Cell:
    """Whether (op, algorithm, backend) is offered; for a declared refusal, the reason; for an
    offered one, how it treats NaN and inf ("exact" or "spreads", see ``ImplRecord``), and what else
    its registration declared: layout, priority, description and kernel name (a plain-string kernel)."""

    supported: bool
    dtypes: tuple[str, ...] = ()
    reason: str | None = None
    nan: str | None = None
    layout: str | None = None
    priority: int = 0
    description: str = ""
    kernel: str | None = None


@dataclass(frozen=True)
class BackendStatus:
    name: str
    device: str
    memory: str
    distribution: str
    version: str
    status: str
    reason: str | None


@dataclass
class OpTable:
    family: str
    algorithms: list[str]
    rows: dict[str, dict[str, Cell]] = field(default_factory=dict)


class CapabilityMatrix:
    """What runs where. Render with ``to_text``/``to_markdown``/``to_rst``/``to_json``; query with
    ``supports``, ``backends_for`` and ``algorithms_for``."""

    def __init__(self, tables: dict[str, OpTable], backends: dict[str, BackendStatus], plugins: list[dict[str, Any]]) -> None:
        self.tables = tables
        self.backends = backends
        self.plugins = plugins

    def supports(self, op: str, algorithm: str, backend: str) -> bool:
        """Whether ``backend`` registered ``algorithm`` for ``op`` (availability aside)."""
        table = self.tables.get(op)
        return bool(table and table.rows.get(backend, {}).get(algorithm, Cell(False)).supported)

    def backends_for(self, op: str, algorithm: str, available: bool = False) -> list[str]:
        """Backends offering ``algorithm`` for ``op`` (only available ones if asked)."""
        names = [b for b in self.tables[op].rows if self.supports(op, algorithm, b)] if op in self.tables else []
        return [b for b in names if not available or self.backends[b].status == "available"]

    def algorithms_for(self, op: str, backend: str | None = None) -> list[str]:
        """Algorithms of ``op``, on one backend or on any."""
        table = self.tables.get(op)
        if table is None:
            return []
        return [a for a in table.algorithms if any(self.supports(op, a, b) for b in table.rows if backend in (None, b))]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (schema ``algoswap-capabilities``, version 1; see the README)."""
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "algoswap_version": __version__,
            "api_version": API_VERSION,
            "backends": {name: _without_name(asdict(status)) for name, status in self.backends.items()},
            "plugins": self.plugins,
            "ops": {
                op: {
                    "family": table.family,
                    "algorithms": table.algorithms,
                    "backends": {b: {a: _cell_dict(c) for a, c in cells.items()} for b, cells in table.rows.items()},
                }
                for op, table in self.tables.items()
            },
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def _row_label(self, backend: str) -> str:
        return backend if self.backends[backend].status in RUNNABLE else f"{backend} (unavailable)"

    def unavailable(self) -> dict[str, str]:
        """The backends shown that cannot run here, each with the reason why."""
        return {name: status.reason or status.status for name, status in self.backends.items() if status.status not in RUNNABLE}

    def _unavailable_note(self) -> list[str]:
        """Said once below the tables rather than in every row."""
        reasons = self.unavailable()
        if not reasons:
            return []
        return ["", "unavailable backends (what they would offer is shown; they cannot run here):"] + [
            f"  {name}: {reason}" for name, reason in reasons.items()]

    def _grid(self, op: str) -> tuple[list[str], list[list[str]], list[str]]:
        table = self.tables[op]
        header = ["backend"] + table.algorithms
        rows, notes = [], []
        for backend, cells in table.rows.items():
            marks = [_mark(cells[algorithm]) for algorithm in table.algorithms]
            notes += [f"* {backend}:{a}: {cells[a].reason}" for a in table.algorithms if cells[a].reason]
            rows.append([self._row_label(backend)] + marks)
        if any(cell.nan == "spreads" for cells in table.rows.values() for cell in cells.values()):
            notes.append(SPREADS_LEGEND)
        return header, rows, notes

    def to_text(self) -> str:
        blocks = []
        for op in self.tables:
            header, rows, notes = self._grid(op)
            widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
            lines = [op] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]
            blocks.append("\n".join(lines + notes))
        return "\n".join(["\n\n".join(blocks)] + self._unavailable_note()) if blocks else "(no ops match)"

    def to_markdown(self) -> str:
        blocks = []
        for op in self.tables:
            header, rows, notes = self._grid(op)
            lines = [f"### {op}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
            blocks.append("\n".join(lines + ([""] + notes if notes else [])))
        return "\n".join(["\n\n".join(blocks)] + self._unavailable_note())

    def to_rst(self) -> str:
        blocks = []
        for op in self.tables:
            header, rows, notes = self._grid(op)
            lines = [op, "~" * len(op), "", ".. list-table::", "   :header-rows: 1", "   :stub-columns: 1", ""]
            for row in [header] + rows:
                lines.append(f"   * - {row[0]}")
                lines += [f"     - {c}" for c in row[1:]]
            blocks.append("\n".join(lines + ([""] + notes if notes else [])))
        return "\n".join(["\n\n".join(blocks)] + self._unavailable_note())

    def to_summary(self) -> str:
        """One line per op: for each backend, the algorithms it offers ('-' for none)."""
        backends = list(self.backends)
        rows = [["op"] + [self._row_label(b) for b in backends]]
        for op, table in self.tables.items():
            offered = [" ".join(a for a, c in table.rows[b].items() if c.supported) or "-" for b in backends]
            rows.append([op] + offered)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines + self._unavailable_note())

    def to_declared_markdown(self) -> str:
        """Per op, a table of its implementations (backend:algorithm) with what each declared (dtypes,
        layout, NaN behaviour, priority, description), then the declared-unsupported ones with their
        reasons. Meant for a matrix built with ``declared=True`` (docs/capabilities.md): it shows no
        availability."""
        blocks = []
        for op, table in self.tables.items():
            offered = [(f"{b}:{a}", c) for b, cells in table.rows.items() for a, c in cells.items() if c.supported]
            refused = [(f"{b}:{a}", c) for b, cells in table.rows.items() for a, c in cells.items() if c.reason]
            if not offered and not refused:
                continue
            lines = [f"### {op}", "", f"Family: {table.family}."]
            if offered:
                lines += ["", "| implementation | dtypes | layout | NaN | priority | description |", "|---|---|---|---|---:|---|"]
                lines += [f"| `{name}` | {', '.join(c.dtypes)} | {c.layout} | {c.nan} | {c.priority} | {_md(_described(c))} |"
                          for name, c in offered]
            if refused:
                lines += ["", "Declared unsupported:", ""] + [f"- `{name}`: {_md(c.reason or '')}" for name, c in refused]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    def __str__(self) -> str:
        return self.to_text()


def _without_name(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "name"}


def _mark(cell: Cell) -> str:
    if cell.supported:
        return YES + (SPREADS if cell.nan == "spreads" else "")
    return NO + ("*" if cell.reason else "")


def _described(cell: Cell) -> str:
    """The implementation's description, else the name of the kernel it reports (in italics)."""
    return cell.description or (f"*{cell.kernel}*" if cell.kernel else "")


def _md(text: str) -> str:
    """Text for one Markdown table cell or list item: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _cell_dict(cell: Cell) -> dict[str, Any]:
    return {"supported": cell.supported, "dtypes": list(cell.dtypes), "reason": cell.reason, "nan": cell.nan}


def build(registry: Registry, op: str | None = None, backend: str | None = None, available: bool = False,
          declared: bool = False, distributions: Iterable[str] | None = None) -> CapabilityMatrix:
    """Build the matrix from the registry (filters: one op, one backend, available backends only, the
    backends of some distributions only). ``declared``: only what the plugins registered, the same on
    every machine: no backend is probed (status "declared") and no implementation's references are
    checked for import problems."""
    wanted = None if distributions is None else {normalise(d) for d in distributions}
    records = {name: r for name, r in registry.backends.items() if wanted is None or normalise(r.distribution) in wanted}
    statuses = {name: _declared_status(record) if declared else _status(record) for name, record in records.items()}
    shown = [b for b in statuses if backend in (None, b) and (not available or statuses[b].status == "available")]
    ops = [o for o in registry.ops if op in (None, o)]
    tables = {o: _table(registry, o, shown, declared) for o in ops}
    plugins = [
        {"name": p.name, "distribution": p.distribution, "version": p.version, "status": p.status,
         "error": p.error or None, "backends": list(p.backends)}
        for p in registry.plugins
    ]
    return CapabilityMatrix(tables, {b: statuses[b] for b in shown}, plugins)


def _status(record: Any) -> BackendStatus:
    available = record.availability()
    return BackendStatus(
        record.name, record.device_in_use, record.memory.name, record.distribution, record.version,
        record.status, None if available is True else str(available),
    )


def _declared_status(record: Any) -> BackendStatus:
    return BackendStatus(record.name, record.device, record.memory.name, record.distribution, record.version, DECLARED, None)


def _table(registry: Registry, op: str, backends: list[str], declared: bool = False) -> OpTable:
    impls = [i for i in registry.implementations(op) if i.backend in backends]
    refused = [u for u in registry.unsupported.values() if u.op == op and u.backend in backends]
    algorithms = sorted({i.algorithm for i in impls} | {u.algorithm for u in refused})
    table = OpTable(registry.ops[op].family, algorithms)
    for name in backends:
        table.rows[name] = {a: Cell(False) for a in algorithms}
    for u in refused:
        table.rows[u.backend][u.algorithm] = Cell(False, reason=u.reason)
    for i in impls:
        problem = None if declared else i.import_problem()
        table.rows[i.backend][i.algorithm] = (Cell(False, reason=problem) if problem else Cell(
            True, tuple(sorted(i.dtypes)), nan=i.nan, layout=i.layout, priority=i.priority, description=i.description,
            kernel=i.kernel if isinstance(i.kernel, str) else None))
    return table
