-- Tables that scale (docs/audit.md "Partitions and retention").
--
-- `audit_events` becomes a table partitioned by `at` (the call's start: a call's intent and
-- outcome share it, so both land in one partition and the views join them there), one
-- partition per UTC day named `audit_events_pYYYYMMDD`, and a DEFAULT partition that takes
-- any record whose day has no partition yet, so an insert never fails for want of one.
-- The rows of the unpartitioned table are copied into it, in this transaction, and the
-- counts compared before the old table is dropped: no record is lost, or nothing changes.
--
-- A primary key or unique constraint of a partitioned table must hold the partition key:
-- `(stream, seq)` is unique per `at` in the table, and unique outright through the stream's
-- head (`audit_append_head` refuses a batch that does not follow the head, with the
-- `unique_violation` the writer already retries on).
--
-- `audit_retention_cuts`: what retention removed, one row per partition and stream (the
-- seq range, the count, the hash of the last record removed), MACed under the audit key,
-- append-only; `audit verify --database` starts each stream from its cuts. Auditors read it
-- through `audit_retention`.

ALTER TABLE audit_events RENAME TO audit_events_unpartitioned;
ALTER TABLE audit_events_unpartitioned RENAME CONSTRAINT audit_events_stream_seq
    TO audit_events_unpartitioned_stream_seq;
ALTER INDEX audit_events_pkey RENAME TO audit_events_unpartitioned_pkey;
ALTER INDEX audit_events_tenant_at RENAME TO audit_events_unpartitioned_tenant_at;
ALTER INDEX audit_events_tool_at RENAME TO audit_events_unpartitioned_tool_at;
ALTER INDEX audit_events_decision_at RENAME TO audit_events_unpartitioned_decision_at;
ALTER INDEX audit_events_class_at RENAME TO audit_events_unpartitioned_class_at;
ALTER INDEX audit_events_principal_at RENAME TO audit_events_unpartitioned_principal_at;
ALTER INDEX audit_events_call_id RENAME TO audit_events_unpartitioned_call_id;
ALTER INDEX audit_events_at RENAME TO audit_events_unpartitioned_at;

CREATE TABLE audit_events (
    id               bigint GENERATED ALWAYS AS IDENTITY,
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
    mac              text CHECK (mac ~ '^[0-9a-f]{64}$'),
    CONSTRAINT audit_events_pkey PRIMARY KEY (id, at),
    CONSTRAINT audit_events_stream_seq UNIQUE (stream, seq, at)
) PARTITION BY RANGE (at);

CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;

-- The auditors' questions: a tenant, a principal, a class over a time range (within the
-- partitions the range prunes to), a tenant's statements of one class, an approval, a
-- call's records (the views join intent and outcome by call id and start).
CREATE INDEX audit_events_tenant_at ON audit_events (tenant, at);
CREATE INDEX audit_events_tenant_class_at ON audit_events (tenant, query_class, at);
CREATE INDEX audit_events_principal_at ON audit_events (principal, at);
CREATE INDEX audit_events_class_at ON audit_events (query_class, at);
CREATE INDEX audit_events_approval_id ON audit_events (approval_id)
    WHERE approval_id IS NOT NULL;
CREATE INDEX audit_events_call_id ON audit_events (call_id, at);
CREATE INDEX audit_events_at ON audit_events (at);

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- Creates the daily partitions of `p_days` days (1..366) from `p_from` that are missing; returns
-- the names it created. Safe to run from several processes at once (an advisory lock
-- serialises them, and a partition already there is left alone). A day whose records
-- already went to the DEFAULT partition (no partition existed when they were written) is
-- skipped with a notice: its records stay in DEFAULT, where queries still find them.
CREATE FUNCTION audit_create_partitions(p_from date, p_days integer)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    d date;
    name text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('querygate.audit_events.partitions'));
    FOR i IN 0 .. least(greatest(p_days, 1), 366) - 1 LOOP
        d := p_from + i;
        name := 'audit_events_p' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)',
                name, d::text || ' 00:00:00+00', (d + 1)::text || ' 00:00:00+00');
            EXECUTE format(
                'CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON %I '
                'FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change()', name);
            RETURN NEXT name;
        EXCEPTION
            WHEN check_violation THEN
                RAISE NOTICE 'audit_events: % has records in the DEFAULT partition; left there', d;
            WHEN duplicate_table THEN
                NULL;
        END;
    END LOOP;
