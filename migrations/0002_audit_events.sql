-- Audit events: one row per audit record (an intent before a side effect, an outcome per
-- tool call), append-only, hash-chained per stream (one stream per replica).
--
-- `record` holds the record's canonical JSON exactly as hashed: `hash` is the SHA-256 (hex)
-- of `record`, and `record` names `prev_hash`, the hash of the stream's previous record.
-- `doc` is `record` as jsonb; the other columns are derived from it, so they cannot
-- disagree with what was hashed. `querygate audit verify --database` checks all of it.

CREATE TABLE audit_events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream           text        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq > 0),
    at               timestamptz NOT NULL,
    record           text        NOT NULL,
    doc              jsonb       NOT NULL,
    prev_hash        text        NOT NULL CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    hash             text        NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    inserted_at      timestamptz NOT NULL DEFAULT now(),
    phase            text GENERATED ALWAYS AS (doc ->> 'phase') STORED,
    call_id          text GENERATED ALWAYS AS (doc ->> 'call_id') STORED,
    request_id       text GENERATED ALWAYS AS (doc ->> 'request_id') STORED,
    trace_id         text GENERATED ALWAYS AS (doc ->> 'trace_id') STORED,
    replica          text GENERATED ALWAYS AS (doc ->> 'replica') STORED,
    tenant           text GENERATED ALWAYS AS (doc ->> 'tenant') STORED,
    principal        text GENERATED ALWAYS AS (doc ->> 'principal') STORED,
    auth_method      text GENERATED ALWAYS AS (doc ->> 'auth_method') STORED,
    cert_fingerprint text GENERATED ALWAYS AS (doc ->> 'cert_fingerprint') STORED,
    os_user          text GENERATED ALWAYS AS (doc ->> 'os_user') STORED,
    client_name      text GENERATED ALWAYS AS (doc ->> 'client_name') STORED,
    client_version   text GENERATED ALWAYS AS (doc ->> 'client_version') STORED,
    protocol_version text GENERATED ALWAYS AS (doc ->> 'protocol_version') STORED,
    tool             text GENERATED ALWAYS AS (doc ->> 'tool') STORED,
    mode             text GENERATED ALWAYS AS (doc ->> 'mode') STORED,
    decision         text GENERATED ALWAYS AS (doc ->> 'decision') STORED,
    query_class      text GENERATED ALWAYS AS (doc ->> 'query_class') STORED,
    sql              text GENERATED ALWAYS AS (doc ->> 'sql') STORED,
    sql_sha256       text GENERATED ALWAYS AS (doc ->> 'sql_sha256') STORED,
    args             jsonb GENERATED ALWAYS AS (doc -> 'args') STORED,
    approval_id      text GENERATED ALWAYS AS (doc ->> 'approval_id') STORED,
    outcome          text GENERATED ALWAYS AS (doc ->> 'outcome') STORED,
    error_code       text GENERATED ALWAYS AS (doc ->> 'error_code') STORED,
    error            text GENERATED ALWAYS AS (doc ->> 'error') STORED,
    duration_ms      bigint GENERATED ALWAYS AS ((doc ->> 'duration_ms')::bigint) STORED,
    rows_returned    bigint GENERATED ALWAYS AS ((doc ->> 'rows_returned')::bigint) STORED,
    upstream_status  integer GENERATED ALWAYS AS ((doc ->> 'upstream_status')::integer) STORED,
    CONSTRAINT audit_events_stream_seq UNIQUE (stream, seq)
);

CREATE INDEX audit_events_tenant_at ON audit_events (tenant, at);
CREATE INDEX audit_events_tool_at ON audit_events (tool, at);
CREATE INDEX audit_events_decision_at ON audit_events (decision, at);
CREATE INDEX audit_events_class_at ON audit_events (query_class, at);
CREATE INDEX audit_events_principal_at ON audit_events (principal, at);
CREATE INDEX audit_events_call_id ON audit_events (call_id);
CREATE INDEX audit_events_at ON audit_events (at);

-- Append-only: no UPDATE, DELETE or TRUNCATE, whoever asks (owners included).
CREATE FUNCTION audit_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- The last record of a stream, for a writer that may not read the table.
CREATE FUNCTION audit_stream_head(p_stream text)
RETURNS TABLE (seq bigint, hash text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT e.seq, e.hash FROM audit_events e
    WHERE e.stream = p_stream
    ORDER BY e.seq DESC
    LIMIT 1
$$;

-- Roles (cluster-wide, so created only when missing): querygate_writer is what the
-- service's login role is granted (INSERT only); querygate_auditor reads the views only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'querygate_writer') THEN
        CREATE ROLE querygate_writer NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'querygate_auditor') THEN
        CREATE ROLE querygate_auditor NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

