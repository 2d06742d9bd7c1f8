//! Deciding the next page: the method's explicit `pagination` config (token in query or
//! header, page number with terminator), or, without config, the conventions StackQL's
//! documents rely on: `Link: <…>; rel="next"`, `nextPageToken` → `pageToken`,
//! `@odata.nextLink`, Azure's `nextLink` (a whole URL, GET as is), and `next_cursor` →
//! `cursor`; for AWS XML listings (a
//! `schema_driven_xml` response), `IsTruncated` with `NextContinuationToken`, `NextToken`,
//! `nextToken`, `NextMarker`, `Marker` or `ContinuationToken`, sent back as the query
//! parameter the method declares for it. [`wanted`] names the body values a
//! decision needs, so they are read in the pass that decodes the page's rows; [`next_page`]
//! decides from them and the headers.

use reqwest::header::HeaderMap;
use url::Url;

use crate::document::{Method, Pagination, ParamLocation};
use crate::error::{Error, ErrorKind, Result};
use crate::transform::ResponseTransform;

/// How to ask for the next page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Request this URL (same origin as the first request).
    Url(Url),
    /// Send the same request with this header set.
    Header(String, String),
    /// Send the same request with this field of its JSON body set.
    Body(String, String),
}

/// The scalars (paths of object keys from the root) the next-page decision after a response
/// with `headers` needs from its body, in the order [`next_page`] takes them; empty when the
/// headers decide alone. The caller reads them in the pass that decodes the rows.
pub(crate) fn wanted(method: &Method, headers: &HeaderMap) -> Vec<Vec<String>> {
    match &method.pagination {
        Some(config) if config.algorithm.as_deref() == Some("page_number") => config
            .response_token
            .iter()
            .chain(&config.terminator)
            .map(|spec| key_path(&spec.key))
            .collect(),
        Some(config) => match &config.response_token {
            Some(spec) if spec.location != "header" => vec![key_path(&spec.key)],
            _ => Vec::new(),
        },
        None if link_next(headers).is_some() => Vec::new(),
        None if is_aws_xml(method) => std::iter::once(vec![TRUNCATED.to_owned()])
            .chain(
                aws_xml_tokens(method)
                    .into_iter()
                    .map(|(field, _)| vec![field.to_owned()]),
            )
            .collect(),
        None => CONVENTIONAL
            .iter()
            .map(|path| path.iter().map(|key| (*key).to_owned()).collect())
            .collect(),
    }
}

/// Body scalars of the conventions, in the order [`conventional`] reads them.
const CONVENTIONAL: [&[&str]; 5] = [
    &["nextPageToken"],
    &["@odata.nextLink"],
    &["nextLink"],
    &["next_cursor"],
    &["response_metadata", "next_cursor"],
];

/// The flag of AWS listings that says whether more pages follow.
const TRUNCATED: &str = "IsTruncated";

/// Next-page tokens of AWS XML listings, in the order they are tried: the response field
/// and the request parameters (query) it is sent back as.
const AWS_XML_TOKENS: [(&str, &[&str]); 6] = [
    (
        "NextContinuationToken",
        &["continuation-token", "ContinuationToken"],
    ),
    ("NextToken", &["NextToken"]),
    ("nextToken", &["nextToken"]),
    ("NextMarker", &["marker", "Marker"]),
    ("Marker", &["Marker", "marker"]),
    (
        "ContinuationToken",
        &["continuation-token", "ContinuationToken"],
    ),
];

/// Whether rows come from an XML body by the schema-driven transform (whose envelope
/// carries the listing's own text fields).
fn is_aws_xml(method: &Method) -> bool {
    matches!(
        method.response.transform.as_deref(),
        Some(ResponseTransform::SchemaDrivenXml { .. })
    )
}

/// The tokens of [`AWS_XML_TOKENS`] whose request parameter `method` declares in its query.
fn aws_xml_tokens(method: &Method) -> Vec<(&'static str, &str)> {
    AWS_XML_TOKENS
        .iter()
        .filter_map(|(field, names)| {
            names.iter().find_map(|name| {
                method
                    .params
                    .iter()
                    .find(|p| p.location == ParamLocation::Query && p.name == *name)
                    .map(|p| (*field, p.name.as_str()))
            })
        })
        .collect()
}