END
$$;

CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- The existing rows: a partition for every day they cover, then a copy of every row (ids
-- kept), then the counts compared.
DO $$
DECLARE
    first_day date;
    last_day date;
    copied bigint;
    expected bigint;
BEGIN
    SELECT min(at AT TIME ZONE 'UTC')::date, max(at AT TIME ZONE 'UTC')::date
        INTO first_day, last_day FROM audit_events_unpartitioned;
    WHILE first_day <= last_day LOOP
        PERFORM audit_create_partitions(first_day, least(366, last_day - first_day + 1));
        first_day := first_day + 366;
    END LOOP;
    PERFORM audit_create_partitions((now() AT TIME ZONE 'UTC')::date, 8);
    INSERT INTO audit_events (id, stream, seq, at, record, doc, prev_hash, hash, inserted_at,
                              mac)
    OVERRIDING SYSTEM VALUE
    SELECT id, stream, seq, at, record, doc, prev_hash, hash, inserted_at, mac
    FROM audit_events_unpartitioned;
    GET DIAGNOSTICS copied = ROW_COUNT;
    SELECT count(*) INTO expected FROM audit_events_unpartitioned;
    IF copied <> expected OR (SELECT count(*) FROM audit_events) <> expected THEN
        RAISE EXCEPTION 'audit_events: copied % of % records', copied, expected;
    END IF;
    PERFORM setval(pg_get_serial_sequence('audit_events', 'id'),
                   greatest((SELECT max(id) FROM audit_events), 1),
                   (SELECT max(id) FROM audit_events) IS NOT NULL);
END
$$;

-- The views, as 0003 and 0008 left them, on the new table. A call's intent and outcome
-- carry its start (the same `at`); the views look one up from the other within a day of it,
-- so that a lookup reads one or two partitions, not all of them.
CREATE OR REPLACE VIEW audit_calls AS
SELECT at, tenant, principal, auth_method, cert_fingerprint, os_user, replica, call_id,
       request_id, trace_id, client_name, client_version, protocol_version, tool, mode,
       decision, query_class, sql, sql_sha256, args, approval_id, outcome, error_code, error,
       duration_ms, rows_returned, upstream_status, doc ->> 'issuer' AS issuer,
       doc ->> 'approver' AS approver, doc ->> 'approver_id' AS approver_id,
       doc ->> 'approval_method' AS approval_method, doc ->> 'approval_reason' AS approval_reason
FROM audit_events
WHERE phase = 'outcome';

CREATE OR REPLACE VIEW audit_mutations AS
SELECT o.at, o.tenant, o.principal, o.auth_method, o.tool, o.mode, o.query_class, o.sql,
       o.sql_sha256, o.decision, o.approval_id, o.outcome, o.error_code, o.error,
       o.upstream_status, o.call_id, i.at AS intent_at, o.doc ->> 'issuer' AS issuer, o.args,
       o.doc ->> 'approver' AS approver, o.doc ->> 'approver_id' AS approver_id,
       o.doc ->> 'approval_method' AS approval_method,
       o.doc ->> 'approval_reason' AS approval_reason
FROM audit_events o
LEFT JOIN LATERAL (
    SELECT min(x.at) AS at FROM audit_events x
    WHERE x.call_id = o.call_id AND x.phase = 'intent'
      AND x.at BETWEEN o.at - interval '1 day' AND o.at
) i ON true
WHERE o.phase = 'outcome'
  AND (o.query_class IN ('mutation_create', 'mutation_delete', 'lifecycle')
       OR o.tool = 'pull_provider');

