import os, json
from fastapi import FastAPI, Request, HTTPException
from qstash import QStash, Receiver, AsyncQStash
import pytest

app = FastAPI()
received = []
receiver = Receiver(os.environ["QSTASH_CURRENT_SIGNING_KEY"], os.environ["QSTASH_NEXT_SIGNING_KEY"])

@app.post("/hook")
async def hook(request: Request):
    body = (await request.body()).decode()
    receiver.verify(signature=request.headers["upstash-signature"], body=body, url=str(request.url))
    received.append(json.loads(body))
    return {"ok": True}

def test_publish(qstash):
    qstash.mount("https://app.test", app)
    client = QStash(os.environ["QSTASH_TOKEN"])
    res = client.message.publish_json(url="https://app.test/hook", body={"a": 1}, delay="10s")
    assert qstash.tick() == []
    ds = qstash.advance("10s")
    assert len(ds) == 1 and ds[0].status == 200, ds
    assert received[-1] == {"a": 1}
    assert qstash.messages[0].state == "DELIVERED"
    print(qstash.events)

async def test_async(qstash):
    qstash.mount("https://app.test", app)
    client = AsyncQStash(os.environ["QSTASH_TOKEN"])
    res = await client.message.publish_json(url="https://app.test/hook", body={"b": 2})
    ds = await qstash.atick()
    assert ds[0].status == 200
