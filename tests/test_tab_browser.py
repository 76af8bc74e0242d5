"""The XLA tab as a user sees it: real fits write a logdir (a known shape sequence with a partial
last batch, a storm, compare() with three modes, an interrupted fit, a 0.1-style run), a real
`tensorboard` serves it on a free loopback port, headless Chromium reads the DOM. Every number
checked here is checked against the run's own xla_report.json."""

import contextlib
import json
import os
import sys
import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import forked
from models import text_model
from tensorboard_server import get_json, headless_chromium, running_tensorboard
from test_tensorboard import _sequences  # noqa: E402  (storm data: padded batches of varying length)

import xla_keras
from xla_keras.core.signatures import describe, from_jsonable
from xla_keras.core.tags import TAG_STEP_TIME
from xla_keras.report.figures import quantity
from xla_keras.report.ledger_rows import cause_words, ledger_rows
from xla_keras.report.schema import REPORT_FILE
from xla_keras.tensorboard.metadata import PLUGIN_NAME

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("test_tab_browser"),
]  # every test here fits (in process or in a subprocess)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(ROOT, "artifacts")
# Batches of the "shapes" fit, per epoch: (batch size, sequence length).
SHAPES = [(8, 84), (8, 84), (8, 90), (8, 90), (8, 96), (4, 96)]
SHAPES_CHANGED = ["first signature", "x axis 1: 84 → 90", "x axis 1: 90 → 96", "batch 8 → 4 (last batch)"]


def _check_advised_card(frame, selector, item):
    """A storm's or budget advice's card (the first matching ``selector``), against its record in
    xla_report.json: the headline, then ``Cause:`` (one clause, from what varied and the fix), then
    the fix code; the advice text hidden behind a closed "details" until it is opened."""
    from xla_keras.storms.fixes import cause_clause, fix_from_dict

    card = frame.locator(selector).first
    classes = frame.locator("body").evaluate(
        "(body, sel) => Array.from(body.querySelector(sel).children).slice(0, 3).map(e => e.className)", selector
    )
    assert classes[0] == "headline" and classes[1] == "cause", classes
    assert card.locator(":scope > *").nth(2).locator(".fix-code").count() == 1  # the fix's code block
    assert card.locator(".cause").inner_text() == f"Cause: {cause_clause(item['varying'], fix_from_dict(item['fix']))}"
    assert not card.locator("details.advice-details .advice").is_visible()
    # Found, opened and read in one script: the tab redraws whenever a reload (each second here) brings
    # anything new, and a card found by one call may be detached by the next (a CI run saw it).
    was_open, shown, text = frame.locator("body").evaluate(
        """(body, sel) => { const d = body.querySelector(sel).querySelector('details.advice-details');
                            const was = d.open; d.open = true; const p = d.querySelector('.advice');
                            return [was, p.offsetParent !== null, p.innerText]; }""",
        selector,
    )
    assert not was_open and shown and item["advice"][:60] in text


def _batches(shapes):
    def gen():
        for batch, length in shapes:
            yield (
                np.arange(batch * length, dtype=np.int32).reshape(batch, length) % 97 + 1,
                np.ones((batch, 1), np.float32),
            )

    return tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32))
    )


SEEN_MID_FIT = []
COMPARED = {}  # compare()'s break-even per mode


class _ReportMidFit(keras.callbacks.Callback):
    def __init__(self, monitor):
        super().__init__()
        self.monitor = monitor

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            SEEN_MID_FIT.append(self.monitor.report.run_state)


class _Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 4:
            raise RuntimeError("interrupted at batch 5")


