"""The shared job model's columns as the services' migrations first created them.

The orchestrator's episodes (``o0002``) and rollout samples (``o0003``) and the verifier's jobs
(``v0002``) were created on the job model in one shape; their migrations take the columns from
here. Frozen on purpose: a later change
to :class:`shared.jobs.JobMixin` gets a migration of its own in each service, never an edit here
(a migration must build today what it built the day it ran).
"""

from __future__ import annotations

import sqlalchemy as sa


def job_columns_v1() -> list[sa.Column]:
    """The job row's columns (id, kind, status, payload, ... owner), new objects each call."""
    stamp = sa.DateTime(timezone=True)
    return [
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("task_name", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(200), nullable=True),
        sa.Column("created_at", stamp, nullable=False, index=True),
        sa.Column("started_at", stamp, nullable=True),
        sa.Column("finished_at", stamp, nullable=True),
        sa.Column("heartbeat_at", stamp, nullable=True),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("progress_message", sa.Text, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("result_key", sa.String(1024), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
    ]
