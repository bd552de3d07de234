"""A reporting service built on Django that runs its slow work as django-qstash tasks.

``POST /reports/`` queues a report; django-qstash publishes the ``build_report`` task to QStash,
and QStash calls the project's webhook (``/qstash/webhook/``) to run it. ``POST /reports/digest/``
queues a digest email for 02:00 UTC with ``countdown``. There is no database: reports live in
memory (``reporting.py``), so the project needs no migrations.
"""
