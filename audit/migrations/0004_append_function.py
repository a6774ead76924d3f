"""PostgreSQL: the function that appends to the chain under the head's lock (``audit.chain``).

This is the one place the function's SQL is written: a database keeps the
function it migrated to, so a change to it is a new migration, and
``audit.chain`` calls whichever the latest one installed. On SQLite this
migration does nothing: the append runs in Python.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION impri_audit_append(entries jsonb)
RETURNS TABLE (out_seq bigint, out_at timestamptz, out_prev_hash text, out_hash text)
LANGUAGE plpgsql AS $$
DECLARE
    entry jsonb;
    head_seq bigint;
    head_hash text;
    stamp timestamptz;
    stamp_json bytea;
    new_hash text;
BEGIN
    SELECT h.seq, h.hash INTO head_seq, head_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_chainhead (id, seq, hash) VALUES (1, 0, repeat('0', 64))
            ON CONFLICT (id) DO NOTHING;
        SELECT h.seq, h.hash INTO head_seq, head_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE;
    END IF;
    -- Stamped under the lock, as Python does on SQLite: times never go back along the chain.
    stamp := clock_timestamp();
    stamp_json := convert_to(
        '"' || to_char(stamp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'UTF8'
    );
    FOR entry IN SELECT value FROM jsonb_array_elements(entries) WITH ORDINALITY ORDER BY ordinality
    LOOP
        head_seq := head_seq + 1;
        new_hash := encode(
            sha256(
                convert_to(head_hash || (entry ->> 'head'), 'UTF8') || stamp_json
                || convert_to((entry ->> 'tail') || head_seq::text || '}', 'UTF8')
            ),
            'hex'
        );
        INSERT INTO audit_auditevent
            (seq, scheme, at, actor_type, actor_id, actor_ref, action_id, event, data,
             prev_hash, hash)
        VALUES
            (head_seq, (entry ->> 'scheme')::integer, stamp, entry ->> 'actor_type',
             entry ->> 'actor_id', entry ->> 'actor_ref', entry ->> 'action_id',
             entry ->> 'event', entry -> 'data', head_hash, new_hash);
        out_seq := head_seq;
        out_at := stamp;
        out_prev_hash := head_hash;
        out_hash := new_hash;
        RETURN NEXT;
        head_hash := new_hash;
    END LOOP;
    UPDATE audit_chainhead SET seq = head_seq, hash = head_hash WHERE id = 1;
END;
$$;
"""

DROP = "DROP FUNCTION IF EXISTS impri_audit_append(jsonb)"


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_trail_hashing_and_guards"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
