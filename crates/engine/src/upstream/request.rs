//! Requests as they go on the wire: the URL from the method's server and path templates and
//! the statement's parameter values, the headers, the body translations of the document
//! (`requestTranslate`, `requestBodyTranslate`, AWS canonical query parameters), before auth
//! is added.

use bytes::Bytes;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use super::{Leg, Outgoing};
use crate::document::{Method, ParamLocation, WireTranslate, find_closing_brace};
use crate::error::{Error, ErrorKind, Result};

/// Sets the `Content-Type` of a request body (the method's request media type).
pub(super) fn set_content_type(
    headers: &mut HeaderMap,
    method: &Method,
    media_type: &str,
) -> Result<()> {
    let value = HeaderValue::from_str(media_type).map_err(|_| {
        Error::bad_document(format!(
            "{}: request media type '{media_type}' is not a valid header value",
            method.location
        ))
    })?;
    headers.insert(reqwest::header::CONTENT_TYPE, value);
    Ok(())
}

pub(super) fn set_header(headers: &mut HeaderMap, name: &str, value: &str) -> Result<()> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Error::invalid_sql(format!("'{name}' is not a valid HTTP header name")))?;
    let value = HeaderValue::from_str(value).map_err(|_| {
        Error::invalid_sql(format!(
            "the value for header '{name}' is not a valid HTTP header value"
        ))
    })?;
    headers.insert(name, value);
    Ok(())
}

/// Characters escaped in a path parameter value. `/` is kept: Google-style parameters
/// (`projects/p/locations/l`) carry several segments.
pub(super) const PATH_VALUE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'%')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']');

/// A header's name and value.
pub(crate) type Header = (String, Vec<u8>);

/// The URL and headers a leg's request would carry before auth is added, headers sorted: what
/// a planned write's digest covers (never sent, never shown).
pub(crate) fn unsigned_request(leg: &Leg<'_>) -> Result<(String, Vec<Header>)> {
    let (url, headers) = build_request(leg)?;
    let mut headers: Vec<Header> = headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect();
    headers.sort();
    Ok((url.to_string(), headers))
}

/// Whether a request of `leg` only reads, so that it may be sent again: its method's effect
/// is a read ([`crate::effect`]) and the request does not give the header that names an AWS
/// action a value other than the document's.
pub(super) fn reads_only(leg: &Leg<'_>) -> bool {
    leg.method.effect.is_read()
        && !leg.values.iter().any(|(param, value)| {
            param.location == ParamLocation::Header
                && param
                    .name
                    .eq_ignore_ascii_case(crate::effect::AWS_TARGET_HEADER)
                && param.default.as_deref() != Some(value.as_str())
        })
}

/// A request as it would go on the wire before auth is added: HTTP method, URL, headers
/// (sorted) and body, after `request.transform` and `config.requestTranslate`, as
/// [`Upstream::call`] sends it; nothing is sent.
pub(crate) struct UnsignedWire {
    pub(crate) http_method: String,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Option<Bytes>,
}

/// The request of `leg` with `body` (media type, bytes) as [`Upstream::call`] sends it,
/// before auth, with the HTTP method and URL it was built with (they name it in errors).
pub(super) fn call_wire(
    leg: &Leg<'_>,
    body: Option<&(&str, Bytes)>,
) -> Result<(reqwest::Method, Url, Wire)> {
    let (url, mut headers) = build_request(leg)?;
    let method = reqwest::Method::from_bytes(leg.method.http_method.as_bytes())
        .map_err(|_| Error::bad_document(format!("{}: bad HTTP method", leg.method.location)))?;
    if let Some((content_type, _)) = body {
        set_content_type(&mut headers, leg.method, content_type)?;
    }
    let sent = body.map(|(_, bytes)| bytes);
    let wire = on_the_wire(leg.method, Outgoing::new(&method, &url, &headers, sent))?;
    Ok((method, url, wire))
}

/// The request of `leg` with `body` (media type, bytes) as [`Upstream::call`] would put it
/// on the wire, before auth.
pub(crate) fn unsigned_wire(leg: &Leg<'_>, body: Option<(&str, Bytes)>) -> Result<UnsignedWire> {
    let (_, _, wire) = call_wire(leg, body.as_ref())?;
    let mut headers: Vec<(String, String)> = wire
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    headers.sort();
    Ok(UnsignedWire {
        http_method: wire.method.as_str().to_owned(),
        url: wire.url.to_string(),
        headers,
        body: wire.body,
    })
}

pub(super) fn build_request(leg: &Leg<'_>) -> Result<(Url, HeaderMap)> {
    let mut url = request_url(leg)?;
    append_query(leg, &mut url);
    let headers = request_headers(leg)?;
    Ok((url, headers))
}

