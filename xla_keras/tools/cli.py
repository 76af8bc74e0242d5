"""The ``xla-keras`` command line (see USAGE)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import List, Optional

from absl import app, flags

from xla_keras.backends.tensorflow.multiworker import KERAS_ISSUE, WORKAROUND
from xla_keras.report.schema import REPORT_FILE, parse_report

COMMANDS = ("report", "diff", "doctor", "explain")
USAGE = """xla-keras: XLA observability for Keras

    xla-keras report LOGDIR [--json|--full]
                                       print the report(s) XlaMonitor wrote under LOGDIR
                                       (--full: every advice and note whole)
    xla-keras diff BASELINE RUN [--format text|markdown|json] [--max-compiles PHASE=N ...]
                   [--max-compile-seconds-ratio R] [--max-steady-ratio R]
                                       two runs' compiles side by side (log dirs or xla_report.json);
                                       exit 1 when the run crosses a bound, 2 for bad input
    xla-keras doctor                   what this machine and environment will do with XLA
    xla-keras explain LOGFILE|-        explain the TensorFlow/XLA lines of a training log
    xla-keras --version"""

flags.DEFINE_bool("json", False, "print the report as JSON instead of the human summary")
flags.DEFINE_bool("full", False, "print the summary with every advice and note whole (report.details())")
FLAGS = flags.FLAGS


def find_reports(log_dir: str) -> List[str]:
    """Every xla_report.json under log_dir (one per monitored log dir), shallowest first, then in
    natural order (a monitor's first model, then model_2, ..., model_10)."""
    found = []
    for root, _dirs, files in os.walk(log_dir):
        if REPORT_FILE in files:
            found.append(os.path.join(root, REPORT_FILE))

    def key(path):
        parts = os.path.relpath(path, log_dir).split(os.sep)
        return len(parts), [[int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)] for p in parts]

    return sorted(found, key=key)


def cmd_report(args: List[str], as_json: bool, out=sys.stdout, full: bool = False) -> int:
    if len(args) != 1:
        print("usage: xla-keras report LOGDIR [--json|--full]", file=sys.stderr)
        return 2
    log_dir = args[0]
    if not os.path.isdir(log_dir):
        print(f"xla-keras report: {log_dir!r} is not a directory", file=sys.stderr)
        return 2
    paths = find_reports(log_dir)
    if not paths:
        print(
            f"xla-keras report: no {REPORT_FILE} under {log_dir!r}; was XlaMonitor(log_dir=...) pointed there?",
            file=sys.stderr,
        )
        return 1
    reports, failed = {}, 0
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
            parsed = parse_report(data)
            rendered = parsed.report.details() if full else str(parsed.report)
            if parsed.message:
                print(f"xla-keras report: {path}: {parsed.message}", file=sys.stderr)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            # One broken file must not hide the others: say which, print the rest, exit 1.
            print(f"xla-keras report: cannot read {path}: {e!r}", file=sys.stderr)
            failed += 1
            continue
        reports[os.path.dirname(path)] = (data, rendered)
    if not reports:
        return 1
    try:
        if as_json:
            datas = {d: data for d, (data, _) in reports.items()}
            # The shape follows what was found, not what parsed: one file -> its report, several -> by dir.
            json.dump(datas if len(paths) > 1 else next(iter(datas.values())), out, indent=2, sort_keys=True)
            out.write("\n")
        else:
            for directory, (_, rendered) in reports.items():
                if len(paths) > 1:
                    out.write(f"== {directory}\n")
                out.write(rendered + "\n")
        out.flush()
    except BrokenPipeError:  # e.g. piped into head
        sys.stderr.close()
    return 1 if failed else 0


def load_report(path: str):
    """A report from a log dir (its shallowest xla_report.json) or a file; ValueError says why not."""
    if os.path.isdir(path):
        found = find_reports(path)
        if not found:
            raise ValueError(f"no {REPORT_FILE} under {path!r}")
        path = found[0]
    elif not os.path.isfile(path):
        raise ValueError(f"{path!r} is neither a log directory nor an {REPORT_FILE} file")
    try:
        with open(path) as f:
            return parse_report(json.load(f)).report
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read {path!r}: {error}") from error


