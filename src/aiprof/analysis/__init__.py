"""Analysers: pure functions over a profile, all run through one query (filter, sort, page)."""

from .base import Analyser, Result, SqlView, analyser, full_table, run, views
from .query import Filter, Query

__all__ = ["Analyser", "Filter", "Query", "Result", "SqlView", "analyser", "full_table", "run", "views"]
