"""How log records look on the terminal: progress prefixed, tables as they are, warnings apart."""

import logging

from sgh.cli.logs import BelowWarning, ConsoleFormatter


def _record(level, message, **extra):
    record = logging.LogRecord("sgh.pipeline", level, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_progress_lines_carry_the_prefix_and_tables_do_not():
    formatter = ConsoleFormatter()
    assert formatter.format(_record(logging.INFO, "step 10/20")) == "[sgh] step 10/20"
    table = "  ----\n  mAP@all  0.4\n  ----"
    assert formatter.format(_record(logging.INFO, table, plain=True)) == table


def test_warnings_and_errors_name_their_level_and_the_program():
    assert ConsoleFormatter().format(_record(logging.WARNING, "code collapse: 3 distinct")) == (
        "warning: code collapse: 3 distinct")
    assert ConsoleFormatter("sgh-compare").format(_record(logging.ERROR, "bad")) == (
        "sgh-compare: error: bad")


def test_only_records_below_warning_go_to_stdout():
    below = BelowWarning()
    assert below.filter(_record(logging.INFO, "x")) and below.filter(_record(logging.DEBUG, "x"))
    assert not below.filter(_record(logging.WARNING, "x"))
