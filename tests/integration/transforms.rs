//! Response transforms and `schema_override` over documents of the current StackQL registry
//! (`$QUERYGATE_COMPAT_REGISTRY/current/registry-src.tar.gz`, unchanged), through a mock
//! upstream answering with the real APIs' shapes.

use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::column;
use crate::support::corpus::row_lines;

use crate::support::current::*;

const CONTAINERS: &str = "/subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.Storage/storageAccounts/acct1/blobServices/default/containers";
const CONTAINERS_WHERE: &str =
    "WHERE subscription_id = 'sub1' AND resource_group_name = 'rg1' AND account_name = 'acct1'";

#[tokio::test]
async fn azure_flatten_transform_fills_properties_columns() {
    let Some(registry) = current_registry(&[
        "src/azure/v00.00.00000/provider.yaml",
        "src/azure/v00.00.00000/services/storage.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    // An ARM list answer (Blob Containers - List): each item's fields with `properties` nested.
    mock.route(
        CONTAINERS,
        Reply::json(json!({"value": [
            {
                "id": "/subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.Storage/storageAccounts/acct1/blobServices/default/containers/logs",
                "name": "logs",
                "type": "Microsoft.Storage/storageAccounts/blobServices/containers",
                "etag": "\"0x8D589847D51C7DE\"",
                "properties": {
                    "publicAccess": "None",
                    "leaseStatus": "Unlocked",
                    "leaseState": "Available",
                    "lastModifiedTime": "2018-03-14T08:20:47Z",
                    "hasImmutabilityPolicy": false,
                    "hasLegalHold": true,
                    "remainingRetentionDays": 7,
                    "metadata": {"owner": "ops"}
                }
            },
            {"id": "/x/data", "name": "data", "properties": {"publicAccess": "Blob", "remainingRetentionDays": 1234567}},
            {"id": "/x/bare", "name": "bare"}
        ]})),
    );
    let e = engine(registry.path(), "azure", &mock);
    let sql = format!(
        "SELECT name, type, publicAccess, leaseState, hasLegalHold, hasImmutabilityPolicy, \
         remainingRetentionDays, json_extract(metadata, '$.owner') AS owner \
         FROM azure.storage.blob_containers {CONTAINERS_WHERE} ORDER BY name"
    );
    let out = e
        .execute(&context(), &sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "bare|NULL|NULL|NULL|NULL|NULL|NULL|NULL",
            "data|NULL|Blob|NULL|NULL|NULL|1234567|NULL",
            "logs|Microsoft.Storage/storageAccounts/blobServices/containers|None|Available|true|false|7|ops",
        ]
    );
    let requests = mock.requests();
    assert_eq!(requests[0].headers["authorization"], "Bearer t0ken");
}

#[tokio::test]
async fn a_transform_failing_over_a_response_names_resource_and_method() {
    let Some(registry) = current_registry(&[
        "src/azure/v00.00.00000/provider.yaml",
        "src/azure/v00.00.00000/services/storage.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    // `range` over a string: the flatten template fails (as Go's does) on this body.
    mock.route(CONTAINERS, Reply::json(json!({"value": "not a list"})));
    let e = engine(registry.path(), "azure", &mock);
    let sql = format!("SELECT name FROM azure.storage.blob_containers {CONTAINERS_WHERE}");
    let err = e
        .execute(&context(), &sql)
        .await
        .expect_err("the transform fails");
    // The response does not fit the document's transform: an upstream answer it cannot read.
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("'azure.storage.blob_containers'")
            && message.contains("method 'list'")
            && message.contains("range can't iterate over not a list"),
        "{message}"
    );
}

#[tokio::test]
async fn okta_text_transform_with_schema_override() {
    let Some(registry) = current_registry(&[
        "src/okta/v00.00.00000/provider.yaml",
        "src/okta/v00.00.00000/services/templates.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    // Okta answers a bare array; the text transform wraps it as {"sms_templates": …}, the
    // shape the method's schema_override describes.
    mock.route(
        "/api/v1/templates/sms",
        Reply::json(json!([
            {"id": "cstk2", "name": "Custom", "type": "SMS_VERIFY_CODE",
             "template": "Your code is ${code}", "translations": {"fr": "Votre code est ${code}"},
             "created": "2024-01-02T03:04:05.000Z"},
            {"id": "cstk3", "name": "Other", "type": "SMS_VERIFY_CODE", "template": "Code ${code}"}
        ])),
    );
    let e = engine(registry.path(), "okta", &mock);
    let out = e
        .execute(
            &context(),
            "SELECT id, name, type, template, json_extract(translations, '$.fr') AS fr, created \
             FROM okta.templates.sms_templates ORDER BY id",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "cstk2|Custom|SMS_VERIFY_CODE|Your code is ${code}|Votre code est ${code}|2024-01-02T03:04:05.000Z",
            "cstk3|Other|SMS_VERIFY_CODE|Code ${code}|NULL|NULL",
        ]
    );
    // The columns come from the override schema's rows (`$.sms_templates[*]`: SmsTemplate).
    let described = e
        .execute(&context(), "DESCRIBE okta.templates.sms_templates")
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let mut names: Vec<String> = column(&described, "name")
        .into_iter()
        .map(|c| crate::support::corpus::cell_text(&c))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "created",
            "id",
            "lastUpdated",
            "name",
            "template",
            "translations",
            "type"
        ]
    );
    let star = e
        .execute(&context(), "SELECT * FROM okta.templates.sms_templates")
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(star.rows.len(), 2);
    assert!(
        star.columns.iter().any(|c| c == "template"),
        "{:?}",
        star.columns
    );
}
