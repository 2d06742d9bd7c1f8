//! The OpenAPI operation a method definition names, read for the method: where it is
//! (`/paths/<path>/<http method>`), its parameters and servers, and the method's response
//! settings.

use std::sync::Arc;

use serde_json::Value;

use super::json::{str_field, unescape_pointer};
use super::param::{Param, Server, parse_param, server_variables};
use super::schema::deref;
use super::store::{Doc, DocumentStore};
use crate::error::{Error, Result};

const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The method's response: where rows are and which schema describes them.
#[derive(Debug, Clone)]
pub(crate) struct ResponseSpec {
    pub(crate) media_type: Option<String>,
    pub(crate) doc_key: Option<String>,
    pub(crate) object_key: Option<String>,
    /// `response.transform`, when it is one this engine applies.
    pub(crate) transform: Option<Arc<crate::transform::ResponseTransform>>,
    /// `response.schema_override`: the schema of the (transformed) response, in place of the
    /// operation's response schema.
    pub(crate) schema_override: Option<Value>,
}

/// An operation found in its document.
pub(super) struct Located<'d> {
    /// The lower-case HTTP method (the key under the path item).
    pub(super) http_method: String,
    /// The path, unescaped from the pointer.
    pub(super) path: String,
    pub(super) path_item: &'d Value,
    pub(super) operation: &'d Value,
}

/// The operation at `pointer` (`/paths/<escaped path>/<method key>`) of `op_doc`; the key is
/// matched case-insensitively (okta's documents write `/POST`). `reference` and `location`
/// name it in errors.
pub(super) fn locate<'d>(
    op_doc: &'d Doc,
    reference: &str,
    pointer: &str,
    location: &str,
) -> Result<Located<'d>> {
    let (path_pointer, method_key) = pointer.rsplit_once('/').unwrap_or(("", ""));
    let http_method = method_key.to_ascii_lowercase();
    if !HTTP_METHODS.contains(&http_method.as_str()) || !path_pointer.starts_with("/paths/") {
        return Err(Error::bad_document(format!(
            "{}: operation.$ref '{reference}' does not point at /paths/<path>/<http method>",
            location
        )));
    }
    let path_item = op_doc.at(path_pointer).map_err(|err| {
        Error::bad_document(format!("{}: operation.$ref '{reference}': {err}", location))
    })?;
    let operation = path_item.get(&http_method).ok_or_else(|| {
        Error::bad_document(format!(
            "{}: operation.$ref '{reference}': provider document '{}' has no '{http_method}' operation at '#{path_pointer}'",
            location, op_doc.rel
        ))
    })?;
    let path = unescape_pointer(&path_pointer["/paths/".len()..]);
    Ok(Located {
        http_method,
        path,
        path_item,
        operation,
    })
}

/// The operation's parameters (its own, then the path item's not already named), then its
/// servers (the operation's, else the path item's, else the document's), with the first
/// server's variables as parameters.
pub(super) fn params_and_servers(
    store: &DocumentStore,
    op_doc: &Arc<Doc>,
    found: &Located<'_>,
    reference: &str,
    location: &str,
) -> Result<(Vec<Param>, Vec<Server>)> {
    let (operation, path_item) = (found.operation, found.path_item);
    let mut params = Vec::new();
    for source in [operation.get("parameters"), path_item.get("parameters")] {
        for raw in source.and_then(Value::as_array).into_iter().flatten() {
            let (_, p) = deref(store, op_doc, raw)?;
            let param = parse_param(&p).ok_or_else(|| {
                Error::bad_document(format!(
                    "{}: a parameter of operation '{reference}' lacks name or in",
                    location
                ))
            })?;
            if !params
                .iter()
                .any(|q: &Param| q.name == param.name && q.location == param.location)
            {
                params.push(param);
            }
        }
    }
    let servers_value = operation
        .get("servers")
        .or_else(|| path_item.get("servers"))
        .or_else(|| op_doc.value.get("servers"))
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty());
    let mut servers = Vec::new();
    for server in servers_value.into_iter().flatten() {
        let Some(url) = server.get("url").and_then(Value::as_str) else {
            continue;
        };
        servers.push(Server {
            url: url.to_owned(),
        });
        if servers.len() == 1 {
            for var in server_variables(url, server.get("variables")) {
                if !params.iter().any(|p| p.name == var.name) {
                    params.push(var);
                }
            }
        }
    }
    Ok((params, servers))
}

/// The method's `response` settings: media type, OpenAPI response key, object key,
/// transform and schema override.
pub(super) fn response_spec(
    response: Option<&Value>,
    op_doc: &Doc,
    location: &str,
) -> Result<ResponseSpec> {
    Ok(ResponseSpec {
        media_type: response
            .and_then(|r| str_field(r, "overrideMediaType").or_else(|| str_field(r, "mediaType"))),
        doc_key: response.and_then(|r| match r.get("openAPIDocKey") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }),
        object_key: response.and_then(|r| str_field(r, "objectKey")),
        transform: response
            .map(|r| {
                let protocol = op_doc
                    .value
                    .pointer("/info/x-protocol")
                    .and_then(Value::as_str);
                crate::transform::ResponseTransform::from_response(r, protocol)
            })
            .transpose()
            .map_err(|err| Error::bad_document(format!("{}: {err}", location)))?
            .flatten()
            .map(Arc::new),
        schema_override: response
            .and_then(|r| r.get("schema_override"))
            .filter(|s| s.is_object())
            .cloned(),
    })
}
