"""What a test reads of the fake: its lists (``qstash.messages``, ``qstash.dlq``, ``qstash.runs``,
...), each a ``Found`` in creation order, and what strict teardown fails a test for."""

from __future__ import annotations

from ..delivery.dispatcher import Dispatcher
from ..engine import workflow_dlq
from ..engine.flow_control import FlowKey
from ..engine.models import ApiCall, Delivery, DlqEntry, Event, Message
from ..engine.queues import Queue
from ..engine.scheduler import Scheduler
from ..engine.schedules import Schedule
from ..engine.store import Store
from ..engine.url_groups import UrlGroup
from ..engine.waiters import Waiter
from ..engine.workflow_dlq import WorkflowDlqEntry
from ..engine.workflows import WorkflowRun
from .gateway import ApiGateway
from .query import Found


class Inspection:
    """``FakeQStash``'s lists (a mixin over the fake's store, dispatcher, scheduler and API)."""

    store: Store
    _dispatcher: Dispatcher
    _scheduler: Scheduler
    _gateway: ApiGateway

    @property
    def messages(self) -> Found[Message]:
        return Found(self.store.messages.values(), "message")

    @property
    def deliveries(self) -> Found[Delivery]:
        return Found(self._dispatcher.deliveries, "delivery")

    @property
    def dlq(self) -> Found[DlqEntry]:
        self._gateway.mark_dlq_read(self.store.dlq)  # read: strict_teardown does not ask for it
        return Found(self.store.dlq.values(), "DLQ entry")

    @property
    def api_calls(self) -> Found[ApiCall]:
        """The QStash API calls made while the fake was active (by the app, the SDK, the
        test), in order, each with the fake's answer: rejected ones too. The newest 1,000
        are kept."""
        return Found(self._gateway.calls, "API call")

    def left_behind(self) -> tuple[list[Message], list[DlqEntry]]:
        """What ``strict_teardown`` fails a test for: the messages due at or before
        ``qstash.now`` that nothing has delivered yet, and the DLQ entries the test never
        read (not through ``qstash.dlq``, nor listed or fetched through the API) since they
        were dead-lettered. Reading them here does not mark them read."""
        return self._scheduler.due_now(), self._gateway.unread_dlq()

    @property
    def events(self) -> Found[Event]:
        return Found(self.store.events, "event")

    @property
    def queues(self) -> Found[Queue]:
        return Found(self.store.queues.values(), "queue")

    @property
    def schedules(self) -> Found[Schedule]:
        return Found(self.store.schedules.values(), "schedule")

    @property
    def url_groups(self) -> Found[UrlGroup]:
        return Found(self.store.url_groups.values(), "URL group")

    @property
    def flow_keys(self) -> Found[FlowKey]:
        """Flow-control keys, in the order publishes first named them."""
        return Found(self.store.flow_keys.values(), "flow-control key")

    @property
    def runs(self) -> Found[WorkflowRun]:
        """Upstash Workflow runs, in the order they started."""
        return Found(self.store.workflows.runs.values(), "workflow run")

    @property
    def workflow_dlq(self) -> Found[WorkflowDlqEntry]:
        """The workflow DLQ: the runs that failed, by the DLQ entry of the message that
        failed each (what ``GET /v2/workflows/dlq`` lists), in the order they failed. Each
        entry is in ``qstash.dlq`` too."""
        found = list(workflow_dlq.entries(self.store))
        self._gateway.mark_dlq_read(item.dlq_id for item in found)
        return Found(found, "workflow DLQ entry")

    @property
    def waiters(self) -> Found[Waiter]:
        """The workflow runs waiting for an event (``context.waitForEvent``, a webhook's
        ``waitForWebhook``), oldest first: ``event_id``, ``run_id``, ``step_name``,
        ``deadline``."""
        return Found(self.store.waiters, "waiter")
