use serde_json::json;

use super::*;

fn facts<'a>(
    http_method: &'a str,
    path: &'a str,
    operation: &'a serde_json::Value,
    document: &'a serde_json::Value,
) -> MethodFacts<'a> {
    MethodFacts {
        provider: "p",
        service: "s",
        resource: "r",
        method: "m",
        http_method,
        path,
        operation,
        document,
        aws_target: None,
        auth_type: None,
        sql_verbs: &[],
    }
}

#[test]
fn http_get_and_head_read_delete_deletes_and_the_rest_is_other_without_knowledge() {
    let (op, doc) = (json!({}), json!({}));
    for (http, want) in [
        ("get", Effect::Read),
        ("head", Effect::Read),
        ("delete", Effect::Delete),
        ("post", Effect::Other),
        ("put", Effect::Other),
        ("patch", Effect::Other),
        ("options", Effect::Other),
    ] {
        let found = of_method(&facts(http, "/x", &op, &doc));
        assert_eq!(found.effect, want, "{http}");
        assert!(!found.evidence.is_empty());
    }
    let unknown = of_method(&facts("post", "/x", &op, &doc));
    assert_eq!(unknown.source, EffectSource::Unknown);
    assert!(unknown.evidence.contains("not a read"), "{unknown}");
}

#[test]
fn a_document_binding_to_insert_or_delete_decides_what_nothing_else_knows() {
    let (op, doc) = (json!({}), json!({}));
    for (verb, want) in [
        ("insert", Effect::Write),
        ("update", Effect::Write),
        ("replace", Effect::Write),
        ("delete", Effect::Delete),
        ("select", Effect::Other),
    ] {
        let verbs = [verb];
        let found = of_method(&MethodFacts {
            sql_verbs: &verbs,
            ..facts("post", "/x", &op, &doc)
        });
        assert_eq!(found.effect, want, "{verb}");
    }
}

#[test]
fn graphql_queries_read_and_mutations_subscriptions_and_garbage_do_not() {
    let doc = json!({});
    let cases = [
        // The registry's shape: a Go template over the statement's parameters.
        (
            "query {\n viewer { accounts(filter: { accountTag: \"{{ .account_tag }}\" }, limit: {{ if .limit }}{{ .limit }}{{ else }}100{{ end }}) { count } } }",
            Effect::Read,
        ),
        ("{ viewer { login } }", Effect::Read),
        // A parameter spliced in as syntax (a cursor argument), and one as a bare value.
        (
            "query { a(filter: { x: \"{{ .since }}\"{{ .cursor }} }) { b } }",
            Effect::Read,
        ),
        ("query { a(first: {{ .per_page }}) { b } }", Effect::Read),
        (
            "query A { a } query B { b } fragment F on T { c }",
            Effect::Read,
        ),
        (
            "mutation { deleteRepository(id: \"{{ .id }}\") { ok } }",
            Effect::Write,
        ),
        ("query A { a } mutation B { b }", Effect::Write),
        ("subscription { events { id } }", Effect::Other),
        // Text that mentions "query" but is not a query operation.
        ("# query\nmutation { x }", Effect::Write),
        ("query {", Effect::Other),
        ("fragment F on T { c }", Effect::Other),
        ("{{ if }}", Effect::Other),
    ];
    for (query, want) in cases {
        let op = json!({"x-stackQL-graphQL": {"query": query}});
        let found = of_method(&facts("post", "/graphql", &op, &doc));
        assert_eq!(found.effect, want, "{query}: {found}");
        assert_eq!(found.source, EffectSource::Graphql);
    }
}

