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
