"""Memory work that runs in the agent worker, never in a web request."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError, transaction

from apps.memory.knowledge import rule_vector_store
from apps.memory.models import Case
from apps.memory.retrieval import refresh_downstream, vector_store_for_case


# No queue named: the default queue (CELERY_TASK_DEFAULT_QUEUE) is the agent queue.
@shared_task(
    name="memory.embed_case",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError,),  # the database went away for a moment
    retry_backoff=True,
    retry_jitter=True,
    max_retries=3,
    soft_time_limit=120,
    time_limit=150,
)
def embed_case(case_id: int) -> None:
    """Write the case's vector, then the downstream signal of the cases it descends from.
    Safe to run twice: the vector is keyed by the case and both writes are recomputations."""
    if not Case.objects.filter(pk=case_id).exists():
        return  # its transaction rolled back after all, or it is gone
    vector_store_for_case(case_id)
    refresh_downstream(case_id)


def embed_case_after_commit(case_id: int) -> None:
    """Queue the embedding of a case once the transaction that records it has committed."""
    transaction.on_commit(lambda: embed_case.delay(case_id))


@shared_task(
    name="memory.embed_rule",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_jitter=True,
    max_retries=3,
    soft_time_limit=120,
    time_limit=150,
)
def embed_rule(rule_id: int) -> None:
    """Write the rule's searchable vector from its current wording. Safe to run twice: keyed by
    the rule, and the embedding is only recomputed when the wording changed."""
    rule_vector_store(rule_id)


def embed_rule_after_commit(rule_id: int) -> None:
    transaction.on_commit(lambda: embed_rule.delay(rule_id))