/// The URL of a leg without its query: the server (the configured base URL, else the
/// document's first) with its variables, then the path with its parameters.
fn request_url(leg: &Leg<'_>) -> Result<Url> {
    let method = leg.method;
    let server = match leg.base_url {
        Some(base) => base.to_owned(),
        None => method
            .servers
            .first()
            .map(|s| s.url.clone())
            .ok_or_else(|| {
                Error::bad_document(format!("{}: the operation has no servers", method.location))
            })?,
    };
    let server = substitute(&server, |name| server_value(leg, name))?;
    let path = substitute(&method.path, |name| {
        let (_, value) = leg
            .values
            .iter()
            .find(|(p, _)| p.location == ParamLocation::Path && p.name == name)
            .ok_or_else(|| Error::invalid_sql(format!("path parameter '{name}' has no value")))?;
        if value
            .split('/')
            .any(|segment| segment == ".." || segment == ".")
        {
            return Err(Error::invalid_sql(format!(
                "path parameter '{name}' may not contain '.' or '..' segments"
            )));
        }
        Ok(utf8_percent_encode(value, PATH_VALUE).to_string())
    })?;
    let joined = format!(
        "{}/{}",
        server.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    let url = Url::parse(&joined).map_err(|err| {
        Error::bad_document(format!(
            "{}: request URL '{joined}' is invalid: {err}",
            method.location
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::bad_document(format!(
            "{}: only http and https servers are called",
            method.location
        )));
    }
    Ok(url)
}

/// Appends a leg's query parameters to `url` (AWS's canonical members when the method asks
/// for them), dropping `__` names when the method's wire translation says so.
fn append_query(leg: &Leg<'_>, url: &mut Url) {
    let method = leg.method;
    {
        let query: Vec<(&str, &str)> = leg
            .values
            .iter()
            .filter(|(p, _)| p.location == ParamLocation::Query)
            .map(|(p, v)| (p.name.as_str(), v.as_str()))
            .collect();
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in query {
                match method
                    .request
                    .aws_canonical
                    .then(|| aws_canonical(name, value))
                {
                    Some(Some(members)) => {
                        for (key, member) in members {
                            pairs.append_pair(&key, &member);
                        }
                    }
                    _ => {
                        pairs.append_pair(name, value);
                    }
                }
            }
        }
    }
    if method.request.wire == WireTranslate::DropDoubleUnderscore
        && url.query_pairs().any(|(name, _)| name.starts_with("__"))
    {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(name, _)| !name.starts_with("__"))
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept);
        }
    }
}

/// A leg's headers: `Accept`, the declared header parameters (given, else defaulted), then
/// header values given for undeclared names.
fn request_headers(leg: &Leg<'_>) -> Result<HeaderMap> {
    let method = leg.method;
    let mut headers = HeaderMap::new();
    headers.insert(
        reqwest::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    // Declared header parameters: the statement's value, else the document's default (or
    // the one value a required header's enum allows), as any-sdk fills them
    // (`X-Amz-Target: CloudApiService.ListResources`).
    for param in &method.params {
        if param.location != ParamLocation::Header {
            continue;
        }
        let given = leg
            .values
            .iter()
            .find(|(p, _)| {
                std::ptr::eq(*p, param)
                    || p.location == ParamLocation::Header && p.name == param.name
            })
            .map(|(_, v)| v.as_str());
        let only = match param.allowed.as_slice() {
            [one] if param.required => Some(one.as_str()),
            _ => None,
        };
        if let Some(value) = given.or(param.default.as_deref()).or(only) {
            set_header(&mut headers, &param.name, value)?;
        }
    }
    for (param, value) in &leg.values {
        if param.location == ParamLocation::Header
            && !method
                .params
                .iter()
                .any(|p| p.location == ParamLocation::Header && p.name == param.name)
        {
            set_header(&mut headers, &param.name, value)?;
        }
    }
    Ok(headers)
}

/// A request as it goes on the wire.
pub(super) struct Wire {
    pub(super) method: reqwest::Method,
    pub(super) url: Url,
    pub(super) headers: HeaderMap,
    pub(super) body: Option<Bytes>,
}

impl Wire {
    /// The request to send.
    pub(super) fn outgoing(&self) -> Outgoing<'_> {
        Outgoing::new(&self.method, &self.url, &self.headers, self.body.as_ref())
    }
}

/// `config.requestTranslate` `get_query_to_post_form_utf_8`'s form media type.
pub(super) const FORM_UTF_8: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The request of `method` as sent, before auth signs it: its body through
/// `request.transform`, then `config.requestTranslate` `get_query_to_post_form_utf_8`
/// (the query string as the body of a POST, as any-sdk's translator does; a request that
/// already has a body cannot be translated and fails before anything is sent).
pub(super) fn on_the_wire(method: &Method, request: Outgoing<'_>) -> Result<Wire> {
    let body = match (request.body, &method.request.transform) {
        (Some(body), Some(template)) => Some(transform_request_body(method, template, body)?),
        (body, _) => body.cloned(),
    };
    let mut wire = Wire {
        method: request.method.clone(),
        url: request.url.clone(),
        headers: request.headers.clone(),
        body,
    };
    if method.request.wire == WireTranslate::QueryToPostForm {
        if wire.body.is_some() {
            return Err(Error::bad_document(format!(
                "{}: config.requestTranslate get_query_to_post_form_utf_8 cannot move the query into a request that has a body",
                method.location
            )));
        }
        let form = wire.url.query().unwrap_or_default().to_owned();
        wire.url.set_query(None);
        wire.method = reqwest::Method::POST;
        wire.headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static(FORM_UTF_8),
        );
        wire.body = Some(Bytes::from(form));
    }
    Ok(wire)
}

