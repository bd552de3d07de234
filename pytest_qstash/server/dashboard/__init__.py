"""The dashboard ``pytest-qstash serve`` shows under ``/_qstash/dashboard``."""
