from __future__ import annotations

from django.db import models


class Invoice(models.Model):
    customer = models.EmailField()
    amount_cents = models.IntegerField()
    sent_at = models.DateTimeField(null=True)
    attempts = models.IntegerField(default=0)
    paid = models.BooleanField(default=False)
    in_ledger = models.BooleanField(default=False)