REVOKE ALL ON audit_events FROM PUBLIC;
REVOKE ALL ON FUNCTION audit_stream_head(text) FROM PUBLIC;
GRANT INSERT ON audit_events TO querygate_writer;
GRANT EXECUTE ON FUNCTION audit_stream_head(text) TO querygate_writer;

-- Views for auditors. They run with the owner's rights, so querygate_auditor needs (and
-- has) no right on the table itself, and never sees `record`, `doc` or the chain columns.

-- Every tool call: one row per outcome record.
CREATE VIEW audit_calls AS
SELECT at, tenant, principal, auth_method, cert_fingerprint, os_user, replica, call_id,
       request_id, trace_id, client_name, client_version, protocol_version, tool, mode,
       decision, query_class, sql, sql_sha256, args, approval_id, outcome, error_code, error,
       duration_ms, rows_returned, upstream_status
FROM audit_events
WHERE phase = 'outcome';

-- Calls that change something (writes, EXEC, pull_provider), with the approval that let
-- them run and when their intent was recorded.
CREATE VIEW audit_mutations AS
SELECT o.at, o.tenant, o.principal, o.auth_method, o.tool, o.mode, o.query_class, o.sql,
       o.sql_sha256, o.decision, o.approval_id, o.outcome, o.error_code, o.error,
       o.upstream_status, o.call_id, i.at AS intent_at
FROM audit_events o
LEFT JOIN LATERAL (
    SELECT min(x.at) AS at FROM audit_events x
    WHERE x.call_id = o.call_id AND x.phase = 'intent'
) i ON true
WHERE o.phase = 'outcome'
  AND (o.query_class IN ('mutation_create', 'mutation_delete', 'lifecycle')
       OR o.tool = 'pull_provider');

-- Side effects whose intent was recorded but whose outcome never was (the process died or
-- lost its audit sink mid-call): check the provider for what happened.
CREATE VIEW audit_unfinished_intents AS
SELECT i.at, i.tenant, i.principal, i.tool, i.query_class, i.sql, i.approval_id, i.call_id,
       i.replica
FROM audit_events i
WHERE i.phase = 'intent'
  AND NOT EXISTS (
      SELECT 1 FROM audit_events o WHERE o.call_id = i.call_id AND o.phase = 'outcome'
  );

-- Calls the gate or the audit refused, and approvals declined, dismissed or unavailable.
CREATE VIEW audit_refusals AS
SELECT at, tenant, principal, tool, mode, decision, query_class, sql, error_code, error,
       call_id
FROM audit_events
WHERE phase = 'outcome'
  AND (decision IN ('refuse_immediate', 'needs_approval_declined', 'needs_approval_cancelled',
                    'needs_approval_unavailable')
       OR error_code LIKE 'policy.%'
       OR error_code LIKE 'audit.%');

-- Per principal and UTC day: how many calls, writes, refusals and errors.
CREATE VIEW audit_principal_activity AS
SELECT tenant, principal, auth_method, date_trunc('day', at AT TIME ZONE 'UTC') AS day,
       count(*) AS calls,
       count(*) FILTER (WHERE query_class IN ('mutation_create', 'mutation_delete', 'lifecycle')
                          OR tool = 'pull_provider') AS side_effects,
       count(*) FILTER (WHERE decision IN ('refuse_immediate', 'needs_approval_declined',
                                           'needs_approval_cancelled',
                                           'needs_approval_unavailable')) AS refusals,
       count(*) FILTER (WHERE outcome = 'error') AS errors,
       min(at) AS first_at, max(at) AS last_at
FROM audit_events
WHERE phase = 'outcome'
GROUP BY tenant, principal, auth_method, date_trunc('day', at AT TIME ZONE 'UTC');

REVOKE ALL ON audit_calls, audit_mutations, audit_unfinished_intents, audit_refusals,
    audit_principal_activity FROM PUBLIC;
GRANT SELECT ON audit_calls, audit_mutations, audit_unfinished_intents, audit_refusals,
    audit_principal_activity TO querygate_auditor;