/// Steps and output a request transform may take per byte of the body, beyond a fixed
/// allowance (as for response transforms).
pub(super) const REQUEST_TRANSFORM_STEPS: u64 = 1_000_000;
pub(super) const REQUEST_TRANSFORM_OUTPUT: usize = 1 << 20;

/// `request.transform`: the template runs with the JSON body as dot; its output is the
/// body sent (any-sdk's `transformRequestBodyBytes`).
pub(super) fn transform_request_body(
    method: &Method,
    template: &crate::template::Template,
    body: &Bytes,
) -> Result<Bytes> {
    let failed = |why: String| {
        Error::bad_document(format!(
            "{}: the request transform of method '{}' failed: {why}",
            method.location, method.name
        ))
    };
    let input: serde_json::Value = serde_json::from_slice(body)
        .map_err(|err| failed(format!("the body is not JSON: {err}")))?;
    let limits = crate::template::Limits {
        max_steps: REQUEST_TRANSFORM_STEPS.saturating_add(64u64.saturating_mul(body.len() as u64)),
        max_output: REQUEST_TRANSFORM_OUTPUT.saturating_add(8usize.saturating_mul(body.len())),
    };
    let out = template
        .execute_json(&input, limits)
        .map_err(|err| failed(err.to_string()))?;
    Ok(Bytes::from(out))
}

/// AWS's canonical query members of a parameter whose value is a JSON object or array, as
/// any-sdk's `AWSCanonical` transposer writes them: `name.key` for object members,
/// `name.N` (from 1) for list items, nested as deep as the value goes; scalars as text
/// (JSON `null` members are left out). `None` for a value that is not a JSON object or
/// array: it is sent as it is.
pub(super) fn aws_canonical(name: &str, value: &str) -> Option<Vec<(String, String)>> {
    let trimmed = value.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return None;
    }
    let parsed: serde_json::Value = serde_json::from_str(value).ok()?;
    fn walk(key: String, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    walk(format!("{key}.{k}"), v, out);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(format!("{key}.{}", i + 1), v, out);
                }
            }
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => out.push((key, s.clone())),
            other => out.push((key, other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk(name.to_owned(), &parsed, &mut out);
    Some(out)
}

/// A server variable's value: the statement's, then the tenant's environment
/// (`x-stackQL-envVar`), then the document's default. Values are checked against the
/// variable's enum or pattern, or else limited to host-safe characters, so a WHERE clause
/// cannot redirect a request to another host.
pub(super) fn server_value(leg: &Leg<'_>, spec: &str) -> Result<String> {
    let (name, pattern) = match spec.split_once(':') {
        Some((name, pattern)) => (name, Some(pattern)),
        None => (spec, None),
    };
    let param = leg
        .method
        .params
        .iter()
        .find(|p| p.location == ParamLocation::Server && p.name == name);
    let supplied = leg
        .values
        .iter()
        .find(|(p, _)| p.name == name)
        .map(|(_, v)| v.clone());
    let from_env = param
        .and_then(|p| p.env_var.as_deref())
        .and_then(|var| leg.credentials.get(var));
    let value = supplied
        .clone()
        .or(from_env)
        .or_else(|| param.and_then(|p| p.default.clone()))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::MissingParameters,
                format!("server variable '{name}' has no value: supply it in the WHERE clause"),
            )
        })?;
    if supplied.is_some() {
        let allowed = param.map(|p| p.allowed.as_slice()).unwrap_or_default();
        let ok = if !allowed.is_empty() {
            allowed.contains(&value)
        } else if let Some(pattern) = pattern {
            regex::Regex::new(pattern)
                .map(|re| re.is_match(&value))
                .unwrap_or(false)
        } else {
            !value.is_empty()
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok {
            return Err(Error::invalid_sql(format!(
                "value '{value}' is not allowed for server variable '{name}'{}",
                if allowed.is_empty() {
                    String::new()
                } else {
                    format!(" (allowed: {})", allowed.join(", "))
                }
            )));
        }
    }
    Ok(value)
}

/// Replaces each `{name}` / `{name:pattern}` in `template` with `value(spec)`.
pub(super) fn substitute(
    template: &str,
    mut value: impl FnMut(&str) -> Result<String>,
) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = find_closing_brace(after) else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        out.push_str(&value(&after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
