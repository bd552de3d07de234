"""Servers and apps in child processes: ``ServerProcess``, ``AppProcess``, Node apps."""
