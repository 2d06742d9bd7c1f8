//! Discovery from the documents: providers, services, resources, methods, columns and
//! method contracts, as engine API and as `SHOW` / `DESCRIBE` results.

use super::document::ParamLocation;
use super::error::{Error, Result};
use super::sql::ShowWhat;
use super::state::{Inner, open_provider, open_resource};
use super::types::{
    Cell, ColumnInfo, ExecContext, MethodContract, MethodInfo, ParamInfo, ProviderInfo,
    QueryOutput, ResourceInfo, ServiceInfo, SqlVerb,
};

pub(crate) fn providers(inner: &Inner, cx: &ExecContext) -> Result<Vec<ProviderInfo>> {
    Ok(inner
        .registry
        .installed()?
        .into_iter()
        .filter(|p| cx.allows(&p.name))
        .map(|p| ProviderInfo {
            name: p.name,
            version: p.chosen,
            versions: p.versions,
        })
        .collect())
}

pub(crate) fn services(
    inner: &Inner,
    cx: &ExecContext,
    provider: &str,
) -> Result<Vec<ServiceInfo>> {
    let provider = open_provider(inner, cx, provider)?;
    Ok(provider
        .services()
        .into_iter()
        .map(|s| ServiceInfo {
            id: s.id,
            name: s.name,
            title: s.title,
            description: s.description,
        })
        .collect())
}

pub(crate) fn resources(
    inner: &Inner,
    cx: &ExecContext,
    provider: &str,
    service: &str,
) -> Result<Vec<ResourceInfo>> {
    let provider = open_provider(inner, cx, provider)?;
    let service = provider.service(&inner.store, service)?;
    Ok(service
        .resource_names()
        .into_iter()
        .map(|(name, title)| ResourceInfo {
            id: format!("{}.{}.{}", provider.name, service.name, name),
            name,
            title,
        })
        .collect())
}

pub(crate) fn methods(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
) -> Result<Vec<MethodInfo>> {
    let resource = open_resource(inner, cx, names)?;
    let mut out = super::views::methods(&resource);
    for m in &resource.methods {
        out.push(MethodInfo {
            name: m.name.clone(),
            sql_verb: m.verb,
            required_params: listed_required_params(&inner.store, m)?,
            http_method: Some(m.http_method.clone()),
            effect: Some(m.effect.clone()),
        });
    }
    out.sort_by(|a, b| (verb_rank(a.sql_verb), &a.name).cmp(&(verb_rank(b.sql_verb), &b.name)));
    Ok(out)
}

/// A method's required parameters as StackQL lists them: the required path, query and
/// header parameters, then the required body fields as `data__<field>`, then every
/// variable of the first server URL; each group sorted by name.
fn listed_required_params(
    store: &super::document::DocumentStore,
    method: &super::document::Method,
) -> Result<Vec<String>> {
    let mut plain: Vec<String> = method
        .params
        .iter()
        .filter(|p| p.required && p.location != ParamLocation::Server)
        .map(|p| p.name.clone())
        .collect();
    plain.sort();
    let body = method
        .required_body_fields(store)?
        .into_iter()
        .map(|field| format!("data__{field}"));
    let mut server: Vec<String> = method
        .params
        .iter()
        .filter(|p| p.location == ParamLocation::Server)
        .map(|p| p.name.clone())
        .collect();
    server.sort();
    plain.extend(body);
    plain.extend(server);
    Ok(plain)
}

/// StackQL's listing order of verbs: SELECT, INSERT, DELETE, UPDATE, REPLACE, then EXEC.
fn verb_rank(verb: Option<SqlVerb>) -> u8 {
    match verb {
        Some(SqlVerb::Select) => 0,
        Some(SqlVerb::Insert) => 1,
        Some(SqlVerb::Delete) => 2,
        Some(SqlVerb::Update) => 3,
        Some(SqlVerb::Replace) => 4,
        None => 5,
    }
}

pub(crate) fn columns(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
) -> Result<Vec<ColumnInfo>> {
    super::views::columns(inner, cx, names)
}