def _max_compiles(text: str):
    phase, _, count = text.partition("=")
    if not count.strip().lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"PHASE=N with N a count; got {text!r}")
    return phase.strip(), int(count)


def cmd_diff(args: List[str], out=sys.stdout) -> int:
    """``xla-keras diff``: 0 when every bound holds, 1 with a one-line reason, 2 for bad input."""
    from xla_keras.report.diff import FORMATS, Bounds, check, diff_reports, render_diff

    parser = argparse.ArgumentParser(prog="xla-keras diff", description="two runs' compiles side by side")
    parser.add_argument("baseline", help="a log directory or an xla_report.json")
    parser.add_argument("run", help="a log directory or an xla_report.json")
    parser.add_argument("--format", default="text", choices=FORMATS)
    parser.add_argument("--max-compiles", action="append", default=[], type=_max_compiles, metavar="PHASE=N")
    parser.add_argument("--max-compile-seconds-ratio", type=float, metavar="R")
    parser.add_argument("--max-steady-ratio", type=float, metavar="R")
    try:
        options = parser.parse_args(args)
    except SystemExit as error:  # argparse printed the usage and the reason
        return 2 if error.code else 0
    try:
        bounds = Bounds(dict(options.max_compiles), options.max_compile_seconds_ratio, options.max_steady_ratio)
        baseline, run = load_report(options.baseline), load_report(options.run)
    except ValueError as error:
        print(f"xla-keras diff: {error}", file=sys.stderr)
        return 2
    diff = diff_reports(baseline, run)
    crossed = check(diff, bounds)
    out.write(render_diff(diff, options.format, (options.baseline, options.run)) + "\n")
    if crossed:
        print(f"xla-keras diff: {crossed}", file=sys.stderr)
    return 1 if crossed else 0


def cmd_doctor(args: List[str], out=sys.stdout) -> int:
    if args:
        print("usage: xla-keras doctor", file=sys.stderr)
        return 2
    from xla_keras.tools.doctor import doctor, exit_code

    findings = doctor()
    for finding in findings:
        out.write(str(finding) + "\n")
    if any(f.topic == "multi-worker" and f.level == "warn" and KERAS_ISSUE in f.message for f in findings):
        out.write(f"\n# The patch for {KERAS_ISSUE} (xla_keras.multiworker.WORKAROUND):\n{WORKAROUND}")
    return exit_code(findings)


def cmd_explain(args: List[str], out=sys.stdout) -> int:
    if len(args) != 1:
        print("usage: xla-keras explain LOGFILE|-", file=sys.stderr)
        return 2
    from xla_keras.tools.explain import explain, render_findings

    source = args[0]
    if source == "-":
        findings = explain(sys.stdin)
    else:
        try:
            with open(source, errors="replace") as f:
                findings = explain(f)
        except OSError as e:
            print(f"xla-keras explain: cannot read {source!r}: {e.strerror}", file=sys.stderr)
            return 2
    out.write(render_findings(findings, None if source == "-" else source) + "\n")
    return 0


def run(argv: List[str]) -> int:
    args = argv[1:]
    if args and args[0] in ("help", "-h", "--help", "-help"):
        print(USAGE)
        return 0
    if args and args[0] == "--version":
        from xla_keras import __version__

        print(f"xla-keras {__version__}")
        return 0
    if not args or args[0] not in COMMANDS:
        given = repr(args[0]) if args else "nothing"
        print(f"xla-keras: command must be one of {', '.join(COMMANDS)}; got {given}", file=sys.stderr)
        return 2
    if args[0] == "diff":
        return cmd_diff(args[1:])
    if args[0] == "doctor":
        return cmd_doctor(args[1:])
    if args[0] == "explain":
        return cmd_explain(args[1:])
    return cmd_report(args[1:], FLAGS.json, full=FLAGS.full)


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    if len(argv) > 1 and argv[1] in ("help", "-h", "--help", "-help", "--version", "diff"):
        sys.exit(run(argv))  # before absl, whose --help knows only its flags (diff parses its own)
    app.run(lambda a: sys.exit(run(a)), argv=argv)


if __name__ == "__main__":
    main()