/// The next page of an AWS XML listing: none once `IsTruncated` is false, else the first
/// token found, sent as its declared parameter.
fn aws_xml(
    method: &Method,
    current: &Url,
    found: &mut impl Iterator<Item = Option<String>>,
) -> Option<Next> {
    let truncated = found.next().flatten();
    if truncated
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case("false"))
    {
        return None;
    }
    aws_xml_tokens(method)
        .into_iter()
        .zip(found)
        .find_map(|((_, param), token)| token.map(|t| (param, t)))
        .map(|(param, token)| Next::Url(with_query(current, param, &token)))
}

/// The next page after a response with `headers` to a request for `current`; `found` holds
/// the body's scalars at the paths [`wanted`] named for it. With `has_body` (the request
/// carries a JSON body), a request token at `location: body` goes in that body.
pub(crate) fn next_page(
    method: &Method,
    current: &Url,
    headers: &HeaderMap,
    found: &[Option<String>],
    has_body: bool,
) -> Result<Option<Next>> {
    // Empty values count as absent.
    let mut found = found
        .iter()
        .map(|v| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned));
    match &method.pagination {
        Some(config) => explicit(config, current, headers, &mut found, has_body),
        None if link_next(headers).is_none() && is_aws_xml(method) => {
            Ok(aws_xml(method, current, &mut found))
        }
        None => conventional(method, current, headers, &mut found),
    }
}

/// `$.a.b`, `a.b`, `$['@odata.nextLink']` → ["a", "b"] / ["@odata.nextLink"].
fn key_path(key: &str) -> Vec<String> {
    let trimmed = key.trim();
    let trimmed = trimmed.strip_prefix('$').unwrap_or(trimmed);
    if let Some(inner) = trimmed
        .strip_prefix("['")
        .and_then(|s| s.strip_suffix("']"))
    {
        return vec![inner.to_owned()];
    }
    trimmed
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn explicit(
    config: &Pagination,
    current: &Url,
    headers: &HeaderMap,
    found: &mut impl Iterator<Item = Option<String>>,
    has_body: bool,
) -> Result<Option<Next>> {
    let request = config.request_token.clone();
    let token = if config.algorithm.as_deref() == Some("page_number") {
        let page = config
            .response_token
            .as_ref()
            .and_then(|_| found.next().flatten());
        let total = config
            .terminator
            .as_ref()
            .and_then(|_| found.next().flatten());
        // Without a terminator (or a readable page number) one page is all we can trust.
        let (Some(page), Some(total)) = (
            page.and_then(|p| p.parse::<u64>().ok()),
            total.and_then(|t| t.parse::<u64>().ok()),
        ) else {
            return Ok(None);
        };
        if page >= total {
            return Ok(None);
        }
        Some((page + 1).to_string())
    } else {
        match &config.response_token {
            Some(spec) if spec.location == "header" => header_token(headers, &spec.key),
            Some(_) => found.next().flatten(),
            None => None,
        }
    };
    let Some(token) = token else { return Ok(None) };
    match request {
        Some(spec) if spec.location == "header" => Ok(Some(Next::Header(spec.key, token))),
        // A request without a body (a GET) takes a `body` token in its query, as before.
        Some(spec) if spec.location == "body" && has_body && !spec.key.is_empty() => {
            Ok(Some(Next::Body(spec.key, token)))
        }
        Some(spec)
            if spec.key.is_empty() || spec.location == "request" || spec.location == "url" =>
        {
            same_origin(current, &token).map(|u| Some(Next::Url(u)))
        }
        Some(spec) => Ok(Some(Next::Url(with_query(current, &spec.key, &token)))),
        None => Ok(Some(Next::Url(with_query(current, "pageToken", &token)))),
    }
}

fn conventional(
    method: &Method,
    current: &Url,
    headers: &HeaderMap,
    found: &mut impl Iterator<Item = Option<String>>,
) -> Result<Option<Next>> {
    if let Some(link) = link_next(headers) {
        return same_origin(current, &link).map(|u| Some(Next::Url(u)));
    }
    let (page_token, odata, azure, cursor, nested_cursor) = (
        found.next().flatten(),
        found.next().flatten(),
        found.next().flatten(),
        found.next().flatten(),
        found.next().flatten(),
    );
    if let Some(token) = page_token {
        return Ok(Some(Next::Url(with_query(current, "pageToken", &token))));
    }
    // Whole URLs (OData's, Azure Resource Manager's): requested as given, query included.
    if let Some(link) = odata.or(azure) {
        return same_origin(current, &link).map(|u| Some(Next::Url(u)));
    }
    let declares_cursor = method
        .params
        .iter()
        .any(|p| p.location == ParamLocation::Query && p.name == "cursor");
    match cursor.or(nested_cursor) {
        Some(token) if declares_cursor => {
            Ok(Some(Next::Url(with_query(current, "cursor", &token))))
        }
        _ => Ok(None),
    }
}

fn header_token(headers: &HeaderMap, key: &str) -> Option<String> {
    let value = headers.get(key)?.to_str().ok()?;
    if key.eq_ignore_ascii_case("link") {
        return parse_link_next(value);
    }
    Some(value.to_owned()).filter(|v| !v.is_empty())
}

fn link_next(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(parse_link_next)
}

/// The URL of the `rel="next"` entry of a `Link` header value.
pub(crate) fn parse_link_next(value: &str) -> Option<String> {
    for entry in value.split(',') {
        let mut pieces = entry.split(';');
        let target = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p.eq_ignore_ascii_case("rel=\"next\"") || p.eq_ignore_ascii_case("rel=next")
        });
        if is_next {
            return target
                .strip_prefix('<')
                .and_then(|t| t.strip_suffix('>'))
                .map(str::to_owned);
        }
    }
    None
}

