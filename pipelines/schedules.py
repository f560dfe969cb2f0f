"""The schedules: the nightly refresh and the weekly fit. Both run whenever the Dagster daemon runs."""

from __future__ import annotations

import dagster as dg

from pipelines.jobs import fit_and_evaluate, nightly_refresh

nightly = dg.ScheduleDefinition(
    name="nightly", job=nightly_refresh, cron_schedule="0 2 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="02:00 UTC: fold the day's tune files into the freeze and refit from it.")

weekly_fit = dg.ScheduleDefinition(
    name="weekly_fit", job=fit_and_evaluate, cron_schedule="0 4 * * 0", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Sunday 04:00 UTC: refit and evaluate on the freeze as it stands, even when no tune came in.")
