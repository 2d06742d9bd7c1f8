//! Provider-format features of the current StackQL registry's documents
//! (`$QUERYGATE_COMPAT_REGISTRY/current/registry-src.tar.gz`, unchanged), each driven
//! through a mock upstream on 127.0.0.1 answering with the real API's shape.

use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::corpus::row_lines;

use crate::support::current::*;

const AZURE_PROVIDER: &str = "src/azure/v00.00.00000/provider.yaml";
const GEOLOCATION: &str = "src/azure/v00.00.00000/services/maps_geolocation.yaml";

/// `snake_case_aliases: true` in azure's `provider.yaml`: Azure Maps' geolocation answer
/// (`countryRegion`, `ipAddress`) is read under snake_case columns, the hyphenated header
/// parameter `x-ms-client-id` is given as `x_ms_client_id`, and the request carries the
/// wire names.
#[tokio::test]
async fn snake_case_aliases_name_columns_and_header_parameters() {
    let Some(registry) = current_registry(&[AZURE_PROVIDER, GEOLOCATION]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/geolocation/ip/json",
        Reply::json(json!({"countryRegion": {"isoCode": "US"}, "ipAddress": "203.0.113.7"})),
    );
    let e = engine(registry.path(), "azure", &mock);
    let sql = "SELECT ip_address, json_extract(country_region, '$.isoCode') AS iso \
               FROM azure.maps_geolocation.geolocation \
               WHERE format = 'json' AND ip = '203.0.113.7' AND x_ms_client_id = 'client-1' \
               AND ip_address = '203.0.113.7'";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["ip_address", "iso"]);
    assert_eq!(row_lines(&out), ["203.0.113.7|US"]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/geolocation/ip/json");
    assert_eq!(
        request.query.as_deref(),
        Some("api-version=1.0&ip=203.0.113.7")
    );
    assert_eq!(request.headers["x-ms-client-id"], "client-1");
    assert!(request.headers.get("x_ms_client_id").is_none());

    // `SELECT *` and DESCRIBE show the snake_case names; the wire names still reach the
    // same values in SQL.
    let out = e
        .execute(
            &context(),
            "SELECT *, ipAddress FROM azure.maps_geolocation.geolocation \
             WHERE format = 'json' AND ip = '203.0.113.7'",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["country_region", "ip_address", "ipAddress"]);
    assert_eq!(
        row_lines(&out),
        [r#"{"isoCode":"US"}|203.0.113.7|203.0.113.7"#]
    );
    let out = e
        .execute(&context(), "DESCRIBE azure.maps_geolocation.geolocation")
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let lines = row_lines(&out).join("\n");
    assert!(lines.contains("country_region"), "{lines}");
    assert!(lines.contains("ip_address"), "{lines}");
    assert!(!lines.contains("ipAddress"), "{lines}");
}

const SNOWFLAKE_PROVIDER: &str = "src/snowflake/v00.00.00000/provider.yaml";
const WAREHOUSES: &str = "src/snowflake/v00.00.00000/services/warehouses.yaml";

/// Request-body literal coercion over snowflake's `Warehouse` schema: SQL text literals
/// for `integer` fields (`auto_suspend`, `max_cluster_count`) are sent as JSON numbers, a
/// number literal for a `string` field (`comment`) and `'true'` for the string-typed
/// `auto_resume` stay strings: the schema decides, not the literal's look.
#[tokio::test]
async fn body_literals_are_typed_as_the_request_schema_says() {
    let Some(registry) = current_registry(&[SNOWFLAKE_PROVIDER, WAREHOUSES]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "POST /api/v2/warehouses",
        Reply::json(json!({"status": "Request successfully completed"})),
    );
    let e = engine(registry.path(), "snowflake", &mock);
    e.execute(
        &context(),
        "INSERT INTO snowflake.warehouses.warehouses \
         (name, auto_suspend, max_cluster_count, auto_resume, comment) \
         VALUES ('wh1', '600', '2', 'true', 5)",
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&requests[0].body_text()).unwrap();
    assert_eq!(
        body,
        json!({
            "name": "wh1",
            "auto_suspend": 600,
            "max_cluster_count": 2,
            "auto_resume": "true",
            "comment": "5"
        })
    );

    // A literal that is not of the field's type fails before any request.
    let err = e
        .execute(
            &context(),
            "INSERT INTO snowflake.warehouses.warehouses (name, auto_suspend) \
             VALUES ('wh2', 'soon')",
        )
        .await
        .expect_err("'soon' is not an integer");
    assert!(err.to_string().contains("auto_suspend"), "{err}");
    assert_eq!(mock.requests().len(), 1);
}

const PLANETARY: &str = "src/azure/v00.00.00000/services/planetary_computer_dataplane.yaml";

/// A response template over a bare-array response: Planetary Computer's tile matrix set
/// list is a JSON array of strings; azure's document wraps it with
/// `{"value": [{{- range $i, $v := . }}…{"value": {{ toJson $v }}}…]}` (the array itself is
/// the template's dot) and reads the rows at `$.value`.
#[tokio::test]
async fn a_response_template_ranges_over_a_bare_array_body() {
    let Some(registry) = current_registry(&[AZURE_PROVIDER, PLANETARY]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/data/tile-matrix-sets",
        Reply::json(json!([
            "WebMercatorQuad",
            "WorldCRS84Quad",
            "EuropeanETRS89_LAEAQuad"
        ])),
    );
    let e = engine(registry.path(), "azure", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT value FROM azure.planetary_computer_dataplane.data ORDER BY value",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "EuropeanETRS89_LAEAQuad",
            "WebMercatorQuad",
            "WorldCRS84Quad"
        ]
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/data/tile-matrix-sets");
    assert_eq!(requests[0].query.as_deref(), Some("api-version=2026-04-15"));

    // An empty array is no rows.
    mock.route("/data/tile-matrix-sets", Reply::json(json!([])));
    let out = e
        .execute(
            &context(),
            "SELECT value FROM azure.planetary_computer_dataplane.data",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(out.rows.is_empty(), "{:?}", row_lines(&out));
}

const AWS_PROVIDER: &str = "src/aws/v00.00.00000/provider.yaml";
const IAM: &str = "src/aws/v00.00.00000/services/iam.yaml";
const LIST_USERS: &str = "/?Action=ListUsers&Version=2010-05-08";

/// One IAM ListUsers page (the IAM API reference's shape): the `<Users>` list with the
/// scalar siblings `<IsTruncated>` and, when more follow, `<Marker>`.
fn users_page(users: &[(&str, &str)], marker: Option<&str>) -> Reply {
    let mut body = String::from(
        r#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users>"#,
    );
    for (name, id) in users {
        body.push_str(&format!(
            "<member><UserId>{id}</UserId><Path>/</Path><UserName>{name}</UserName>\
             <Arn>arn:aws:iam::123456789012:user/{name}</Arn>\
             <CreateDate>2020-01-01T00:00:00Z</CreateDate></member>"
        ));
    }
    body.push_str("</Users>");
    match marker {
        Some(marker) => body.push_str(&format!(
            "<IsTruncated>true</IsTruncated><Marker>{marker}</Marker>"
        )),
        None => body.push_str("<IsTruncated>false</IsTruncated>"),
    }
    body.push_str("</ListUsersResult></ListUsersResponse>");
    Reply::bytes("text/xml", body.into_bytes())
}

/// The XML payload's scalar siblings of the row list (`IsTruncated`, `Marker`) pass
/// through the schema-driven transform beside the rows, so the next page's token is read
/// from them; under aws's `snake_case_aliases` the XML elements (`UserName`) fill the
/// snake_case columns (`user_name`).
#[tokio::test]
async fn xml_scalar_siblings_page_snake_case_rows() {
    let Some(registry) = current_registry(&[AWS_PROVIDER, IAM]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        LIST_USERS,
        users_page(
            &[("Andrew", "AIDANDREW"), ("Jackie", "AIDJACKIE")],
            Some("m-2"),
        ),
    );
    mock.route(
        &format!("{LIST_USERS}&Marker=m-2"),
        users_page(&[("Zoe", "AIDZOE")], None),
    );
    let e = engine(registry.path(), "aws", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT user_name, user_id, create_date FROM aws.iam.users ORDER BY user_name",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["user_name", "user_id", "create_date"]);
    assert_eq!(
        row_lines(&out),
        [
            "Andrew|AIDANDREW|2020-01-01T00:00:00Z",
            "Jackie|AIDJACKIE|2020-01-01T00:00:00Z",
            "Zoe|AIDZOE|2020-01-01T00:00:00Z",
        ]
    );
    let forms: Vec<String> = mock.requests().iter().map(|r| r.body_text()).collect();
    assert_eq!(
        forms,
        [
            "Action=ListUsers&Version=2010-05-08",
            "Action=ListUsers&Version=2010-05-08&Marker=m-2",
        ]
    );
}

const ENTRA_PROVIDER: &str = "src/entra_id/v00.00.00000/provider.yaml";
const DOMAINS: &str = "src/entra_id/v00.00.00000/services/domains.yaml";

/// The OData `$select` guard over entra_id's `domains` (`queryParamPushdown.select`):
/// `$select` names every column the statement reads (projection, WHERE and ORDER BY, a
/// superset of the projection, so a column only filtered or sorted on still comes back),
/// and is not sent at all when anything read is not a plain column (`SELECT *`, a function
/// over a column), as a partial `$select` would null columns the statement needs.
#[tokio::test]
async fn odata_select_is_a_superset_of_what_the_statement_reads_or_absent() {
    let Some(registry) = current_registry(&[ENTRA_PROVIDER, DOMAINS]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/domains",
        Reply::json(json!({"value": [
            {"id": "contoso.com", "authenticationType": "Managed", "passwordValidityPeriodInDays": 90, "isVerified": true},
            {"id": "fabrikam.com", "authenticationType": "Federated", "passwordValidityPeriodInDays": 30, "isVerified": false},
            {"id": "adatum.com", "authenticationType": "Managed", "passwordValidityPeriodInDays": 30, "isVerified": true}
        ]})),
    );
    let e = engine(registry.path(), "entra_id", &mock);
    let query = |i: usize| {
        let requests = mock.requests();
        let raw = requests[i].query.clone().unwrap_or_default();
        url::form_urlencoded::parse(raw.as_bytes())
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    let out = e
        .execute(
            &context(),
            "SELECT id FROM entra_id.domains.domains WHERE authenticationType = 'Managed' \
             ORDER BY passwordValidityPeriodInDays",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["adatum.com", "contoso.com"]);
    assert!(
        query(0).contains(&"$select=id,authenticationType,passwordValidityPeriodInDays".to_owned()),
        "{:?}",
        query(0)
    );

    for sql in [
        "SELECT * FROM entra_id.domains.domains WHERE authenticationType = 'Managed'",
        "SELECT id, upper(authenticationType) AS d FROM entra_id.domains.domains",
    ] {
        let out = e
            .execute(&context(), sql)
            .await
            .unwrap_or_else(|err| panic!("{sql}: {err}"));
        assert!(!out.rows.is_empty(), "{sql}");
        let last = mock.requests().len() - 1;
        assert!(
            query(last).iter().all(|p| !p.starts_with("$select=")),
            "{sql}: {:?}",
            query(last)
        );
    }
}

const RESOURCE: &str = "src/azure/v00.00.00000/services/resource.yaml";

/// Writes under `snake_case_aliases`: an INSERT column `managed_by` is the body field
/// `managedBy` on the wire, and `RETURNING` reads the answer's `managedBy` under the
/// snake_case column (the wire name naming it too); `RETURNING *` shows the snake_case
/// names only.
#[tokio::test]
async fn snake_case_aliases_in_writes_and_returning() {
    let Some(registry) = current_registry(&[AZURE_PROVIDER, RESOURCE]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "PUT /subscriptions/sub1/resourcegroups/rg1",
        Reply::json(json!({
            "id": "/subscriptions/sub1/resourceGroups/rg1",
            "name": "rg1",
            "location": "westus",
            "managedBy": "/x/manager",
            "properties": {"provisioningState": "Succeeded"}
        })),
    );
    let e = engine(registry.path(), "azure", &mock);
    let insert = "INSERT INTO azure.resource.resource_groups \
                  (subscription_id, resource_group_name, location, managed_by) \
                  VALUES ('sub1', 'rg1', 'westus', '/x/manager')";
    let out = e
        .execute(
            &context(),
            &format!("{insert} RETURNING name, managed_by, managedBy"),
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["name", "managed_by", "managedBy"]);
    assert_eq!(row_lines(&out), ["rg1|/x/manager|/x/manager"]);
    let body: serde_json::Value = serde_json::from_str(&mock.requests()[0].body_text()).unwrap();
    assert_eq!(
        body,
        json!({"location": "westus", "managedBy": "/x/manager"})
    );

    let out = e
        .execute(&context(), &format!("{insert} RETURNING *"))
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(
        out.columns.contains(&"managed_by".to_owned()),
        "{:?}",
        out.columns
    );
    assert!(
        !out.columns.contains(&"managedBy".to_owned()),
        "{:?}",
        out.columns
    );
}