@pytest.fixture(scope="module")
def tab_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tab") / "logs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # No floor: its 4 train compiles cost under a second here, and the tab's advice card is checked.
        shapes = {"log_dir": str(root / "shapes"), "jit": "on", "compile_budget_floor": 0, "verbose": 0}
        monitor = xla_keras.XlaMonitor(**shapes)
        text_model().fit(_batches(SHAPES), epochs=2, callbacks=[monitor, _ReportMidFit(monitor)], verbose=0)
        monitor = xla_keras.XlaMonitor(log_dir=str(root / "storm"), jit="on", storm_threshold=4, verbose=0)
        text_model().fit(_sequences(96), epochs=1, callbacks=[monitor], verbose=0)
        x = np.random.default_rng(1).normal(size=(256, 16)).astype(np.float32)
        y = x.sum(axis=1, keepdims=True)

        def mlp():
            model = keras.Sequential(
                [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
            )
            model.compile("adam", "mse")
            return model

        table = xla_keras.compare(mlp, (x, y), steps=30, log_dir=str(root / "compare"))
        COMPARED.update({r.mode: r.break_even_step for r in table.results})
        monitor = xla_keras.XlaMonitor(log_dir=str(root / "interrupted"), jit="on", verbose=0)
        with pytest.raises(RuntimeError, match="interrupted"):
            mlp().fit(x, y, batch_size=32, epochs=3, callbacks=[monitor, _Interrupt()], verbose=0)
        _fastest_fit(mlp(), x, y, str(root / "fastest"))
        _refused_fit(str(root / "refused"))
        _unsupported_fit(x, y, str(root / "unsupported"))
        _coverage_fit(str(root / "coverage"))
    from xla_keras.core.types import Scalar
    from xla_keras.tensorboard.sink import OutputSink

    sink = OutputSink(str(root / "old"))  # what xla_keras 0.1 left: scalars, no report for the tab
    sink.scalars([Scalar("train", TAG_STEP_TIME, 2.0, 1)])
    sink.close()
    reports = {}
    for dirpath, _, files in os.walk(root):
        if REPORT_FILE in files:
            with open(os.path.join(dirpath, REPORT_FILE)) as f:
                reports[os.path.relpath(dirpath, root)] = json.load(f)
    return root, reports


def _refused_fit(log_dir):
    """jit='on' on a model with a StringLookup: Keras refuses jit_compile=True; the report's jit_fix."""
    text = keras.Input(shape=(1,), dtype="string")
    lookup = keras.layers.StringLookup(vocabulary=["a", "b"], name="word_lookup")
    model = keras.Model(text, keras.layers.Dense(1)(keras.layers.CategoryEncoding(3)(lookup(text))))
    model.compile("sgd", "mse")
    import tensorflow as tf

    words = tf.data.Dataset.from_tensor_slices(
        (np.array([["a"], ["b"], ["c"], ["a"]] * 4), np.ones((16, 1), "float32"))
    )
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", verbose=0)
    model.fit(words.batch(8), epochs=1, callbacks=[monitor], verbose=0)


def _unsupported_fit(x, y, log_dir):
    """jit='on' on a model with an op XLA cannot compile (AsString): the fit falls back, the report's
    unsupported_ops and jit_fix (auto-clustering)."""
    import tensorflow as tf

    class Stringify(keras.layers.Layer):
        def call(self, inputs):
            return inputs + 0.0 * tf.cast(tf.strings.length(tf.strings.as_string(inputs)), inputs.dtype)

    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, keras.layers.Dense(1)(Stringify(name="stringify")(inputs)))
    model.compile("sgd", "mse")
    monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="on", verbose=0)
    with pytest.warns(xla_keras.XlaKerasWarning, match="XLA cannot compile AsString in layer 'stringify'"):
        model.fit(x[:64], y[:64], batch_size=32, epochs=1, callbacks=[monitor], verbose=0)


