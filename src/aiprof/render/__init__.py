"""Renderers, one room (as pyinstrument's): :mod:`.terminal` (Arrow tables -> rich
tables, CSV or JSON on stdout), :mod:`.monitor` (``aiprof monitor``'s dmon-style
lines, CSV and JSON), :mod:`.html` (the one-file HTML report) and :mod:`.diff_report`
(``aiprof diff``'s Markdown and JUnit). Importing this package imports none of them."""
