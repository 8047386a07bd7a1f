"""The recording's logger, imported lazily: ``logging`` (re, traceback...) costs a
recorded job's start several ms, and most recordings never log anything."""

from __future__ import annotations

import os
import sys

NAME = "aiprof.record"

basic_config = False
"""Set by the bootstrap: on the first message, give the root logger aiprof's format
if the job has not configured logging by then (and AIPROF_QUIET is not 1)."""


class LazyLogger:
    """The few ``logging.Logger`` methods aiprof's recording uses, importing logging
    on the first call."""

    def __init__(self, name: str = NAME) -> None:
        self.name = name

    def _logger(self) -> object:
        import logging

        global basic_config
        if basic_config:
            basic_config = False
            if os.environ.get("AIPROF_QUIET") != "1" and not logging.getLogger().handlers:
                logging.basicConfig(level=logging.WARNING, format="aiprof: %(levelname)s: %(message)s")
        return logging.getLogger(self.name)

    def _log(self, level: str, msg: str, args: tuple[object, ...]) -> None:
        if "logging" not in sys.modules and level == "debug":
            return  # nobody configured logging, so nobody shows debug messages
        getattr(self._logger(), level)(msg, *args)

    def debug(self, msg: str, *args: object) -> None:
        self._log("debug", msg, args)

    def info(self, msg: str, *args: object) -> None:
        self._log("info", msg, args)

    def warning(self, msg: str, *args: object) -> None:
        self._log("warning", msg, args)


log = LazyLogger()
