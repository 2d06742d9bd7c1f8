//! Pagination: Link header (also to another path), nextPageToken → pageToken, OData
//! nextLink, cursors, page number with and without terminator, and the page limit.

use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn link_header_is_followed_even_to_another_path() {
    let mock = Mock::start().await;
    let next = format!(
        "<{}/organizations/42/items?page=2>; rel=\"next\", <{}/x?page=9>; rel=\"last\"",
        mock.url(),
        mock.url()
    );
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1}])).header("link", &next),
    );
    mock.route("/organizations/42/items", Reply::json(json!([{"id": 2}])));
    let out = query(
        &engine(&mock),
        "SELECT id FROM testapi.items.items WHERE org = 'acme' ORDER BY id",
    )
    .await;
    assert_eq!(column(&out, "id"), vec![int(1), int(2)]);
    assert_eq!(
        mock.paths(),
        vec!["/organizations/42/items?page=2", "/orgs/acme/items"]
    );
    // Every page carries the credentials.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.headers["x-api-key"] == SECRET)
    );
}

/// Three pages of about 62 KB: the first two are loaded on the calling thread, the third
/// takes the statement past 128 KiB and moves it to a thread of its own, with the rows it
/// had loaded.
#[tokio::test]
async fn a_statement_that_outgrows_the_calling_thread_keeps_every_page() {
    let mock = Mock::start().await;
    let name = "n".repeat(600);
    for page in 1..=3 {
        let rows: Vec<_> = (0..100)
            .map(|i| json!({"id": page * 1000 + i, "name": name}))
            .collect();
        let path = match page {
            1 => "/orgs/acme/items".to_owned(),
            _ => format!("/orgs/acme/items?page={page}"),
        };
        let mut reply = Reply::json(json!(rows));
        if page < 3 {
            let next = format!(
                "<{}/orgs/acme/items?page={}>; rel=\"next\"",
                mock.url(),
                page + 1
            );
            reply = reply.header("link", &next);
        }
        mock.route(&path, reply);
    }
    let out = query(
        &engine(&mock),
        "SELECT count(*) AS n, sum(id) AS total, sum(length(name)) AS bytes \
         FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(column(&out, "n"), vec![int(300)]);
    // (1000 + 2000 + 3000) × 100 + 3 × (0 + … + 99)
    assert_eq!(column(&out, "total"), vec![int(614_850)]);
    assert_eq!(column(&out, "bytes"), vec![int(300 * 600)]);
    assert_eq!(mock.paths().len(), 3);
}

#[tokio::test]
async fn link_to_another_origin_is_refused() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1}])).header("link", "<http://127.0.0.2:9/steal>; rel=\"next\""),
    );
    let err = query_err(
        &engine(&mock),
        "SELECT id FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    assert!(err.to_string().contains("another origin"), "{err}");
}

#[tokio::test]
async fn next_page_token_becomes_page_token() {
    let mock = Mock::start().await;
    mock.route(
        "/tokens",
        Reply::json(json!({"items": [{"id": 1}], "nextPageToken": "t2"})),
    );
    mock.route(
        "/tokens?pageToken=t2",
        Reply::json(json!({"items": [{"id": 2}], "nextPageToken": "t3"})),
    );
    mock.route(
        "/tokens?pageToken=t3",
        Reply::json(json!({"items": [{"id": 3}]})),
    );
    let out = query(
        &engine(&mock),
        "SELECT id FROM testapi.items.tokens ORDER BY id",
    )
    .await;
    assert_eq!(column(&out, "id"), vec![int(1), int(2), int(3)]);
}

#[tokio::test]
async fn odata_next_link_and_cursor() {
    let mock = Mock::start().await;
    let next = format!("{}/odata?$skiptoken=2", mock.url());
    mock.route(
        "/odata",
        Reply::json(json!({"value": [{"id": 1}], "@odata.nextLink": next})),
    );
    mock.route(
        "/odata?$skiptoken=2",
        Reply::json(json!({"value": [{"id": 2}]})),
    );
    mock.route(
        "/cursor",
        Reply::json(json!({"data": [{"id": 1}], "next_cursor": "c2"})),
    );
    mock.route(
        "/cursor?cursor=c2",
        Reply::json(json!({"data": [{"id": 2}], "next_cursor": ""})),
    );
    let e = engine(&mock);
    assert_eq!(
        column(
            &query(&e, "SELECT id FROM testapi.items.odata ORDER BY id").await,
            "id"
        ),
        vec![int(1), int(2)]
    );
    assert_eq!(
        column(
            &query(&e, "SELECT id FROM testapi.items.cursor ORDER BY id").await,
            "id"
        ),
        vec![int(1), int(2)]
    );
}

