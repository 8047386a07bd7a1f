"""Exporters: the store written in other tools' formats."""
