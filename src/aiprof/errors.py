"""aiprof's own error types. The CLI prints their message on one line and exits 2."""

from __future__ import annotations


class AiprofError(Exception):
    """A problem the user can act on: bad input, a missing file, a bad query."""


class ImportFormatError(AiprofError):
    """The input is not in a format aiprof can import, or is too damaged to read."""


class QueryError(AiprofError):
    """A filter, sort or view that does not fit the table it is applied to."""


class UnexpectedInputError(ImportFormatError):
    """An importer stopped on input it did not foresee (a damaged or unusual file).

    Raised at the importers' boundary in place of the low-level exception, so the user
    gets one line naming the file and the format, never a traceback. Each one is an
    importer bug to fix: the fuzz harness (tests/fuzzing.py) counts them as crashes.
    """
