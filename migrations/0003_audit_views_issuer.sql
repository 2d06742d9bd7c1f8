-- The auditor views name the JWT issuer beside the principal (a principal is its issuer and
-- subject together: the same `sub` of two issuers is two callers), `audit_mutations` shows
-- the arguments (which provider a `pull_provider` installed), and `audit_auth_failures`
-- lists the requests authentication refused (`phase = 'auth_failure'`, rate-limited per
-- reason and client address; `suppressed` counts those left out).
--
-- `issuer`, `client_addr` and `suppressed` are read from `doc` (the hashed record as jsonb):
-- no column is added, so the table is not rewritten. New view columns go last, as
-- CREATE OR REPLACE VIEW requires; the grants of 0002 stay.

CREATE OR REPLACE VIEW audit_calls AS
SELECT at, tenant, principal, auth_method, cert_fingerprint, os_user, replica, call_id,
       request_id, trace_id, client_name, client_version, protocol_version, tool, mode,
       decision, query_class, sql, sql_sha256, args, approval_id, outcome, error_code, error,
       duration_ms, rows_returned, upstream_status, doc ->> 'issuer' AS issuer
FROM audit_events
WHERE phase = 'outcome';

CREATE OR REPLACE VIEW audit_mutations AS
SELECT o.at, o.tenant, o.principal, o.auth_method, o.tool, o.mode, o.query_class, o.sql,
       o.sql_sha256, o.decision, o.approval_id, o.outcome, o.error_code, o.error,
       o.upstream_status, o.call_id, i.at AS intent_at, o.doc ->> 'issuer' AS issuer, o.args
FROM audit_events o
LEFT JOIN LATERAL (
    SELECT min(x.at) AS at FROM audit_events x
    WHERE x.call_id = o.call_id AND x.phase = 'intent'
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
      SELECT 1 FROM audit_events o WHERE o.call_id = i.call_id AND o.phase = 'outcome'
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
       doc ->> 'issuer' AS issuer
FROM audit_events
WHERE phase = 'outcome'
GROUP BY tenant, principal, auth_method, doc ->> 'issuer',
         date_trunc('day', at AT TIME ZONE 'UTC');

-- Requests refused by authentication: what the credential claimed (unverified for an
-- invalid token), from where, why, and how many more of that reason and address followed.
CREATE VIEW audit_auth_failures AS
SELECT at, error_code AS reason, error, doc ->> 'client_addr' AS client_addr,
       auth_method, principal AS claimed_subject, doc ->> 'issuer' AS claimed_issuer,
       cert_fingerprint, request_id, replica,
       coalesce((doc ->> 'suppressed')::bigint, 0) AS suppressed
FROM audit_events
WHERE phase = 'auth_failure';

REVOKE ALL ON audit_auth_failures FROM PUBLIC;
GRANT SELECT ON audit_auth_failures TO querygate_auditor;
