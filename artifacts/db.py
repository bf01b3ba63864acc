"""Database expressions shared by models, migrations and writers."""

from __future__ import annotations

from django.db import models


class TransactionNow(models.Func):
    """PostgreSQL's `now()`: the transaction's start on the database clock.

    The sync columns' defaults must read back exactly as `now()` (readiness item 2), which
    Django's own `Now()` (compiled to STATEMENT_TIMESTAMP()) would not.
    """

    template = "now()"
    output_field = models.DateTimeField()
