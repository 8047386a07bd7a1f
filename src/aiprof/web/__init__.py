"""The browser faces: the REST API and web UI (``aiprof serve``) and the one-file HTML report."""
