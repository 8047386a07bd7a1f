"""aiprof's own error types. The CLI prints their message on one line and exits 2."""

from __future__ import annotations


class AiprofError(Exception):
    """A problem the user can act on: bad input, a missing file, a bad query."""


class ImportFormatError(AiprofError):
    """The input is not in a format aiprof can import, or is too damaged to read."""


class QueryError(AiprofError):
    """A filter, sort or view that does not fit the table it is applied to."""
