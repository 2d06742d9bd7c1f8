-- Approvals where auditors look. The call views show who approved each call, through what
-- and why (`approver`, `approver_id`: the approver's typed identity, `approval_method`,
-- `approval_reason`); `audit_approval_decisions` lists each decision (approved or denied,
-- by whom, through the API, the web page, the CLI, or in the call); `audit_records` gives
-- `querygate_auditor` the records themselves, with their chain columns, for
-- `querygate audit query --database` (the table stays closed to it).
--
-- Everything is read from `doc` (the hashed record as jsonb): no column is added, so the
-- table is not rewritten. New view columns go last, as CREATE OR REPLACE VIEW requires.

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
) i ON true
WHERE o.phase = 'outcome'
  AND (o.query_class IN ('mutation_create', 'mutation_delete', 'lifecycle')
       OR o.tool = 'pull_provider');

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

-- Every approval decision: the approval, whether it was approved or denied, who decided
-- (`decider`: the principal that decided, with its issuer; `approver_id` its typed
-- identity), through what (`approval_method`: api, web, cli) and why, and what the call was.
CREATE VIEW audit_approval_decisions AS
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

-- The records themselves, for `querygate audit query --database` run as an auditor.
CREATE VIEW audit_records AS
SELECT id, stream, seq, at, prev_hash, record, hash, mac, tenant, principal,
       doc ->> 'issuer' AS issuer, tool, query_class, decision, outcome, phase
FROM audit_events;

REVOKE ALL ON audit_approval_decisions, audit_records FROM PUBLIC;
GRANT SELECT ON audit_approval_decisions, audit_records TO querygate_auditor;