#[tokio::test]
async fn page_number_stops_at_the_terminator() {
    let mock = Mock::start().await;
    for page in 1..=3 {
        let body = json!({"rows": [{"id": page}], "info": {"page": page, "pages": 3}});
        let key = if page == 1 {
            "/paged".to_owned()
        } else {
            format!("/paged?page={page}")
        };
        mock.route(&key, Reply::json(body));
    }
    let out = query(
        &engine(&mock),
        "SELECT id FROM testapi.items.paged ORDER BY id",
    )
    .await;
    assert_eq!(column(&out, "id"), vec![int(1), int(2), int(3)]);
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn page_number_without_terminator_reads_one_page() {
    let mock = Mock::start().await;
    mock.route(
        "/paged",
        Reply::json(json!({"rows": [{"id": 1}], "info": {"page": 1}})),
    );
    mock.route(
        "/paged?page=2",
        Reply::json(json!({"rows": [{"id": 2}], "info": {"page": 2}})),
    );
    let out = query(&engine(&mock), "SELECT id FROM testapi.items.paged").await;
    assert_eq!(column(&out, "id"), vec![int(1)]);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn page_limit_bounds_traversal_and_says_so() {
    let mock = Mock::start().await;
    // An endless token chain: every page points at the next.
    mock.route(
        "/tokens",
        Reply::json(json!({"items": [{"id": 0}], "nextPageToken": "p1"})),
    );
    for i in 1..10 {
        mock.route(
            &format!("/tokens?pageToken=p{i}"),
            Reply::json(json!({"items": [{"id": i}], "nextPageToken": format!("p{}", i + 1)})),
        );
    }
    let e = engine_with(&mock, |c| c.upstream.page_limit = 3);
    let out = e
        .execute(&context(), "SELECT id FROM testapi.items.tokens")
        .await
        .unwrap();
    assert_eq!(out.rows.len(), 3);
    assert_eq!(mock.requests().len(), 3);
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("stopped after 3 pages")),
        "{:?}",
        out.warnings
    );
}

#[tokio::test]
async fn tokens_in_headers_both_ways() {
    let mock = Mock::start().await;
    mock.route(
        "/headerpaged",
        Reply::json(json!([{"id": 1}])).header("x-next-page", "h2"),
    );
    mock.route(
        "/headerpaged|x-page-token=h2",
        Reply::json(json!([{"id": 2}])),
    );
    let out = query(
        &engine(&mock),
        "SELECT id FROM testapi.items.headerpaged ORDER BY id",
    )
    .await;
    assert_eq!(column(&out, "id"), vec![int(1), int(2)]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].headers.get("x-page-token").is_none());
    assert_eq!(requests[1].headers["x-page-token"], "h2");
}

/// Tokens are read in the pass that loads the rows: before, between or after the rows, with
/// a decoy of the same name inside a row, and nested (`info.page`) beside the rows.
#[tokio::test]
async fn tokens_are_found_wherever_they_sit_in_the_body() {
    let mock = Mock::start().await;
    let raw = |body: &str| Reply::bytes("application/json", body.as_bytes().to_vec());
    mock.route(
        "/tokens",
        raw(r#"{"nextPageToken": "t2", "items": [{"id": 1}]}"#),
    );
    mock.route(
        "/tokens?pageToken=t2",
        raw(r#"{"kind": "k", "items": [{"id": 2}], "nextPageToken": "t\u00e93", "etag": "e"}"#),
    );
    mock.route(
        "/tokens?pageToken=t%C3%A93",
        raw(r#"{"items": [{"id": 3, "nextPageToken": "in-a-row"}], "x": {"nextPageToken": "deep"}, "nextPageToken": "t4"}"#),
    );
    mock.route(
        "/tokens?pageToken=t4",
        raw(r#"{"items": [{"id": 4, "nextPageToken": "in-a-row"}], "nextPageToken": ""}"#),
    );
    mock.route(
        "/cursor",
        raw(r#"{"next_cursor": "c2", "data": [{"id": 1}]}"#),
    );
    mock.route(
        "/cursor?cursor=c2",
        raw(r#"{"data": [{"id": 2}], "next_cursor": null}"#),
    );
    for page in 1..=3 {
        let body = if page == 2 {
            format!(r#"{{"rows": [{{"id": {page}}}], "info": {{"pages": 3, "page": {page}}}}}"#)
        } else {
            format!(r#"{{"info": {{"page": {page}, "pages": 3}}, "rows": [{{"id": {page}}}]}}"#)
        };
        let key = if page == 1 {
            "/paged".to_owned()
        } else {
            format!("/paged?page={page}")
        };
        mock.route(&key, raw(&body));
    }
    let e = engine(&mock);
    for (resource, ids) in [
        ("tokens", vec![int(1), int(2), int(3), int(4)]),
        ("cursor", vec![int(1), int(2)]),
        ("paged", vec![int(1), int(2), int(3)]),
    ] {
        let out = query(
            &e,
            &format!("SELECT id FROM testapi.items.{resource} ORDER BY id"),
        )
        .await;
        assert_eq!(column(&out, "id"), ids, "{resource}");
    }
    assert_eq!(mock.requests().len(), 4 + 2 + 3, "{:?}", mock.paths());
}