/// A next-page URL is followed only on the origin of the current request: an upstream must
/// not be able to send our credentials elsewhere.
fn same_origin(current: &Url, link: &str) -> Result<Url> {
    let next = current.join(link).map_err(|err| {
        Error::new(
            ErrorKind::Upstream,
            format!("upstream next-page link is not a URL: {err}"),
        )
    })?;
    if next.origin() != current.origin() {
        return Err(Error::new(
            ErrorKind::Upstream,
            format!(
                "refusing to follow a next-page link to another origin ({}) than the request's ({})",
                next.origin().ascii_serialization(),
                current.origin().ascii_serialization()
            ),
        ));
    }
    Ok(next)
}

fn with_query(current: &Url, key: &str, value: &str) -> Url {
    let mut next = current.clone();
    let kept: Vec<(String, String)> = current
        .query_pairs()
        .filter(|(k, _)| k != key)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    {
        let mut pairs = next.query_pairs_mut();
        pairs.clear();
        for (k, v) in &kept {
            pairs.append_pair(k, v);
        }
        pairs.append_pair(key, value);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_header_next_is_found() {
        let value = r#"<https://api.github.com/organizations/1/repos?page=2>; rel="next", <https://api.github.com/organizations/1/repos?page=5>; rel="last""#;
        assert_eq!(
            parse_link_next(value).as_deref(),
            Some("https://api.github.com/organizations/1/repos?page=2")
        );
        assert_eq!(parse_link_next(r#"<https://x/?page=1>; rel="prev""#), None);
    }

    #[test]
    fn other_origins_are_refused() {
        let current = Url::parse("http://127.0.0.1:8080/a?x=1").unwrap();
        assert!(same_origin(&current, "/b?page=2").is_ok());
        assert!(same_origin(&current, "http://evil.example/b").is_err());
    }

    #[test]
    fn query_token_replaces_previous_value() {
        let current = Url::parse("http://h/items?pageToken=a&q=1").unwrap();
        assert_eq!(
            with_query(&current, "pageToken", "b").as_str(),
            "http://h/items?q=1&pageToken=b"
        );
    }

    #[test]
    fn key_paths_accept_jsonpath_forms() {
        assert_eq!(key_path("$.result_info.page"), vec!["result_info", "page"]);
        assert_eq!(
            key_path("result_info.total_pages"),
            vec!["result_info", "total_pages"]
        );
        assert_eq!(key_path("$['@odata.nextLink']"), vec!["@odata.nextLink"]);
    }
}
