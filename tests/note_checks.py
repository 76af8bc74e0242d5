"""Every note of a report held to the records it speaks of: ``problems(report)`` lists
each note whose claim the report's own records do not bear out, for each kind of note that makes a
claim about them. Notes about events (a refused request, a multi-worker cluster, a log directory)
claim nothing about the records and are not checked here."""

import re

from xla_keras.report.model import ESTIMATED_BECAUSE

_NAMED = re.compile(r"\b(train|test|predict) step (\d+)")
_MORE = re.compile(r" and (\d+) more")


def _rows(signature):
    rows = {leaf["shape"][0] for leaf in signature if leaf["shape"]}
    return rows.pop() if len(rows) == 1 else None


def _estimates(report, notes):
    """A note on estimated seconds per reason, naming exactly the records estimated for it."""
    out = []
    records = [c for c in report["compilations"] if c["source"] == "timing"]
    by_reason = {}
    for c in records:
        by_reason.setdefault(c.get("estimated_because") or "unprobed", []).append(c)
    said = [n for n in notes if "estimated from step time" in n]
    for reason, estimated in by_reason.items():
        mine = [n for n in said if ESTIMATED_BECAUSE[reason] in n]
        if len(mine) != 1:
            out.append(f"{len(estimated)} records estimated because {reason!r}: {len(mine)} notes say so")
            continue
        note = mine[0]
        named = [(p, int(s)) for p, s in _NAMED.findall(note.split(": ", 1)[1])]
        more = _MORE.search(note)
        expected = [(c["phase"], c["step"]) for c in estimated]
        if named != expected[:6] or (int(more.group(1)) if more else 0) != len(expected) - len(named):
            out.append(f"note names {named} (+{more and more.group(1)}), the records are {expected}: {note}")
        if not note.startswith(f"{len(estimated)} compile time(s)"):
            out.append(f"note counts another number than the {len(estimated)} records: {note}")
    for note in said:
        if not any(ESTIMATED_BECAUSE[reason] in note for reason in by_reason):
            out.append(f"a note on estimates with no estimated record behind it: {note}")
    return out


def problems(report):
    """The notes of ``report`` (a ``to_dict()``) that its records contradict."""
    notes = report["notes"]
    out = _estimates(report, notes)
    count, records = report["compilation_count"], report["compilations"]
    for note in notes:
        ragged = re.match(r"(\w+): XLA compiled (\d+) module\(s\) for ragged batches", note)
        if ragged and count[ragged.group(1)] < int(ragged.group(2)):
            out.append(f"{note!r}: the phase has {count[ragged.group(1)]} compiles")
        rebuilt = re.match(r"(\w+): the step function was rebuilt", note)
        if rebuilt and not count[rebuilt.group(1)]:
            out.append(f"{note!r}: the phase compiled nothing")
        partial = re.match(r"(\w+): the last batch of each (?:epoch|run) has (\d+) rows instead of (\d+)", note)
        if partial:
            phase, rows = partial.group(1), int(partial.group(2))
            kept = [c for c in records if c["phase"] == phase]
            if len(kept) == count[phase] and not any(c["last_batch"] and _rows(c["signature"]) == rows for c in kept):
                out.append(f"{note!r}: no compile of a {rows}-row last batch in the records")
        if note.startswith("validation batches are shaped unlike") and not count["test"]:
            out.append(f"{note!r}: validation compiled nothing")
        if note.startswith("break-even measured by compare()") and report["break_even_steps"] is None:
            out.append(f"{note!r}: no break-even in the report")
        if "the profiler was busy" in note and "timing" not in report["probe"]:
            out.append(f"{note!r}: the probe label is {report['probe']!r}")
        if "profiler traces were written" in note and not report["traces"]:
            out.append(f"{note!r}: no trace in the report")
    return out
