"""``Executor.explain()``: the plan of a subgraph as a table people can read."""

from __future__ import annotations

from ._program import Program, Step

class PlanText(str):
    """The plan as text; shown as a table (not a quoted string) at the Python prompt."""

    def __repr__(self) -> str:
        return str(self)


_COLUMNS = ("node", "op", "implementation", "device", "memory", "output shape", "bytes", "inputs")


def _row(step: Step, names: dict[int, str]) -> tuple[str, ...]:
    implementation = step.note if step.is_transfer else f"{step.backend}:{step.algorithm}" if step.backend else step.kind
    inputs = ", ".join("-" if slot is None else names.get(slot, "?") for slot in step.inputs)
    size = "in place" if step.alias else f"{step.nbytes:,}"
    return (step.name, step.op, implementation, step.device, step.memory.name, str(step.shape), size, inputs)


def explain_program(program: Program) -> PlanText:
    names = {slot: node.name for slot, node in program.sources} | {slot: "(planned)" for slot, _ in program.fixed}
    rows = []
    for step in program.steps:
        rows.append(_row(step, names))
        names[step.output] = step.name
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(_COLUMNS)]
    lines = [f"subgraph {program.subgraph!r}: {len(program.steps)} steps, {len(program.transfers)} transfers"]
    lines.append("  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths)).rstrip())
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if program.planned:
        lines.append("computed once, when planning, from weights alone: "
                     + "; ".join(f"{s.name} ({s.op}, {s.backend}:{s.algorithm})" for s in program.planned))
    if program.transfers:
        lines.append("transfers: " + "; ".join(f"{s.name} ({s.note})" for s in program.transfers))
    else:
        lines.append("transfers: none")
    for space in sorted({s.name for s in program.kept.values()}):
        kept = [names[slot] for slot, where in program.kept.items() if where.name == space]
        lines.append(f"kept in {space} memory between runs (updated there in place): {', '.join(kept)}")
    lines.append(f"memory: {program.memory()}")
    return PlanText("\n".join(lines))
