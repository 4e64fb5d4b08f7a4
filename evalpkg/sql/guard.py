"""The one definition of a statement allowed to run read-only: exactly one query, no writes, no
side-effecting functions. The agents' execute_sql, gold SQL and the ticket miner all ask `check`.

The database-level guard (read-only role and transaction, statement timeout) runs behind this;
this layer exists to give the model a clear reason instead of a server error, and to refuse
what a read-only transaction still allows (sleeping locks, file reads, config changes).
"""

from __future__ import annotations

import logging
import re

from sqlglot import exp

from evalpkg.errors import QueryError, SqlParseError
from evalpkg.sql.parse import parse_statement

# Functions with side effects, server file access, session changes, or dynamic SQL.
DENIED_FUNCTIONS = {
    "set_config",
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
    "pg_ls_logdir",
    "pg_ls_waldir",
    "pg_ls_tmpdir",
    "pg_ls_archive_statusdir",
    "pg_file_write",
    "pg_file_rename",
    "pg_file_unlink",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_switch_wal",
    "pg_promote",
    "pg_backup_start",
    "pg_backup_stop",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_create_restore_point",
    "pg_notify",
    "pg_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_xact_lock",
    "pg_advisory_unlock",
    "pg_advisory_unlock_all",
    "nextval",
    "setval",
    "currval",
    "lastval",
    "lo_import",
    "lo_export",
    "lo_create",
    "lo_open",
    "lo_unlink",
    "lo_put",
    "lo_get",
    "lo_from_bytea",
    "lowrite",
    "loread",
    "dblink",
    "dblink_exec",
    "dblink_connect",
    "dblink_open",
    "dblink_send_query",
    "query_to_xml",
    "query_to_xml_and_xmlschema",
    "query_to_xmlschema",
    "table_to_xml",
    "cursor_to_xml",
    "database_to_xml",
    "schema_to_xml",
    "pg_sleep_for",
    "pg_sleep_until",
    "txid_current",
    "pg_current_xact_id",
    "pg_logical_emit_message",
    "pg_replication_origin_create",
    "pg_create_logical_replication_slot",
    "pg_create_physical_replication_slot",
    "pg_drop_replication_slot",
    "pg_import_system_collations",
    "pg_stat_reset",
    "pg_stat_reset_shared",
    "pg_truncate_visibility_map",
    "pg_log_backend_memory_contexts",
    "current_setting",
    "pg_blocking_pids",
    "pg_get_keywords",
    "version",
    "pg_stat_get_activity",
    "pg_stat_get_backend_activity",
}
# Views holding the text of other sessions' statements: golds are run under the agents' role too, so a
# query here during another run's grading would read its answer key.
DENIED_RELATIONS = {"pg_stat_activity", "pg_stat_statements", "pg_stat_statements_info"}
WRITE_NODES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Command,
    exp.Set,
    exp.Copy,
    exp.Grant,
    exp.Lock,
    exp.Into,
)
# Statements sqlglot may not model but that must never start an agent's query.
LEADING_DENY = re.compile(
    r"^\s*(insert|update|delete|merge|create|drop|alter|truncate|grant|revoke|copy|lock|set|reset|"
    r"vacuum|analyze|cluster|reindex|refresh|listen|notify|unlisten|discard|prepare|execute|deallocate|"
    r"do|call|begin|start|commit|rollback|savepoint|release|load|import|security|comment|explain|show|"
    r"declare|fetch|move|close|checkpoint)\b",
    re.IGNORECASE,
)
MAX_SQL_CHARS = 20_000
logging.getLogger("sqlglot").setLevel(logging.ERROR)  # unsupported syntax is refused here anyway


class SqlRefused(QueryError):
    """The statement is not one read-only query; the message says why, for the model."""


def _strip_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.DOTALL)


def check(sql: str) -> exp.Query:
    """Return the parsed query, or raise SqlRefused with a one-line reason."""
    if not sql or not sql.strip():
        raise SqlRefused("empty SQL")
    if len(sql) > MAX_SQL_CHARS:
        raise SqlRefused(f"SQL longer than {MAX_SQL_CHARS} characters")
    if "\x00" in sql:
        raise SqlRefused("SQL contains a NUL byte")
    bare = _strip_comments(sql)
    if LEADING_DENY.match(bare):
        raise SqlRefused(f"only SELECT queries are allowed, got {bare.split()[0].upper()}")
    try:
        tree = parse_statement(sql)
    except SqlParseError as exc:
        raise SqlRefused(str(exc)) from exc
    if not isinstance(tree, exp.Query):
        raise SqlRefused(f"only SELECT queries are allowed, got {tree.key.upper()}")
    for node in tree.walk():
        if isinstance(node, WRITE_NODES):
            raise SqlRefused(f"{node.key.upper()} is not allowed inside a query")
        if isinstance(node, exp.Table) and node.name.lower() in DENIED_RELATIONS:
            raise SqlRefused(f"{node.name.lower()} (other sessions' statements) is not readable")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if isinstance(node, exp.CurrentVersion):  # the one denied built-in sqlglot renames
                name = "version"
            if name in DENIED_FUNCTIONS or name.startswith(("lo_", "dblink", "pg_read", "pg_ls_", "pg_file")):
                raise SqlRefused(f"function {name}() is not allowed")
    return tree


def is_single_select(sql: str) -> bool:
    """`check` as a yes/no: one read-only query that an agent's execute_sql would run."""
    try:
        check(sql)
    except SqlRefused:
        return False
    return True
