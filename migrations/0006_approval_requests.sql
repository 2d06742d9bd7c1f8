-- Out-of-band approvals: one row per pending approval of one call (tenant, principal, tool,
-- arguments digest). `request` holds what was asked (the SQL, the plan hash and its writes,
-- the prompt) as JSON, fixed when the row is made; `state` moves pending → approved | denied,
-- approved → used (exactly once: the UPDATE's WHERE state = 'approved' lets one replica
-- win), and pending | approved → expired. Rows are pruned an hour after they expired.
CREATE TABLE IF NOT EXISTS approval_requests (
    tenant            text        NOT NULL,
    approval_id       text        NOT NULL,
    principal_method  text        NOT NULL,
    principal_issuer  text        NOT NULL,
    principal_subject text        NOT NULL,
    tool              text        NOT NULL,
    arguments_sha256  text        NOT NULL,
    request           jsonb       NOT NULL,
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    state             text        NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'used')),
    decision          jsonb,
    PRIMARY KEY (tenant, approval_id)
);

-- At most one pending approval per call: a second replica creating one finds the first.
CREATE UNIQUE INDEX IF NOT EXISTS approval_requests_one_pending
    ON approval_requests (tenant, principal_method, principal_issuer, principal_subject, tool, arguments_sha256)
    WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS approval_requests_call
    ON approval_requests (tenant, principal_method, principal_issuer, principal_subject, tool, arguments_sha256, created_at);

CREATE INDEX IF NOT EXISTS approval_requests_expires_at
    ON approval_requests (expires_at);