CREATE OR REPLACE VIEW audit_unfinished_intents AS
SELECT i.at, i.tenant, i.principal, i.tool, i.query_class, i.sql, i.approval_id, i.call_id,
       i.replica, i.doc ->> 'issuer' AS issuer
FROM audit_events i
WHERE i.phase = 'intent'
  AND NOT EXISTS (
      SELECT 1 FROM audit_events o
      WHERE o.call_id = i.call_id AND o.phase = 'outcome'
        AND o.at BETWEEN i.at AND i.at + interval '1 day'
  );

CREATE OR REPLACE VIEW audit_refusals AS
SELECT at, tenant, principal, tool, mode, decision, query_class, sql, error_code, error,
       call_id, doc ->> 'issuer' AS issuer
FROM audit_events
WHERE phase = 'outcome'
  AND (decision IN ('refuse_immediate', 'needs_approval_declined', 'needs_approval_cancelled',
                    'needs_approval_unavailable')
       OR error_code LIKE 'policy.%'
       OR error_code LIKE 'audit.%');

CREATE OR REPLACE VIEW audit_principal_activity AS
SELECT tenant, principal, auth_method, date_trunc('day', at AT TIME ZONE 'UTC') AS day,
       count(*) AS calls,
       count(*) FILTER (WHERE query_class IN ('mutation_create', 'mutation_delete', 'lifecycle')
                          OR tool = 'pull_provider') AS side_effects,
       count(*) FILTER (WHERE decision IN ('refuse_immediate', 'needs_approval_declined',
                                           'needs_approval_cancelled',
                                           'needs_approval_unavailable')) AS refusals,
       count(*) FILTER (WHERE outcome = 'error') AS errors,
       min(at) AS first_at, max(at) AS last_at,
       doc ->> 'issuer' AS issuer,
       count(*) FILTER (WHERE decision = 'needs_approval_accepted') AS approved_calls,
       array_agg(DISTINCT doc ->> 'approver') FILTER (WHERE doc ->> 'approver' IS NOT NULL)
           AS approvers
FROM audit_events
WHERE phase = 'outcome'
GROUP BY tenant, principal, auth_method, doc ->> 'issuer',
         date_trunc('day', at AT TIME ZONE 'UTC');

CREATE OR REPLACE VIEW audit_auth_failures AS
SELECT at, error_code AS reason, error, doc ->> 'client_addr' AS client_addr,
       auth_method, principal AS claimed_subject, doc ->> 'issuer' AS claimed_issuer,
       cert_fingerprint, request_id, replica,
       coalesce((doc ->> 'suppressed')::bigint, 0) AS suppressed
FROM audit_events
WHERE phase = 'auth_failure';

CREATE OR REPLACE VIEW audit_approval_decisions AS
SELECT at, tenant, approval_id,
       CASE decision WHEN 'needs_approval_accepted' THEN 'approved'
                     WHEN 'needs_approval_declined' THEN 'denied'
                     ELSE decision END AS decided,
       doc ->> 'approver' AS approver, doc ->> 'approver_id' AS approver_id,
       doc ->> 'approval_method' AS approval_method, doc ->> 'approval_reason' AS approval_reason,
       principal AS decider, doc ->> 'issuer' AS decider_issuer, auth_method,
       tool, query_class, sql, call_id, replica
FROM audit_events
WHERE phase = 'approval_decision';

CREATE OR REPLACE VIEW audit_records AS
SELECT id, stream, seq, at, prev_hash, record, hash, mac, tenant, principal,
       doc ->> 'issuer' AS issuer, tool, query_class, decision, outcome, phase
FROM audit_events;

DROP TABLE audit_events_unpartitioned;

