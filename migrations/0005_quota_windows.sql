-- Quota counters shared by every replica: one row per quota key (tenant and class, or
-- tenant, class and a digest of the principal) and fixed window (its start, Unix seconds).
-- A replica adds the calls it leases with one INSERT … ON CONFLICT DO UPDATE … RETURNING;
-- windows that ended hours ago are deleted by the replicas.
CREATE TABLE IF NOT EXISTS quota_windows (
    key          text   NOT NULL,
    window_start bigint NOT NULL,
    used         bigint NOT NULL,
    PRIMARY KEY (key, window_start)
);

CREATE INDEX IF NOT EXISTS quota_windows_window_start
    ON quota_windows (window_start);
