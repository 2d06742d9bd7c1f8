-- Anchoring the audit chains (docs/audit.md "Tamper evidence").
--
-- `audit_events.mac`: the HMAC-SHA256 of the row's `hash` under the audit key
-- (`audit.mac_key_file`), which querygate and the auditor hold and no database role does: a
-- row that the writer role inserts, or that the owner rewrites with recomputed hashes,
-- cannot carry a valid MAC. NULL for rows written without a key (and before this migration).
-- The CHECK is NOT VALID so that adding it does not scan the table; it holds for new rows.
--
-- `audit_heads`: one row per stream, the last record the writer committed (seq, hash), the
-- time, and a MAC of those under the audit key, advanced in the same statement as the rows
-- by `audit_advance_head`, which never moves a head back. `verify --database` compares each
-- stream with its head, so rows removed from the end of a stream show.

ALTER TABLE audit_events ADD COLUMN mac text;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_mac_hex
    CHECK (mac ~ '^[0-9a-f]{64}$') NOT VALID;

CREATE TABLE audit_heads (
    stream     text PRIMARY KEY,
    seq        bigint      NOT NULL CHECK (seq > 0),
    hash       text        NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    at         text        NOT NULL,
    mac        text        CHECK (mac ~ '^[0-9a-f]{64}$'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A head only moves forward; it is never removed (the owner included, while the triggers
-- are on).
CREATE FUNCTION audit_heads_refuse_rewind() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.stream = OLD.stream AND NEW.seq > OLD.seq THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_heads only moves forward: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_heads_forward_only
    BEFORE UPDATE OR DELETE ON audit_heads
    FOR EACH ROW EXECUTE FUNCTION audit_heads_refuse_rewind();

CREATE TRIGGER audit_heads_no_truncate
    BEFORE TRUNCATE ON audit_heads
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- Moves a stream's head to (seq, hash) when that is further than where it is; true when it
-- moved.
CREATE FUNCTION audit_advance_head(p_stream text, p_seq bigint, p_hash text, p_at text,
                                   p_mac text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO audit_heads AS h (stream, seq, hash, at, mac)
    VALUES (p_stream, p_seq, p_hash, p_at, p_mac)
    ON CONFLICT (stream) DO UPDATE
        SET seq = EXCLUDED.seq, hash = EXCLUDED.hash, at = EXCLUDED.at, mac = EXCLUDED.mac,
            updated_at = now()
        WHERE h.seq < EXCLUDED.seq;
    RETURN FOUND;
END
$$;

REVOKE ALL ON audit_heads FROM PUBLIC;
REVOKE ALL ON FUNCTION audit_advance_head(text, bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION audit_advance_head(text, bigint, text, text, text)
    TO querygate_writer;
