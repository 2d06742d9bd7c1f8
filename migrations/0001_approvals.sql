-- Approvals redeemed: one row per one-time approval id. Redeeming inserts the id; a second
-- redemption of the same id, on any replica, inserts nothing and is refused. Rows are kept
-- past the approval's expiry (after which its sealed state no longer opens anyway) and then
-- pruned by the service.
CREATE TABLE IF NOT EXISTS approval_redemptions (
    tenant      text        NOT NULL,
    approval_id text        NOT NULL,
    redeemed_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, approval_id)
);

CREATE INDEX IF NOT EXISTS approval_redemptions_expires_at
    ON approval_redemptions (expires_at);
