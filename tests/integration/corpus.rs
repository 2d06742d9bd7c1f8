//! A table-driven corpus: statements over the real provider documents of
//! `tests/fixtures/providers` (github, okta, google with compute in the split layout and
//! storage, digitalocean; copied unchanged from StackQL's registry), each with the rows or
//! listing StackQL's semantics give, against a mock upstream on 127.0.0.1.
//!
//! Every case must pass. The test prints how many did before it fails, so the figure can be
//! compared across changes.

use crate::mock::{Mock, Reply};

use crate::support::corpus::*;

struct Case {
    name: &'static str,
    sql: &'static str,
    /// Mock routes: key (see `Mock`) and JSON body answered with 200.
    routes: &'static [(&'static str, &'static str)],
    /// Expected column names, comma-separated; empty to skip the check.
    columns: &'static str,
    /// Expected rows as `a|b` lines, in order.
    rows: &'static [&'static str],
}

const CASES: &[Case] = &[
    // --- documents that load ---------------------------------------------------------
    Case {
        name: "github repos of an org",
        sql: "SELECT name FROM github.repos.repos WHERE org = 'acme' ORDER BY name",
        routes: &[("/orgs/acme/repos", r#"[{"name":"b"},{"name":"a"}]"#)],
        columns: "name",
        rows: &["a", "b"],
    },
    Case {
        name: "okta apps (upper-case method keys in $ref, no sqlVerbs)",
        sql: "SELECT id, label FROM okta.application.apps ORDER BY id",
        routes: &[(
            "/api/v1/apps",
            r#"[{"id":"a2","label":"Two"},{"id":"a1","label":"One"}]"#,
        )],
        columns: "id,label",
        rows: &["a1|One", "a2|Two"],
    },
    Case {
        name: "okta users of an app",
        sql: "SELECT id FROM okta.application.users WHERE appId = 'a1'",
        routes: &[("/api/v1/apps/a1/users", r#"[{"id":"u1"}]"#)],
        columns: "id",
        rows: &["u1"],
    },
    Case {
        name: "google compute disks (split layout list)",
        sql: "SELECT name, sizeGb FROM google.compute.disks WHERE project = 'p1' AND zone = 'z1' ORDER BY name",
        routes: &[(
            "/projects/p1/zones/z1/disks",
            r#"{"kind":"compute#diskList","items":[{"name":"d2","sizeGb":"20"},{"name":"d1","sizeGb":"10"}]}"#,
        )],
        columns: "name,sizeGb",
        rows: &["d1|10", "d2|20"],
    },
    Case {
        name: "google compute acceleratorTypes with a next page token",
        sql: "SELECT name FROM google.compute.acceleratorTypes WHERE project = 'p1' AND zone = 'z1' ORDER BY name",
        routes: &[
            (
                "/projects/p1/zones/z1/acceleratorTypes",
                r#"{"items":[{"name":"nvidia-t4"}],"nextPageToken":"t2"}"#,
            ),
            (
                "/projects/p1/zones/z1/acceleratorTypes?pageToken=t2",
                r#"{"items":[{"name":"nvidia-a100"}]}"#,
            ),
        ],
        columns: "name",
        rows: &["nvidia-a100", "nvidia-t4"],
    },
    Case {
        name: "google compute instances list",
        sql: "SELECT name, status FROM google.compute.instances WHERE project = 'p1' AND zone = 'z1'",
        routes: &[(
            "/projects/p1/zones/z1/instances",
            r#"{"items":[{"name":"vm1","status":"RUNNING"}]}"#,
        )],
        columns: "name,status",
        rows: &["vm1|RUNNING"],
    },
    Case {
        name: "google compute instances aggregatedList ($.items[*].instances[*])",
        sql: "SELECT name FROM google.compute.instances WHERE project = 'p1' ORDER BY name",
        routes: &[(
            "/projects/p1/aggregated/instances",
            r#"{"items":{"zones/z1":{"instances":[{"name":"vm1"},{"name":"vm2"}]},"zones/z2":{"warning":{"code":"NO_RESULTS_ON_PAGE"}}}}"#,
        )],
        columns: "name",
        rows: &["vm1", "vm2"],
    },
    Case {
        name: "google compute firewalls (operation $ref naming another version)",
        sql: "SELECT name FROM google.compute.firewalls WHERE project = 'p1'",
        routes: &[(
            "/projects/p1/global/firewalls",
            r#"{"items":[{"name":"allow-ssh"}]}"#,
        )],
        columns: "name",
        rows: &["allow-ssh"],
    },
    Case {
        name: "google storage buckets (plain layout)",
        sql: "SELECT name, location FROM google.storage.buckets WHERE project = 'p1'",
        routes: &[(
            "/b",
            r#"{"kind":"storage#buckets","items":[{"name":"bk1","location":"EU"}]}"#,
        )],
        columns: "name,location",
        rows: &["bk1|EU"],
    },
    Case {
        name: "digitalocean droplets",
        sql: "SELECT id, name FROM digitalocean.droplets.droplets ORDER BY id",
        routes: &[(
            "/v2/droplets",
            r#"{"droplets":[{"id":2,"name":"web2"},{"id":1,"name":"web1"}],"links":{},"meta":{"total":2}}"#,
        )],
        columns: "id,name",
        rows: &["1|web1", "2|web2"],
    },
    Case {
        name: "digitalocean sizes",
        sql: "SELECT slug, memory FROM digitalocean.sizes.sizes",
        routes: &[(
            "/v2/sizes",
            r#"{"sizes":[{"slug":"s-1vcpu-1gb","memory":1024}],"links":{},"meta":{"total":1}}"#,
        )],
        columns: "slug,memory",
        rows: &["s-1vcpu-1gb|1024"],
    },
    // --- listings ----------------------------------------------------------------------
    Case {
        name: "SHOW SERVICES: id, name, title",
        sql: "SHOW SERVICES IN google LIKE 'storage'",
        routes: &[],
        columns: "id,name,title",
        rows: &["storage:v1|storage|Cloud Storage JSON API"],
    },
    Case {
        name: "SHOW SERVICES in github",
        sql: "SHOW SERVICES IN github LIKE 'repos'",
        routes: &[],
        columns: "id,name,title",
        rows: &["repos:v0.3.1|repos|GitHub v3 REST API - repos"],
    },
    Case {
        name: "SHOW RESOURCES: name, id",
        sql: "SHOW RESOURCES IN digitalocean.sizes",
        routes: &[],
        columns: "name,id",
        rows: &["sizes|digitalocean.sizes.sizes"],
    },
    Case {
        name: "SHOW METHODS github repos (StackQL's expected output)",
        sql: "SHOW METHODS IN github.repos.repos",
        routes: &[],
        columns: "MethodName,RequiredParams,SQLVerb",
        rows: &[
            "get|owner, repo|SELECT",
            "list_for_authenticated_user||SELECT",
            "list_for_org|org|SELECT",
            "list_for_user|username|SELECT",
            "create_for_authenticated_user|data__name|INSERT",
            "create_in_org|org, data__name|INSERT",
            "create_using_template|template_owner, template_repo, data__name|INSERT",
            "delete|owner, repo|DELETE",
            "check_vulnerability_alerts|owner, repo|EXEC",
            "codeowners_errors|owner, repo|EXEC",
            "create_dispatch_event|owner, repo, data__event_type|EXEC",
            "disable_automated_security_fixes|owner, repo|EXEC",
            "disable_vulnerability_alerts|owner, repo|EXEC",
            "enable_automated_security_fixes|owner, repo|EXEC",
            "enable_vulnerability_alerts|owner, repo|EXEC",
            "transfer|owner, repo, data__new_owner|EXEC",
            "update|owner, repo|EXEC",
        ],
    },
    Case {
        name: "SHOW METHODS okta apps: verbs inferred, server variables listed",
        sql: "SHOW METHODS IN okta.application.apps",
        routes: &[],
        columns: "MethodName,RequiredParams,SQLVerb",
        rows: &[
            "get|appId, subdomain|SELECT",
            "list|subdomain|SELECT",
            "insert|subdomain|INSERT",
            "delete|appId, subdomain|DELETE",
            "activate|appId, subdomain|EXEC",
            "deactivate|appId, subdomain|EXEC",
            "deleteall|appId, subdomain|EXEC",
            "update|appId, subdomain|EXEC",
        ],
    },
    // --- SQL semantics ------------------------------------------------------------------
    Case {
        name: "SELECT * is the response schema's properties only",
        sql: "SELECT * FROM digitalocean.droplets.droplets WHERE droplet_id = 7",
        routes: &[("/v2/droplets/7", r#"{"droplet":{"id":7,"name":"web7"}}"#)],
        columns: "id,name,memory,vcpus,disk,locked,status,kernel,created_at,features,backup_ids,next_backup_window,snapshot_ids,image,volume_ids,size,size_slug,networks,region,tags,vpc_uuid",
        rows: &[
            "7|web7|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL",
        ],
    },
    Case {
        name: "a required parameter from a constant expression",
        sql: "SELECT name FROM github.repos.repos WHERE org = lower('ACME')",
        routes: &[("/orgs/acme/repos", r#"[{"name":"a"}]"#)],
        columns: "name",
        rows: &["a"],
    },
    Case {
        name: "SQLite math functions",
        sql: "SELECT floor(3.7) AS f, ceil(3.2) AS c, pow(2, 10) AS p",
        routes: &[],
        columns: "f,c,p",
        rows: &["3|4|1024"],
    },
    Case {
        name: "json_each over a column in FROM",
        sql: "SELECT r.name, t.value FROM github.repos.repos r, json_each(r.topics) t WHERE r.org = 'acme' ORDER BY t.value",
        routes: &[(
            "/orgs/acme/repos",
            r#"[{"name":"a","topics":["rust","sql"]}]"#,
        )],
        columns: "name,value",
        rows: &["a|rust", "a|sql"],
    },
    Case {
        name: "LEFT OUTER JOIN keeps null-extended rows",
        sql: "SELECT r.name, c.login FROM github.repos.repos r LEFT OUTER JOIN github.users.users c ON c.username = json_extract(r.owner, '$.login') WHERE r.org = 'acme' ORDER BY r.name",
        routes: &[
            (
                "/orgs/acme/repos",
                r#"[{"name":"a","owner":{"login":"octo"}},{"name":"b","owner":{"login":"ghost"}}]"#,
            ),
            ("/users/octo", r#"{"login":"octo"}"#),
        ],
        columns: "name,login",
        rows: &["a|octo", "b|NULL"],
    },
    Case {
        name: "join parameter from an expression",
        sql: "SELECT d.name, z.name AS zone FROM google.compute.zones z INNER JOIN google.compute.disks d ON d.zone = z.name AND d.project = 'p1' WHERE z.project = 'p1' ORDER BY d.name",
        routes: &[
            ("/projects/p1/zones", r#"{"items":[{"name":"z1"}]}"#),
            (
                "/projects/p1/zones/z1/disks",
                r#"{"items":[{"name":"d1"}]}"#,
            ),
        ],
        columns: "name,zone",
        rows: &["d1|z1"],
    },
    Case {
        name: "IN (subquery) fans out",
        sql: "SELECT name FROM github.repos.repos WHERE org IN (SELECT login FROM github.orgs.orgs WHERE username = 'octo') ORDER BY name",
        routes: &[
            ("/users/octo/orgs", r#"[{"login":"acme"},{"login":"beta"}]"#),
            ("/orgs/acme/repos", r#"[{"name":"a"}]"#),
            ("/orgs/beta/repos", r#"[{"name":"b"}]"#),
        ],
        columns: "name",
        rows: &["a", "b"],
    },
    Case {
        name: "bare-name join equality",
        sql: "SELECT r.name FROM github.orgs.orgs o INNER JOIN github.repos.repos r ON org = o.login WHERE o.username = 'octo' ORDER BY r.name",
        routes: &[
            ("/users/octo/orgs", r#"[{"login":"acme"}]"#),
            ("/orgs/acme/repos", r#"[{"name":"a"},{"name":"b"}]"#),
        ],
        columns: "name",
        rows: &["a", "b"],
    },
    Case {
        name: "DELETE … WHERE key IN (…)",
        sql: "DELETE FROM digitalocean.droplets.droplets WHERE droplet_id IN (1, 2)",
        routes: &[("/v2/droplets/1", "{}"), ("/v2/droplets/2", "{}")],
        columns: "",
        rows: &[],
    },
    Case {
        name: "UPDATE … WHERE key IN (…)",
        sql: "UPDATE google.storage.buckets SET labels = '{\"env\":\"prod\"}' WHERE bucket IN ('b1', 'b2')",
        routes: &[("/b/b1", r#"{"name":"b1"}"#), ("/b/b2", r#"{"name":"b2"}"#)],
        columns: "",
        rows: &[],
    },
    Case {
        name: "snake_case alias of a native-casing parameter",
        sql: "SELECT VpcId FROM stackql_native_test.casing.echo_strict WHERE vpc_id = 'vpc-1'",
        routes: &[("/casing/echo_strict", r#"{"VpcId":"vpc-1"}"#)],
        columns: "VpcId",
        rows: &["vpc-1"],
    },
    Case {
        name: "OData push-down keeps StackQL's rows",
        sql: "SELECT name FROM stackql_native_test.odata.people WHERE city = 'Paris' ORDER BY name LIMIT 1",
        routes: &[(
            "/odata/people",
            r#"{"value":[{"name":"ann","city":"Paris"}]}"#,
        )],
        columns: "name",
        rows: &["ann"],
    },
    Case {
        name: "SHOW METHODS google storage buckets (StackQL's expected output)",
        sql: "SHOW METHODS IN google.storage.buckets LIKE '%Iam%'",
        routes: &[],
        columns: "MethodName,RequiredParams,SQLVerb",
        rows: &[
            "getIamPolicy|bucket|EXEC",
            "setIamPolicy|bucket, data__bindings|EXEC",
            "testIamPermissions|bucket, permissions|EXEC",
        ],
    },
    Case {
        name: "SHOW METHODS with a server variable",
        sql: "SHOW METHODS IN stackql_native_test.srvvar.items",
        routes: &[],
        columns: "MethodName,RequiredParams,SQLVerb",
        rows: &["select|deployment|SELECT"],
    },
    Case {
        name: "EXEC as a row source",
        sql: "SELECT x.name FROM (EXEC github.repos.repos.list_for_org @org = 'acme') AS x ORDER BY x.name",
        routes: &[("/orgs/acme/repos", r#"[{"name":"b"},{"name":"a"}]"#)],
        columns: "name",
        rows: &["a", "b"],
    },
];

async fn run_case(case: &Case) -> Result<(), String> {
    let mock = Mock::start().await;
    for (key, body) in case.routes {
        let value: serde_json::Value =
            serde_json::from_str(body).map_err(|err| format!("bad route body: {err}"))?;
        mock.route(key, Reply::json(value));
    }
    let engine = providers_engine(&mock);
    let out = engine
        .execute(&providers_context(), case.sql)
        .await
        .map_err(|err| format!("error: {err}"))?;
    if !case.columns.is_empty() && out.columns.join(",") != case.columns {
        return Err(format!(
            "columns {:?}, expected {}",
            out.columns, case.columns
        ));
    }
    let rows = row_lines(&out);
    if rows != case.rows {
        return Err(format!("rows {rows:?}, expected {:?}", case.rows));
    }
    Ok(())
}

#[tokio::test]
async fn corpus_over_real_documents() {
    let mut failures = Vec::new();
    for case in CASES {
        if let Err(why) = run_case(case).await {
            failures.push(format!("{}: {}\n    {why}", case.name, case.sql));
        }
    }
    eprintln!(
        "corpus: {} of {} statements give StackQL's answer",
        CASES.len() - failures.len(),
        CASES.len()
    );
    assert!(failures.is_empty(), "failing:\n{}", failures.join("\n"));
}
