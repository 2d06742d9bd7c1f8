-- MCP tasks (the io.modelcontextprotocol/tasks extension): one row per long-running call a
-- client asked to run as a task. `call` holds what a replica needs to resume it (the tool,
-- its arguments, the principal without any credential); `handle` the upstream operation's
-- handle once the write was acknowledged. `state` moves working → completed | failed |
-- cancelled exactly once (UPDATE … WHERE state = 'working'). The replica running a task
-- holds a lease (`replica`, `lease_until_ms`) and renews it; another replica takes over a
-- working task whose lease ran out with one UPDATE … WHERE lease_until_ms < now. Times
-- are milliseconds since the Unix epoch, from the server's clock. Finished rows are pruned
-- after `tasks.retention`.
CREATE TABLE IF NOT EXISTS mcp_tasks (
    task_id           text    PRIMARY KEY,
    tenant            text    NOT NULL,
    principal_method  text    NOT NULL,
    principal_issuer  text    NOT NULL,
    principal_subject text    NOT NULL,
    call              jsonb   NOT NULL,
    state             text    NOT NULL DEFAULT 'working'
        CHECK (state IN ('working', 'completed', 'failed', 'cancelled')),
    handle            jsonb,
    result            jsonb,
    status_message    text,
    cancel_requested  boolean NOT NULL DEFAULT false,
    replica           text    NOT NULL,
    lease_until_ms    bigint  NOT NULL,
    created_ms        bigint  NOT NULL,
    updated_ms        bigint  NOT NULL
);

CREATE INDEX IF NOT EXISTS mcp_tasks_tenant ON mcp_tasks (tenant);

CREATE INDEX IF NOT EXISTS mcp_tasks_working_lease
    ON mcp_tasks (lease_until_ms) WHERE state = 'working';

CREATE INDEX IF NOT EXISTS mcp_tasks_finished
    ON mcp_tasks (updated_ms) WHERE state <> 'working';