REVOKE ALL ON audit_events FROM PUBLIC;
GRANT INSERT ON audit_events TO querygate_writer;

-- The last record of a stream: the newest row, or the stream's head when retention removed
-- every row of it (so the writer continues after it instead of starting again at seq 1).
CREATE OR REPLACE FUNCTION audit_stream_head(p_stream text)
RETURNS TABLE (seq bigint, hash text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT s.seq, s.hash FROM (
        (SELECT e.seq, e.hash FROM audit_events e
         WHERE e.stream = p_stream ORDER BY e.seq DESC LIMIT 1)
        UNION ALL
        (SELECT h.seq, h.hash FROM audit_heads h WHERE h.stream = p_stream)
    ) s
    ORDER BY s.seq DESC
    LIMIT 1
$$;

-- Moves a stream's head to (p_seq, p_hash) for the batch p_first..p_seq, which must come
-- after the head. When it does not (another writer of the stream committed those seqs
-- first), it raises `unique_violation`, so the whole statement, rows included, is undone
-- and the writer links the batch again after the new head.
CREATE FUNCTION audit_append_head(p_stream text, p_first bigint, p_seq bigint, p_hash text,
                                  p_at text, p_mac text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE audit_heads AS h
        SET seq = p_seq, hash = p_hash, at = p_at, mac = p_mac, updated_at = now()
        WHERE h.stream = p_stream AND h.seq < p_first AND p_seq >= p_first;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM audit_heads h WHERE h.stream = p_stream) THEN
        RAISE EXCEPTION 'audit stream %: seq % is not after its head', p_stream, p_first
            USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO audit_heads (stream, seq, hash, at, mac)
    VALUES (p_stream, p_seq, p_hash, p_at, p_mac)
    ON CONFLICT (stream) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'audit stream %: another writer started it first', p_stream
            USING ERRCODE = 'unique_violation';
    END IF;
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION audit_append_head(text, bigint, bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_append_head(text, bigint, bigint, text, text, text)
    TO querygate_writer;
REVOKE ALL ON FUNCTION audit_create_partitions(date, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_create_partitions(date, integer) TO querygate_writer;

-- What retention removed: per partition and stream, the seqs it held (first..last, and how
-- many: a partition by time may hold a few records of a stream out of seq order, a call
-- that started before midnight and ended after), the hash of its last record, when, and a
-- MAC under the audit key over all of it.
CREATE TABLE audit_retention_cuts (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition  text        NOT NULL,
    range_from timestamptz NOT NULL,
    range_to   timestamptz NOT NULL,
    action     text        NOT NULL CHECK (action IN ('drop', 'detach')),
    stream     text        NOT NULL,
    first_seq  bigint      NOT NULL CHECK (first_seq > 0),
    last_seq   bigint      NOT NULL CHECK (last_seq >= first_seq),
    last_hash  text        NOT NULL CHECK (last_hash ~ '^[0-9a-f]{64}$'),
    records    bigint      NOT NULL CHECK (records > 0),
    cut_at     text        NOT NULL,
    mac        text        CHECK (mac ~ '^[0-9a-f]{64}$'),
    CONSTRAINT audit_retention_cuts_once UNIQUE (partition, stream)
);

CREATE TRIGGER audit_retention_cuts_append_only
    BEFORE UPDATE OR DELETE ON audit_retention_cuts
    FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

CREATE TRIGGER audit_retention_cuts_no_truncate
    BEFORE TRUNCATE ON audit_retention_cuts
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

CREATE VIEW audit_retention AS
SELECT partition, range_from, range_to, action, stream, first_seq, last_seq, last_hash,
       records, cut_at, mac IS NOT NULL AS anchored
FROM audit_retention_cuts;

REVOKE ALL ON audit_retention_cuts, audit_retention FROM PUBLIC;
GRANT SELECT ON audit_retention TO querygate_auditor;