#[test]
fn aws_access_levels_decide_for_documents_signed_for_aws() {
    let ecs = json!({"info": {"x-serviceName": "ecs", "x-endpointPrefix": "ecs"}});
    let op = json!({"operationId": "DescribeClusters"});
    let aws = |target: Option<&'static str>, auth: Option<&'static str>, op, doc| {
        of_method(&MethodFacts {
            aws_target: target,
            auth_type: auth,
            ..facts("post", "/", op, doc)
        })
    };
    let signed = Some("aws_signing_v4");
    let read = aws(
        Some("AmazonEC2ContainerServiceV20141113.DescribeClusters"),
        signed,
        &op,
        &ecs,
    );
    assert_eq!(read.effect, Effect::Read, "{read}");
    assert_eq!(read.source, EffectSource::AwsAccessLevel);
    assert!(read.evidence.contains("ecs:DescribeClusters"), "{read}");
    let write = aws(
        Some("AmazonEC2ContainerServiceV20141113.DeleteCluster"),
        signed,
        &op,
        &ecs,
    );
    assert_eq!(write.effect, Effect::Other, "{write}");
    assert!(write.evidence.contains("Write"), "{write}");
    // The same document without AWS signing is not AWS's API: nothing is known.
    let unsigned = aws(
        Some("AmazonEC2ContainerServiceV20141113.DescribeClusters"),
        None,
        &op,
        &ecs,
    );
    assert_eq!(unsigned.effect, Effect::Other);
    assert_eq!(unsigned.source, EffectSource::Unknown);
    // An action the data does not list is not a read.
    let invented = aws(Some("X.DescribeEverythingAndDelete"), signed, &op, &ecs);
    assert_eq!(invented.effect, Effect::Other, "{invented}");
    // The operation id decides when there is no target header; the query string's Action
    // when there is one.
    let ssm = json!({"info": {"x-serviceName": "ssm", "x-endpointPrefix": "ssm"}});
    let get = json!({"operationId": "GetParameter"});
    assert_eq!(aws(None, signed, &get, &ssm).effect, Effect::Read);
    let start = json!({"operationId": "StartAutomationExecution"});
    assert_eq!(aws(None, signed, &start, &ssm).effect, Effect::Other);
    // Cloud Control's reads are cloudformation's.
    let cc = json!({"info": {"x-serviceName": "cloudcontrolapi"}});
    for action in [
        "ListResources",
        "GetResource",
        "ListResourceRequests",
        "GetResourceRequestStatus",
    ] {
        let target = format!("CloudApiService.{action}");
        let target: &'static str = Box::leak(target.into_boxed_str());
        let found = aws(Some(target), signed, &op, &cc);
        assert_eq!(found.effect, Effect::Read, "{action}: {found}");
    }
    for action in ["CreateResource", "DeleteResource", "UpdateResource"] {
        let target: &'static str = Box::leak(format!("CloudApiService.{action}").into_boxed_str());
        assert_eq!(aws(Some(target), signed, &op, &cc).effect, Effect::Other);
    }
    let ec2 = json!({"info": {"x-serviceName": "ec2", "x-endpointPrefix": "ec2"}});
    let query = of_method(&MethodFacts {
        auth_type: signed,
        ..facts(
            "post",
            "/?Action=DescribeInstances&Version=2016-11-15",
            &op,
            &ec2,
        )
    });
    assert_eq!(query.effect, Effect::Read, "{query}");
    let terminate = of_method(&MethodFacts {
        auth_type: signed,
        ..facts(
            "post",
            "/?Action=TerminateInstances&Version=2016-11-15",
            &op,
            &ec2,
        )
    });
    assert_eq!(terminate.effect, Effect::Other, "{terminate}");
}

#[test]
fn aws_query_protocol_documents_bind_every_action_to_get_so_the_level_decides() {
    let iam =
        json!({"info": {"x-serviceName": "iam", "x-endpointPrefix": "iam", "x-protocol": "query"}});
    let op = json!({"operationId": "X"});
    let get = |path: &'static str| {
        of_method(&MethodFacts {
            auth_type: Some("aws_signing_v4"),
            ..facts("get", path, &op, &iam)
        })
    };
    let delete = get("/?Action=DeleteUser&Version=2010-05-08");
    assert_eq!(delete.effect, Effect::Other, "{delete}");
    assert!(delete.evidence.contains("iam:DeleteUser"), "{delete}");
    // Bound to SQL DELETE by the document: a delete.
    let verbs = ["delete"];
    let bound = of_method(&MethodFacts {
        auth_type: Some("aws_signing_v4"),
        sql_verbs: &verbs,
        ..facts("get", "/?Action=DeleteUser&Version=2010-05-08", &op, &iam)
    });
    assert_eq!(bound.effect, Effect::Delete, "{bound}");
    assert_eq!(
        get("/?Action=ListUsers&Version=2010-05-08").effect,
        Effect::Read
    );
    // An action the data does not list is not a read, GET or not.
    assert_eq!(
        get("/?Action=ListEverythingNew&Version=2010-05-08").effect,
        Effect::Other
    );
    // A REST document's GET reads when the data does not know its operation.
    let rest = json!({"info": {"x-serviceName": "s3", "x-endpointPrefix": "s3", "x-protocol": "rest-xml"}});
    let list = json!({"operationId": "ListObjectsV2"});
    let found = of_method(&MethodFacts {
        auth_type: Some("aws_signing_v4"),
        ..facts("get", "/{Bucket}?list-type=2", &list, &rest)
    });
    assert_eq!(found.effect, Effect::Read, "{found}");
    assert_eq!(found.source, EffectSource::HttpMethod, "{found}");
}

#[test]
fn the_shipped_data_parses_whole() {
    assert!(
        reviewed::malformed_lines().is_empty(),
        "{:?}",
        reviewed::malformed_lines()
    );
    let counts = knowledge_counts();
    assert!(counts.aws_actions > 10_000, "{counts:?}");
    assert!(counts.aws_services > 300, "{counts:?}");
    assert!(counts.reviewed_methods > 50, "{counts:?}");
}