def _coverage_fit(log_dir):
    """jit='autoclustering' with the early CPU opt-in (a fresh process: TensorFlow reads the flag when it
    creates its devices): the report's coverage of the train step."""
    here = os.path.dirname(os.path.abspath(__file__))
    proc = forked.run(
        [sys.executable, os.path.join(here, "coverage_fits.py"), log_dir, "--once"],
        env=forked.script_env("tensorflow"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def _fastest_fit(model, x, y, log_dir):
    """jit='fastest' with its rules set for a short fit: three rounds, then a tie (the default kept)."""
    import math

    from xla_keras.jit import trial as jit_trial

    names = ("MIN_STEPS_LEFT", "TRIAL_BUDGET", "EARLY_RATIO", "FAR_APART", "MIN_GAIN", "MIN_ROUNDS", "MAX_ROUNDS")
    saved = {n: getattr(jit_trial, n) for n in names}
    jit_trial.MIN_STEPS_LEFT, jit_trial.TRIAL_BUDGET = 0, math.inf
    jit_trial.EARLY_RATIO = jit_trial.FAR_APART = jit_trial.MIN_GAIN = math.inf
    jit_trial.MIN_ROUNDS = jit_trial.MAX_ROUNDS = 3
    try:
        monitor = xla_keras.XlaMonitor(log_dir=log_dir, jit="fastest", verbose=0)
        model.fit(np.tile(x, (20, 1)), np.tile(y, (20, 1)), batch_size=32, epochs=1, callbacks=[monitor], verbose=0)
    finally:
        for n in names:
            setattr(jit_trial, n, saved[n])


@pytest.fixture(scope="module")
def tab_server(tab_logdir, tmp_path_factory):
    root, reports = tab_logdir

    def ready(base):  # the data server has read every run
        runs = get_json(base + f"/data/plugin/{PLUGIN_NAME}/runs", timeout=5)["runs"]
        return len(runs) == len(reports) + 1 and all(r.get("message") is None for r in runs if r["run"] != "old")

    with running_tensorboard(
        root, tmp_path_factory.mktemp("tab_server"), ready=ready, args=("--reload_interval", "1")
    ) as base:
        yield base, root, reports


def test_the_fits_wrote_what_the_checks_below_expect(tab_logdir):
    _, reports = tab_logdir
    assert sorted(reports) == [
        "compare/autoclustering",
        "compare/off",
        "compare/on",
        "coverage/as_built",
        "fastest",
        "interrupted",
        "refused",
        "shapes",
        "storm",
        "unsupported",
    ]
    assert reports["unsupported"]["unsupported_ops"]["layers"] == ["stringify"]
    assert reports["coverage/as_built"]["coverage"]["advice"]
    assert reports["refused"]["jit_fix"] and reports["refused"]["jit_active"] is False
    assert reports["fastest"]["jit_decision"]["switches"] == 6
    assert reports["fastest"]["jit_decision"]["basis"] == "within_noise"  # three rounds, then the forced tie
    shapes = [c for c in reports["shapes"]["compilations"] if c["phase"] == "train"]
    assert [c["signature"][0]["shape"] for c in shapes] == [[8, 84], [8, 90], [8, 96], [4, 96]]
    assert [c["last_batch"] for c in shapes] == [False, False, False, True]
    assert reports["storm"]["storms"] and reports["storm"]["storms"][0]["fix"].get("code")
    assert reports["storm"]["storms"][0]["fix"]["real_lengths"]["measured"]
    assert [a["phase"] for a in reports["shapes"]["advice"]] == ["train"]
    assert reports["interrupted"]["steps"]["train"] == 5
    assert reports["interrupted"]["run_state"] == "interrupted"
    assert any("stopped early" in n and "train step 5" in n for n in reports["interrupted"]["notes"])
    assert reports["shapes"]["run_state"] == reports["storm"]["run_state"] == "finished"
    assert SEEN_MID_FIT == ["running"]
    for mode, steps in COMPARED.items():  # compare()'s break-even reaches each mode's report (and the tab)
        assert reports[f"compare/{mode}"]["break_even_steps"] == steps, mode


def test_the_runs_route_of_a_real_tensorboard_lists_every_fit(tab_server):
    base, _, reports = tab_server
    listing = get_json(base + f"/data/plugin/{PLUGIN_NAME}/runs")
    rows = {r["run"]: r for r in listing["runs"]}
    assert sorted(rows) == sorted([*reports, "old"])
    for run, report in reports.items():
        assert rows[run]["compilation_count"] == report["compilation_count"], run
        assert rows[run]["compile_seconds"] == report["compile_seconds"], run
        assert rows[run]["steady_step_seconds"] == report["steady_step_seconds"], run
    assert "no report for the tab" in rows["old"]["message"]
    plugins = get_json(base + "/data/plugins_listing")
    assert plugins[PLUGIN_NAME]["enabled"] and plugins[PLUGIN_NAME]["tab_name"] == "XLA"


def _tab(page, base, refresh_ms=1000):
    page.add_init_script(f"window.localStorage.setItem('xla_keras.refresh_ms', '{refresh_ms}')")
    # TensorBoard's page, under a loaded machine (CI's main suite beside the tier's installs), took over 30 s
    page.goto(base + f"/?darkMode=false#{PLUGIN_NAME}", wait_until="networkidle", timeout=120000)
    frame = page.frame_locator(f"iframe[src*='name={PLUGIN_NAME}']")
    frame.locator("#compare tbody tr").first.wait_for(timeout=60000)
    return frame


def _select(frame, run):
    frame.locator(f"#compare tr[data-run='{run}']").click()
    frame.locator("#run h2 code", has_text=run).wait_for(timeout=30000)
    frame.locator("#ledger, #run-message").first.wait_for(timeout=30000)


def test_the_xla_tab_in_headless_chromium(tab_server):
    base, root, reports = tab_server
    from playwright.sync_api import expect, sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = headless_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            frame = _tab(page, base)
            assert page.get_by_text("XLA", exact=True).count() >= 1  # the tab in TensorBoard's bar

            # several runs: one compare row per run, numbers from each report
            rows = frame.locator("#compare tbody tr")
            assert rows.count() == len(reports) + 1
            for run, report in reports.items():
                row = frame.locator(f"#compare tr[data-run='{run}']")
                total = sum(report["compilation_count"].values())
                assert row.locator("td[data-total]").get_attribute("data-total") == str(total), run
            assert "no report for the tab" in frame.locator("#compare tr[data-run='old']").inner_text()

            # A server slower than the refresh period (a period of 20 ms here; a loaded machine made one
            # second too short in CI): a click's run is still drawn, the timer never starving the refresh.
            hurried = browser.new_page(viewport={"width": 1400, "height": 1300})
            _select(_tab(hurried, base, refresh_ms=20), "storm")
            hurried.close()

            # the known shape sequence: one ledger row per compile, the "changed" column
            _select(frame, "shapes")
            report = reports["shapes"]
            ledger = frame.locator("#ledger tbody tr")
            assert ledger.count() == len(report["compilations"])
            train = [i + 1 for i, c in enumerate(report["compilations"]) if c["phase"] == "train"]
            changed = [frame.locator(f"#ledger tr[data-index='{i}'] td.changed").inner_text() for i in train]
            assert changed == SHAPES_CHANGED
            for i, c in enumerate(report["compilations"], 1):
                cell = frame.locator(f"#ledger tr[data-index='{i}'] td[data-seconds]")
                assert float(cell.get_attribute("data-seconds")) == pytest.approx(c["seconds"], rel=1e-12)
                # the cost card's columns: the report's own figures, as report/figures.py writes them; a program
                # the card's budget left unanalysed (cost null) shows none
                flops = frame.locator(f"#ledger tr[data-index='{i}'] td.flops").inner_text()
                if c["cost"] is None:
                    assert flops == "n/a", (i, flops)
                else:
                    assert flops == quantity(c["cost"]["flops"], "FLOP") and flops != "n/a", (i, c["cost"])
            assert any(c["cost"] for c in report["compilations"])  # the most-run program has its figures
            strip = frame.locator("#status").inner_text()
            assert f"{sum(report['compilation_count'].values())}: train {report['compilation_count']['train']}" in strip
            assert f"requested {report['jit_mode']}" in strip

            # the timeline: one mark per compile, hover shows the signature and seconds
            assert frame.locator(".compile-mark").count() == len(report["compilations"])
            frame.locator(f".lane[data-phase='train'] .compile-mark[data-index='{train[-1]}']").hover()
            tooltip = frame.locator("#tooltip")
            tooltip.wait_for(state="visible", timeout=5000)
            assert "x:int32[4,96]" in tooltip.inner_text() and "batch 8 → 4" in tooltip.inner_text()

            # sortable: by seconds, descending after two clicks
            frame.locator("#ledger th[data-key='seconds']").click()
            frame.locator("#ledger th[data-key='seconds']").click()
            first = frame.locator("#ledger tbody tr").first.get_attribute("data-index")
            slowest = max(range(len(report["compilations"])), key=lambda i: report["compilations"][i]["seconds"])
            assert int(first) == slowest + 1
            page.screenshot(path=os.path.join(ARTIFACTS, "xla_tab_shapes.png"), full_page=True)
            # a phase over the compile budget (4 train compiles in a short fit): its card leads with
            # the headline, the cause and the fix code; the long advice waits behind "details"
            assert frame.locator("#budget .budget").count() == len(report["advice"]) >= 1
            _check_advised_card(frame, "#budget .budget", report["advice"][0])

            # the storm: its card shows the advice and the fix code, with a copy button
            _select(frame, "storm")
            storm = reports["storm"]["storms"][0]
            card = frame.locator("#storms .storm").first
            assert frame.locator("#storms .storm").count() == len(reports["storm"]["storms"])
            assert card.locator(".fix-code").first.inner_text().strip() == storm["fix"]["code"].strip()
            _check_advised_card(frame, "#storms .storm", storm)
            card.locator("button.copy").first.click()
            expect(card.locator("button.copy").first).not_to_have_text("Copy the fix", timeout=5000)
            assert card.locator("button.copy").first.inner_text() in ("Copied", "Selected: press Ctrl-C")
            # real padding: as fed, padded to the advised lengths, bucketed; and the bucketing code
            fix = storm["fix"]
            real = card.locator(".real-padding")
            assert real.locator("tr").count() == 4  # header + 3 fixes
            text = real.inner_text()
            for key in ("batches_real_padding_overhead", "real_padding_overhead"):
                assert f"{round(100 * fix[key])}%" in text, key
            assert f"{round(100 * fix['bucket_by_length']['real_padding_overhead'])}%" in text
            assert card.locator(".fix-code").nth(1).inner_text().strip() == fix["bucket_by_length"]["code"].strip()
            assert frame.locator("#traces li").count() == len(reports["storm"]["traces"])

            # the storm run against the "shapes" run as a baseline: its signatures new or gone, per phase
            frame.locator("#compare tr[data-run='shapes'] button.baseline").click()
            frame.locator("#baseline").wait_for(timeout=30000)

            def signatures(report):
                return [(c["phase"], describe(from_jsonable(c["signature"]))) for c in report["compilations"]]

            theirs, ours = signatures(reports["shapes"]), signatures(reports["storm"])
            new = [i for i, s in enumerate(ours, 1) if s not in theirs]
            gone = list(dict.fromkeys(s for s in theirs if s not in ours))
            marked = [int(r.get_attribute("data-index")) for r in frame.locator("#ledger tbody tr.new").all()]
            assert sorted(marked) == new and new
            said = frame.locator("#baseline").inner_text()
            assert f"Against baseline shapes: {len(new)} signature(s) new (marked), {len(gone)} gone" in said
            assert frame.locator("#baseline-gone li").all_inner_texts() == [f"{p}: gone {s}" for p, s in gone]
            frame.locator("#compare tr[data-run='shapes'] button.baseline").click()  # off again
            frame.locator("#baseline").wait_for(state="detached", timeout=30000)
            if reports["storm"]["traces"]:
                assert frame.locator("#traces a.profile-link").count() == len(reports["storm"]["traces"])
            page.screenshot(path=os.path.join(ARTIFACTS, "xla_tab_storm.png"), full_page=True)
            _findings_lead_and_code_fits(frame, "#storms")

            # a layer Keras refuses to compile: what XLA did not compile leads, with the move as code
            _select(frame, "refused")
            card = frame.locator("#not-compiled .not-compiled")
            assert card.locator(".fix-code").inner_text().strip() == reports["refused"]["jit_fix"].strip()
            assert "word_lookup" in card.locator(".cause").inner_text()
            _findings_lead_and_code_fits(frame, "#not-compiled")

            # an op XLA cannot compile: the card names it, its layer and the user's line, the fix as code
            _select(frame, "unsupported")
            card = frame.locator("#not-compiled .not-compiled")
            headline = card.locator(".headline").inner_text()
            assert "XLA could not compile AsString in layer 'stringify' (XLA_CPU_JIT) at train step 1" in headline
            assert (
                card.locator(".line").inner_text() == f"Your line: {reports['unsupported']['unsupported_ops']['line']}"
            )
            assert card.locator(".fix-code").inner_text().strip() == reports["unsupported"]["jit_fix"].strip()
            _findings_lead_and_code_fits(frame, "#not-compiled")

            # auto-clustering's coverage: the share as a bar, the ops outside, the advice as code
            _select(frame, "coverage/as_built")
            coverage = reports["coverage/as_built"]["coverage"]
            card = frame.locator("#coverage .coverage")
            width = card.locator(".coverage-inside").evaluate("bar => bar.style.width")
            assert abs(float(width.rstrip("%")) - 100 * coverage["share_inside"]) < 0.1
            first = card.locator(".coverage-ops tbody tr").first.locator("td").all_inner_texts()
            assert first[:3] == [
                coverage["ops_outside"][0]["op"],
                str(coverage["ops_outside"][0]["nodes"]),
                ", ".join(coverage["ops_outside"][0]["layers"]),
            ]
            assert card.locator(".fix-code").inner_text().strip() == coverage["advice"]["code"]
            _findings_lead_and_code_fits(frame, "#coverage")
            # auto-clustering compiles a module per cluster: a signature's modules in one ledger row with their
            # count, as str(report) groups them (report/ledger_rows.py), and one timeline mark per row
            grouped = ledger_rows(reports["coverage/as_built"]["compilations"])
            assert grouped and max(g["compiles"] for g in grouped) > 1
            assert frame.locator("#ledger tbody tr").count() == len(grouped)
            for i, g in enumerate(grouped, 1):
                row = frame.locator(f"#ledger tr[data-index='{i}']")
                assert row.locator("td.modules").get_attribute("data-modules") == str(g["compiles"])
                assert row.locator("td.modules").inner_text() == f"{g['compiles']} module{'s' * (g['compiles'] != 1)}"
                seconds = float(row.locator("td[data-seconds]").get_attribute("data-seconds"))
                assert seconds == pytest.approx(g["seconds"], rel=1e-9)
                assert row.locator("td.cause").inner_text() == cause_words(g["cause"], g["why"])
            assert frame.locator(".compile-mark").count() == len(grouped)

            # the interrupted fit renders what it logged
            _select(frame, "interrupted")
            assert frame.locator("#status").count() == 1
            assert "Interrupted: the last fit stopped early" in frame.locator("#run .message").first.inner_text()
            assert frame.locator("#ledger tbody tr").count() == len(reports["interrupted"]["compilations"])

            # jit='fastest': the decision card, both modes measured, the kept one marked
            _select(frame, "fastest")
            decision = reports["fastest"]["jit_decision"]
            card = frame.locator("#fastest .fastest")
            assert f"kept xla {decision['mode']}" in card.locator(".card-title").inner_text().lower()  # CSS capitals
            assert card.locator("tbody tr").count() == 2
            assert card.locator(f"tbody tr[data-mode='{decision['mode']}']").get_attribute("class") == "selected"
            assert decision["why"][:60] in card.inner_text() and "3 rounds" in card.inner_text()
            page.screenshot(path=os.path.join(ARTIFACTS, "xla_tab_fastest.png"), full_page=True)

            # compare(): off / auto-clustering / on read as one table
            _select(frame, "compare/on")
            even = reports["compare/on"]["break_even_steps"]
            card = frame.locator("#status-break-even").inner_text()
            assert (f"{round(even)} steps" in card) if even is not None else ("unknown" in card)
            page.screenshot(path=os.path.join(ARTIFACTS, "xla_tab_compare.png"), full_page=True)

            # the 0.1-style run says why there is nothing to show
            _select(frame, "old")
            assert "no report for the tab" in frame.locator("#run-message").inner_text()

            # live refresh: a fit that starts writing after the page opened shows up
            from xla_keras.core.types import Scalar
            from xla_keras.tensorboard.sink import OutputSink

            sink = OutputSink(str(root / "late"))
            sink.scalars([Scalar("train", TAG_STEP_TIME, 2.0, 1)])
            sink.flush(report=lambda: _late_report(), text=True, step=1)
            sink.close()
            frame.locator("#compare tr[data-run='late']").wait_for(timeout=30000)
            assert frame.locator("#compare tr[data-run='late'] td[data-total]").get_attribute("data-total") == "0"
        finally:
            browser.close()
    assert os.path.getsize(os.path.join(ARTIFACTS, "xla_tab_shapes.png")) > 20000


def _findings_lead_and_code_fits(frame, finding):
    """The run's view leads with what to act on (``finding``), then the run's numbers, then the ledger;
    every fix's code lines are at most 100 columns, shown whole in their box, under no button."""
    order = frame.locator("#run").evaluate(
        "(run, ids) => ids.map(id => Array.from(run.children).indexOf(run.querySelector(id)))",
        [finding, "#status", "#timeline", "#ledger"],
    )
    assert -1 not in order and order == sorted(order), order
    boxes = frame.locator(".fix").evaluate_all(
        """fixes => fixes.map(fix => { const pre = fix.querySelector('pre.fix-code');
              const button = fix.querySelector('button.copy');
              return [pre.innerText, pre.scrollWidth, pre.clientWidth,
                      button.getBoundingClientRect().bottom, pre.getBoundingClientRect().top]; })"""
    )
    assert boxes
    for text, scroll_width, client_width, button_bottom, code_top in boxes:
        assert max(map(len, text.splitlines())) <= 100, text
        assert scroll_width <= client_width, (scroll_width, client_width, text[:80])
        assert button_bottom <= code_top, "the copy button covers the code"


def _late_report():
    from xla_keras.report.model import XlaReport

    return XlaReport(jit_mode="on", jit_active=True, jit_reason="late")


@contextlib.contextmanager
def _in_process_tensorboard(logdir):
    """TensorBoard's WSGI app with the XLA tab served from this process (so a test can patch it)."""
    import threading

    from test_tab_plugin import tab_client
    from werkzeug.serving import make_server

    client, _ = tab_client(logdir)
    server = make_server("127.0.0.1", 0, client.application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def _entry_page(base, selector):
    """The tab's own page (TensorBoard's plugin entry), once ``selector`` is there: its text."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = headless_chromium(p)
        try:
            page = browser.new_page()
            page.goto(base + f"/data/plugin_entry.html?name={PLUGIN_NAME}", wait_until="networkidle")
            page.locator(selector).first.wait_for(timeout=30000)
            return page.locator(selector).first.inner_text()
        finally:
            browser.close()


def test_an_empty_logdir_shows_what_to_do(tmp_path):
    with _in_process_tensorboard(tmp_path) as base:
        assert "XlaMonitor(log_dir=...)" in _entry_page(base, "#empty")


def test_without_the_profile_plugin_the_trace_links_say_how_to_get_it(tab_logdir, monkeypatch):
    root, reports = tab_logdir
    assert reports["storm"]["traces"], "the storm fit wrote profiler traces"
    from xla_keras.tensorboard import plugin

    monkeypatch.setattr(plugin, "_profile_tab_installed", lambda: False)
    with _in_process_tensorboard(root / "storm") as base:  # its only run: selected at once
        text = _entry_page(base, "#profile-missing")
    assert "not installed" in text and "pip install" in text and "tensorboard-plugin-profile" in text