pub(crate) fn contract(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
    method: &str,
) -> Result<MethodContract> {
    let resource = open_resource(inner, cx, names)?;
    if let Some(broken) = resource.broken_method(method) {
        return Err(broken);
    }
    let found = resource.method(method).ok_or_else(|| {
        Error::unknown(format!(
            "method '{method}' not found in resource '{}'",
            resource.full_name()
        ))
    })?;
    let columns = found
        .columns(&inner.store)?
        .into_iter()
        .map(|c| ColumnInfo {
            name: c.name,
            type_name: c.type_name,
            description: c.description,
        })
        .collect();
    Ok(MethodContract {
        resource: resource.full_name(),
        name: found.name.clone(),
        sql_verb: found.verb,
        http_method: found.http_method.clone(),
        path: found.path.clone(),
        summary: found.summary.clone(),
        description: found.description.clone(),
        params: found
            .params
            .iter()
            .map(|p| ParamInfo {
                name: p.name.clone(),
                location: p.location.as_str().to_owned(),
                required: p.required,
                type_name: p.type_name.clone(),
                default: p.default.clone(),
                allowed_values: p.allowed.clone(),
                description: p.description.clone(),
            })
            .collect(),
        request_body: found.request_body.clone(),
        object_key: found.response.object_key.clone(),
        columns,
    })
}

fn text(value: impl Into<String>) -> Cell {
    Cell::Text(value.into())
}

fn opt(value: Option<String>) -> Cell {
    value.map(Cell::Text).unwrap_or(Cell::Null)
}

fn output(columns: &[&str], rows: Vec<Vec<Cell>>) -> QueryOutput {
    QueryOutput {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        rows,
        warnings: Vec::new(),
        ..Default::default()
    }
}

/// SQL `LIKE` semantics (`%`, `_`, case-insensitive ASCII) for `SHOW … LIKE`.
fn like_matches(pattern: &str, value: &str) -> bool {
    fn go(p: &[u8], v: &[u8]) -> bool {
        match p.split_first() {
            None => v.is_empty(),
            Some((b'%', rest)) => (0..=v.len()).any(|i| go(rest, &v[i..])),
            Some((b'_', rest)) => !v.is_empty() && go(rest, &v[1..]),
            Some((c, rest)) => {
                v.first().is_some_and(|x| x.eq_ignore_ascii_case(c)) && go(rest, &v[1..])
            }
        }
    }
    go(pattern.as_bytes(), value.as_bytes())
}

pub(crate) fn show(
    inner: &Inner,
    cx: &ExecContext,
    what: &ShowWhat,
    like: Option<&str>,
) -> Result<QueryOutput> {
    let keep = |name: &str| like.is_none_or(|p| like_matches(p, name));
    Ok(match what {
        ShowWhat::Providers => output(
            &["name", "version"],
            providers(inner, cx)?
                .into_iter()
                .filter(|p| keep(&p.name))
                .map(|p| vec![text(p.name), text(p.version)])
                .collect(),
        ),
        ShowWhat::Services { provider } => output(
            &["id", "name", "title"],
            services(inner, cx, provider)?
                .into_iter()
                .filter(|s| keep(&s.name))
                .map(|s| vec![text(s.id), text(s.name), opt(s.title)])
                .collect(),
        ),
        ShowWhat::Resources { provider, service } => output(
            &["name", "id"],
            resources(inner, cx, provider, service)?
                .into_iter()
                .filter(|r| keep(&r.name))
                .map(|r| vec![text(r.name), text(r.id)])
                .collect(),
        ),
        ShowWhat::Methods {
            provider,
            service,
            resource,
        } => output(
            &["MethodName", "RequiredParams", "SQLVerb"],
            methods(
                inner,
                cx,
                &[provider.clone(), service.clone(), resource.clone()],
            )?
            .into_iter()
            .filter(|m| keep(&m.name))
            .map(|m| {
                vec![
                    text(m.name),
                    text(m.required_params.join(", ")),
                    text(
                        m.sql_verb
                            .map(|v| v.as_str().to_ascii_uppercase())
                            .unwrap_or_else(|| "EXEC".to_owned()),
                    ),
                ]
            })
            .collect(),
        ),
    })
}

pub(crate) fn describe(inner: &Inner, cx: &ExecContext, target: &[String]) -> Result<QueryOutput> {
    let names: [String; 3] = target
        .to_vec()
        .try_into()
        .map_err(|_| Error::invalid_sql("DESCRIBE expects <provider>.<service>.<resource>"))?;
    Ok(output(
        &["name", "type", "description"],
        columns(inner, cx, &names)?
            .into_iter()
            .map(|c| vec![text(c.name), text(c.type_name), opt(c.description)])
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::like_matches;

    #[test]
    fn like_patterns() {
        assert!(like_matches("%rep%", "repos"));
        assert!(like_matches("re_os", "REPOS"));
        assert!(!like_matches("re_", "repos"));
    }
}
