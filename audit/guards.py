"""Database triggers that keep the audit log append-only, on SQLite and PostgreSQL.

Installed by migration ``audit.0003``. No application code path lifts them:
the test suite alone drops them around its flushes (``tests/conftest.py``),
since Django empties tables between transactional tests.

- ``audit_auditevent``: UPDATE, DELETE (and on PostgreSQL TRUNCATE) refused.
- ``audit_chainhead``: DELETE (and TRUNCATE) refused, and an UPDATE that moves
  the head back; the head is what tells verification how long the chain is.

A future migration that remakes either table on SQLite (Django does so for most
AddField/AlterField there) drops its triggers with the old table: end such a
migration with ``RunPython`` calling :func:`install` again.
``tests/audit/test_audit_trail.py`` fails if they are missing after all migrations.
"""

from __future__ import annotations

MESSAGE = "audit events are append-only"

# name -> CREATE statement
SQLITE_TRIGGERS = {
    "audit_event_no_update": f"""
CREATE TRIGGER IF NOT EXISTS audit_event_no_update BEFORE UPDATE ON audit_auditevent
BEGIN SELECT RAISE(ABORT, '{MESSAGE}: UPDATE refused on audit_auditevent'); END""",
    "audit_event_no_delete": f"""
CREATE TRIGGER IF NOT EXISTS audit_event_no_delete BEFORE DELETE ON audit_auditevent
BEGIN SELECT RAISE(ABORT, '{MESSAGE}: DELETE refused on audit_auditevent'); END""",
    "audit_chainhead_no_delete": f"""
CREATE TRIGGER IF NOT EXISTS audit_chainhead_no_delete BEFORE DELETE ON audit_chainhead
BEGIN SELECT RAISE(ABORT, '{MESSAGE}: DELETE refused on audit_chainhead'); END""",
    "audit_chainhead_forward_only": f"""
CREATE TRIGGER IF NOT EXISTS audit_chainhead_forward_only BEFORE UPDATE ON audit_chainhead
WHEN NEW.seq < OLD.seq
BEGIN SELECT RAISE(ABORT, '{MESSAGE}: the chain head never moves back'); END""",
}

POSTGRESQL_CREATE = f"""
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '{MESSAGE}: % refused on %', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION audit_chainhead_forward_only() RETURNS trigger AS $$
BEGIN
    IF NEW.seq < OLD.seq THEN
        RAISE EXCEPTION '{MESSAGE}: the chain head never moves back'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_auditevent;
CREATE TRIGGER audit_event_no_truncate
    BEFORE TRUNCATE ON audit_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
DROP TRIGGER IF EXISTS audit_chainhead_no_delete ON audit_chainhead;
CREATE TRIGGER audit_chainhead_no_delete
    BEFORE DELETE ON audit_chainhead
    FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
DROP TRIGGER IF EXISTS audit_chainhead_no_truncate ON audit_chainhead;
CREATE TRIGGER audit_chainhead_no_truncate
    BEFORE TRUNCATE ON audit_chainhead
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
DROP TRIGGER IF EXISTS audit_chainhead_forward_only ON audit_chainhead;
CREATE TRIGGER audit_chainhead_forward_only
    BEFORE UPDATE ON audit_chainhead
    FOR EACH ROW EXECUTE FUNCTION audit_chainhead_forward_only();
"""

POSTGRESQL_DROP = """
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_auditevent;
DROP TRIGGER IF EXISTS audit_chainhead_no_delete ON audit_chainhead;
DROP TRIGGER IF EXISTS audit_chainhead_no_truncate ON audit_chainhead;
DROP TRIGGER IF EXISTS audit_chainhead_forward_only ON audit_chainhead;
DROP FUNCTION IF EXISTS audit_chainhead_forward_only();
"""

# The tables the triggers guard (the test suite's flush lifts and restores them).
GUARDED_TABLES = ("audit_auditevent", "audit_chainhead")


def install(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_CREATE, params=None)
    elif vendor == "sqlite":
        for statement in SQLITE_TRIGGERS.values():
            schema_editor.execute(statement, params=None)


def uninstall(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_DROP, params=None)
    elif vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}", params=None)
