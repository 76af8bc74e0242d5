"""The partial last batch of each epoch (run): what the fix does with it, in words. Pure.

Training drops a partial last batch (one fewer compile, a few examples unseen
per epoch); validation and predict keep every example: the last batch's rows
are padded and weigh nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from xla_keras.storms.detection import ShapeHistory, batch_rows

REMAINDER = {"train": "drop", "test": "pad", "predict": "pad"}


def examples_words(n: int) -> str:
    return f"{n} example" + ("" if n == 1 else "s")


@dataclass
class Remainder:
    """The partial last batch of each epoch (run), and what the fix does with it."""

    rows: int
    batch_size: int
    rows_per_run: Optional[int]  # rows of a whole epoch / run, when runs ended

    def text(self, phase: str) -> str:
        pad = self.batch_size - self.rows
        if REMAINDER[phase] == "drop":
            return (
                f" The last batch of each epoch also has {self.rows} rows instead of {self.batch_size} (one "
                f"extra compile): the fix drops it, so {examples_words(self.rows)} per epoch are not trained on "
                "(different ones each epoch when the data is shuffled)."
            )
        share = f" ({pad / (self.rows_per_run + pad):.1%} of a run's rows)" if self.rows_per_run else ""
        if phase != "test":
            return (
                f" The last batch of each run also has {self.rows} rows instead of {self.batch_size} (one "
                f"extra compile): the fix pads it to {self.batch_size} rows with copies of its last row, so "
                f"predict returns {pad} extra rows at the end: keep the first {self.rows_per_run or 'n'} "
                "(drop_remainder=True would lose predictions)."
            )
        return (
            f" The last batch of each run also has {self.rows} rows instead of {self.batch_size} (one extra "
            f"compile): the fix pads it to {self.batch_size} rows (copies of its last row) that weigh nothing "
            "(sample_weight 0), keeping every example (metrics passed as compile(weighted_metrics=...) stay "
            f"exact; unweighted metrics and Keras's loss tracker count the {pad} padded rows{share}); "
            "drop_remainder=True would drop examples from the results."
        )


def remainder_of(phase: str, history: ShapeHistory, partial: Dict[int, Tuple[int, int]]) -> Optional[Remainder]:
    if not partial:
        return None
    rows, full = next(iter(partial.values()))
    total = sum((batch_rows(sig) or 0) * history.batches.get(fp, 0) for fp, sig in history.signatures.items())
    return Remainder(rows, full, total // history.runs if history.runs else None)
