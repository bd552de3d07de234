"""The data dir (``serve --data-dir``): snapshot, journal, the state's plain-data codec."""
