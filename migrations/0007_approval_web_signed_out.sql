-- Sessions of the approval page that were signed out. A session cookie is sealed and holds
-- no server state, so signing out records the session's id (a SHA-256 digest, never the
-- cookie) until the cookie would have expired anyway; every replica refuses it from then.
CREATE TABLE IF NOT EXISTS approval_web_signed_out (
    session_sha256 text        PRIMARY KEY CHECK (session_sha256 ~ '^[0-9a-f]{64}$'),
    expires_at     timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS approval_web_signed_out_expires_at
    ON approval_web_signed_out (expires_at);
