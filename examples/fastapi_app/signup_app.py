"""A signup service built on FastAPI that hands its slow work to QStash.

``POST /signup`` stores the user and publishes two jobs with the real ``qstash`` SDK: a welcome
email (now) and an onboarding reminder (in one day). QStash calls the ``/jobs/...`` routes
back; each verifies ``Upstash-Signature`` with the real ``qstash.Receiver`` before acting.

Nothing here knows about tests: settings come from the environment at import time, the way a
deployed app reads them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from pydantic import BaseModel
from qstash import AsyncQStash, Receiver
from qstash.errors import SignatureError

#: Where this app is reachable from the internet: QStash calls the job routes under it.
BASE_URL = os.environ.get("SIGNUP_BASE_URL", "https://signup.example.com")

qstash_client = AsyncQStash(os.environ["QSTASH_TOKEN"])
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)


# -- the outside world: an email provider ---------------------------------------------------
class ProviderUnavailable(Exception):
    pass


@dataclass
class Email:
    to: str
    subject: str
    sent_at: datetime


@dataclass
class EmailProvider:
    """Stands in for an email API (SES, Postmark, ...): what it sends lands in ``outbox``."""

    outbox: list[Email] = field(default_factory=list)
    #: How many of the next calls fail, as when the provider has an outage.
    failures_left: int = 0

    def send(self, to: str, subject: str) -> None:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise ProviderUnavailable("email provider is down")
        self.outbox.append(Email(to, subject, sent_at=datetime.now(timezone.utc)))


email_provider = EmailProvider()


# -- the app -------------------------------------------------------------------------------
@dataclass
class User:
    email: str
    name: str
    onboarded: bool = False


users: dict[str, User] = {}

app = FastAPI(title="signup service")


class SignupRequest(BaseModel):
    email: str
    name: str


class OnboardingDone(BaseModel):
    email: str


@app.post("/signup", status_code=201)
async def signup(form: SignupRequest) -> dict[str, Any]:
    if form.email in users:
        raise HTTPException(409, "already signed up")
    users[form.email] = User(form.email, form.name)
    welcome = await qstash_client.message.publish_json(
        url=f"{BASE_URL}/jobs/welcome-email", body={"email": form.email}
    )
    reminder = await qstash_client.message.publish_json(
        url=f"{BASE_URL}/jobs/onboarding-reminder", body={"email": form.email}, delay="1d"
    )
    return {"email": form.email, "jobs": [welcome.message_id, reminder.message_id]}  # type: ignore[union-attr]


@app.post("/onboarding/complete")
async def complete_onboarding(done: OnboardingDone) -> dict[str, Any]:
    users[done.email].onboarded = True
    return {"email": done.email, "onboarded": True}


async def verified_job(request: Request) -> dict[str, Any]:
    """The job's JSON payload, once QStash's signature over it checks out (else 401)."""
    body = (await request.body()).decode()
    signature = request.headers.get("Upstash-Signature")
    if signature is None:
        raise HTTPException(401, "missing Upstash-Signature")
    try:
        # Behind a proxy request.url may differ from the public URL QStash signed: rebuild that
        # one, query string included (the signature covers the exact URL).
        query = f"?{request.url.query}" if request.url.query else ""
        url = f"{BASE_URL}{request.url.path}{query}"
        receiver.verify(signature=signature, body=body, url=url)
    except SignatureError as exc:
        raise HTTPException(401, f"invalid signature: {exc}") from exc
    payload: dict[str, Any] = json.loads(body)
    return payload


VerifiedJob = Annotated[dict[str, Any], Depends(verified_job)]


@app.post("/jobs/welcome-email")
async def welcome_email(job: VerifiedJob, response: Response) -> dict[str, Any]:
    user = users[job["email"]]
    try:
        email_provider.send(user.email, f"Welcome, {user.name}!")
    except ProviderUnavailable:
        # A non-2xx answer makes QStash retry; Retry-After says when.
        response.status_code = 503
        response.headers["Retry-After"] = "30"
        return {"sent": False, "reason": "email provider unavailable"}
    return {"sent": True}


@app.post("/jobs/onboarding-reminder")
async def onboarding_reminder(job: VerifiedJob) -> dict[str, Any]:
    user = users[job["email"]]
    if user.onboarded:
        return {"sent": False, "reason": "already onboarded"}
    email_provider.send(user.email, "Finish setting up your account")
    return {"sent": True}


def reset() -> None:
    """Forget all users and sent emails (tests call this between tests)."""
    users.clear()
    email_provider.outbox.clear()
    email_provider.failures_left = 0
