"""Reading both databases the way an auditor would: as the superuser, with the real key."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, time, timedelta

from evalpkg.db import connect
from evalpkg.prod.generator import DEFAULT_AS_OF
from evalpkg.settings import EVAL_DB, Settings

MART_TABLES = ("t_patient_info", "t_zy_visit", "t_diag_record", "t_lab_result", "t_med_order")


def current_key(settings: Settings) -> bytes:
    with connect(settings.db_url(EVAL_DB)) as conn:
        row = conn.execute("select hmac_key from deid_secret.hmac_key").fetchone()
    assert row is not None
    return bytes(row[0])


def keyed(key: bytes, purpose: str, value: str) -> str:
    return hmac.new(key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def pseudonym(key: bytes, purpose: str, prefix: str, value: str) -> str:
    return prefix + keyed(key, purpose, value)[:20]


def shift_days(key: bytes, patient_id: str) -> int:
    return 7 * (1 + int(keyed(key, "shift", patient_id)[:8], 16) % 52)


# An update_time for a change made in prod now: production's clock runs SNAPSHOT_LAG past the snapshot,
# so past the wall clock (its last rows are from 2027), and a change must come after them to be synced.
CHANGED_NOW = "(clock_timestamp() + interval '2 years')"
SNAPSHOT_NOW = datetime.combine(DEFAULT_AS_OF, time(23, 59, 59))
# The time each table's row happened at: a row is synced once its shifted time is by the snapshot's now.
HAPPENED = {
    "t_patient_info": "jdrq",
    "t_zy_visit": "ryrq",
    "t_diag_record": "zdsj",
    "t_lab_result": "exec_time",
    "t_med_order": "kssj",
}


def by_now(key: bytes, patient_id: str, happened: datetime) -> bool:
    """Whether a prod time, moved by its patient's shift, is by the snapshot's "now"."""
    return happened - timedelta(days=shift_days(key, patient_id)) <= SNAPSHOT_NOW


def content_fingerprint(settings: Settings) -> dict[str, str]:
    """md5 of each mart's full content, order-independent."""
    out = {}
    with connect(settings.db_url(EVAL_DB)) as conn:
        for schema, table in [
            *(("emr", t) for t in MART_TABLES),
            ("meta", "snapshot"),
            ("meta", "data_dictionary"),
            ("ops", "query_ticket"),
        ]:
            row = conn.execute(
                f"select md5(coalesce(string_agg(t::text, '|' order by t::text), '')) from {schema}.{table} t"
            ).fetchone()
            assert row is not None
            out[f"{schema}.{table}"] = str(row[0])
    return out
