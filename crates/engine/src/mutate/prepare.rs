//! Preparing a write off the async threads: the method a statement's values call, its
//! required parameters, and each request's parameters and typed body.

use super::*;

/// The planned request of one row of named values.
pub(super) fn row_request(
    resource: &Arc<Resource>,
    method: &Method,
    row: &[(String, Scalar)],
    runtime: bool,
) -> PlannedRequest {
    request(resource, method, |param| {
        let value = row.iter().find_map(|(name, value)| {
            param_named(method, name)
                .is_some_and(|p| std::ptr::eq(p, param))
                .then_some(value)
        });
        match value.and_then(Scalar::as_param) {
            Some(_) if runtime => ParamValues::Runtime,
            Some(text) => ParamValues::Given(vec![text]),
            None => ParamValues::Omitted,
        }
    })
}

pub(super) fn named_row(columns: &[String], row: Vec<Scalar>) -> Result<Vec<(String, Scalar)>> {
    if row.len() != columns.len() {
        return Err(Error::invalid_sql(format!(
            "INSERT names {} columns but a row has {} values",
            columns.len(),
            row.len()
        )));
    }
    Ok(columns.iter().cloned().zip(row).collect())
}

pub(super) fn cell_scalar(cell: Cell) -> Scalar {
    match cell {
        Cell::Null => Scalar::Null,
        Cell::Boolean(b) => Scalar::Bool(b),
        Cell::Integer(i) => Scalar::Number(i.to_string()),
        Cell::Real(r) => Scalar::Number(r.to_string()),
        Cell::Text(t) => Scalar::Text(t),
        Cell::Blob(b) => Scalar::Text(String::from_utf8_lossy(&b).into_owned()),
    }
}

fn param_named<'m>(method: &'m Method, name: &str) -> Option<&'m Param> {
    if name.starts_with(BODY_PREFIX) {
        return None;
    }
    method
        .params
        .iter()
        .find(|p| method.answers_to(&p.name, name))
}

/// The first method bound to `verb` whose required parameters every row supplies.
pub(super) fn choose_method(
    resource: &Resource,
    verb: SqlVerb,
    rows: &[Vec<(String, Scalar)>],
) -> Result<usize> {
    let candidates = resource.methods_for(verb);
    if candidates.is_empty()
        && let Some(broken) = resource.broken_for(verb)
    {
        return Err(broken);
    }
    if candidates.is_empty() {
        let names: Vec<&str> = resource.methods.iter().map(|m| m.name.as_str()).collect();
        return Err(Error::unsupported(format!(
            "resource '{}' has no method bound to {}; its methods (callable with EXEC): {}",
            resource.full_name(),
            verb.as_str().to_ascii_uppercase(),
            names.join(", ")
        )));
    }
    let supplies = |method: &Method| {
        rows.iter().all(|row| {
            method
                .required_params()
                .all(|param| supplied(method, param, row))
        })
    };
    let chosen = candidates.iter().find(|m| supplies(m));
    if chosen.is_none()
        && let Some(broken) = resource.broken_for(verb)
    {
        return Err(broken);
    }
    let chosen = chosen.ok_or_else(|| {
        let listing: Vec<String> = candidates
            .iter()
            .map(|m| {
                let required: Vec<&str> = m.required_params().map(|p| p.name.as_str()).collect();
                format!("{}({})", m.name, required.join(", "))
            })
            .collect();
        Error::new(
            ErrorKind::MissingParameters,
            format!(
                "cannot {} '{}': no {} method has all its required parameters supplied; methods and their required parameters: {}",
                verb.as_str().to_ascii_uppercase(),
                resource.full_name(),
                verb.as_str(),
                listing.join("; ")
            ),
        )
    })?;
    resource
        .methods
        .iter()
        .position(|m| std::ptr::eq(m, *chosen))
        .ok_or_else(|| Error::internal("chosen method not found in its resource"))
}

/// Whether `values` give `param` of `method` a non-NULL value.
fn supplied(method: &Method, param: &Param, values: &[(String, Scalar)]) -> bool {
    values.iter().any(|(name, value)| {
        *value != Scalar::Null && param_named(method, name).is_some_and(|p| std::ptr::eq(p, param))
    })
}

pub(super) fn check_required(
    resource: &Resource,
    method: &Method,
    args: &[(String, Scalar)],
) -> Result<()> {
    let missing: Vec<&str> = method
        .required_params()
        .filter(|param| !supplied(method, param, args))
        .map(|p| p.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::MissingParameters,
        format!(
            "EXEC {}.{} needs @{}",
            resource.full_name(),
            method.name,
            missing.join(", @")
        ),
    ))
}

/// A row's request body: the `@@json` body as given, with the row's fields set over an
/// object; else the method's template rendered with them; else none.
fn row_body(
    json_body: Option<&Value>,
    template: Option<&BodyTemplate>,
    fields: Vec<(Vec<String>, Value)>,
) -> Option<Value> {
    match json_body {
        // `@@json`: the body as given, with the named fields set over an object.
        Some(Value::Object(map)) => {
            let mut body = Value::Object(map.clone());
            for (path, value) in fields {
                set_path(&mut body, &path, value);
            }
            Some(body)
        }
        Some(other) => Some(other.clone()),
        None => template.and_then(|template| template.render(fields)),
    }
}

pub(super) fn prepare(
    inner: &Inner,
    resource: Arc<Resource>,
    method_index: usize,
    rows: Vec<Vec<(String, Scalar)>>,
    where_names: &[String],
    json_body: Option<Value>,
) -> Result<Prepared> {
    let method = &resource.methods[method_index];
    let provider = inner.registry.open(&resource.provider)?;
    let schema = method.request_schema(&inner.store)?;
    let media_type = schema
        .as_ref()
        .map(|(media, _)| media.clone())
        .unwrap_or_else(|| "application/json".to_owned());
    if schema.is_some() && !media_type.contains("json") {
        return Err(Error::unsupported(format!(
            "{}.{} takes a '{media_type}' request body; only JSON bodies are sent",
            resource.full_name(),
            method.name
        )));
    }
    let body_schema = schema.and_then(|(_, s)| s);
    // `naive_<Key>`: the fields are those of the body's `<Key>` object, and go there.
    let parent = match (method.request.translate.parent(), &body_schema) {
        (Some(key), Some(schema)) => schema
            .property(&inner.store, key)?
            .map(|inner_schema| (key.to_owned(), inner_schema)),
        _ => None,
    };
    let template = BodyTemplate::for_method(&inner.store, method)?;
    let media_type = template
        .as_ref()
        .map_or(media_type, |t| t.media_type.clone());
    let mut requests = Vec::with_capacity(rows.len());
    for row in rows {
        let mut params = Vec::new();
        let mut fields: Vec<(Vec<String>, Value)> = Vec::new();
        for (name, value) in row {
            if let Some(param) = param_named(method, &name) {
                if let Some(text) = value.as_param() {
                    params.push((param.clone(), text));
                }
                continue;
            }
            let in_where = where_names.iter().any(|w| w == &name);
            let not_in_where = || {
                Error::invalid_sql(format!(
                    "'{name}' in WHERE is not a parameter of {}.{} (parameters: {})",
                    resource.full_name(),
                    method.name,
                    param_list(method)
                ))
            };
            if method.request_body.is_none() {
                if in_where {
                    return Err(not_in_where());
                }
                return Err(Error::invalid_sql(format!(
                    "'{name}' is not a parameter of {}.{} (parameters: {}), and the method takes no request body",
                    resource.full_name(),
                    method.name,
                    param_list(method)
                )));
            }
            let field = name.strip_prefix(BODY_PREFIX).unwrap_or(&name).to_owned();
            // The parent object's field when it has one by that name, else the top level's.
            let (schema, prefix) = match &parent {
                Some((key, inner_schema)) => {
                    let wire = wire_field(inner, Some(inner_schema), method, field.clone())?;
                    if inner_schema.property(&inner.store, &wire)?.is_some() {
                        (Some(inner_schema), Some(key.clone()))
                    } else {
                        (body_schema.as_ref(), None)
                    }
                }
                None => (body_schema.as_ref(), None),
            };
            let field = wire_field(inner, schema, method, field)?;
            // A WHERE name is a body field only when the body schema declares it (Cloud
            // Control's `DELETE … WHERE Identifier = …`).
            let declared = match schema {
                Some(schema) => schema.property(&inner.store, &field)?.is_some(),
                None => false,
            };
            if in_where && !declared {
                return Err(not_in_where());
            }
            let value = body_value(inner, schema, &field, value, method)?;
            let path = prefix.into_iter().chain(std::iter::once(field)).collect();
            fields.push((path, value));
        }
        let body = row_body(json_body.as_ref(), template.as_ref(), fields);
        requests.push(Request { params, body });
    }
    let base_url = inner
        .config
        .providers
        .get(&resource.provider)
        .and_then(|p| p.base_url.clone());
    let shape = method.row_shape(&inner.store)?;
    Ok(Prepared {
        locator: shape.locator.clone(),
        columns: shape.columns.iter().map(|c| c.name.clone()).collect(),
        wire_names: crate::document::wire_names(&shape.columns),
        auth: inner.effective_auth(&provider),
        base_url,
        media_type,
        requests,
        method: method_index,
        resource,
    })
}

/// The body property a SQL name means: itself, or with a native casing the property whose
/// snake_case form it is (`display_name` → `DisplayName`).
fn wire_field(
    inner: &Inner,
    schema: Option<&SchemaAt>,
    method: &Method,
    field: String,
) -> Result<String> {
    let (Some(_), Some(schema)) = (&method.native_casing, schema) else {
        return Ok(field);
    };
    Ok(schema
        .properties(&inner.store)?
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| name != &field && method.answers_to(name, &field))
        .unwrap_or(field))
}

fn param_list(method: &Method) -> String {
    let names: Vec<String> = method
        .params
        .iter()
        .filter(|p| p.location != ParamLocation::Server || p.required)
        .map(|p| p.name.clone())
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// A body field's JSON value, typed by its schema: numbers and booleans as such, objects
/// and arrays parsed from their JSON text, strings as given.
fn body_value(
    inner: &Inner,
    schema: Option<&SchemaAt>,
    field: &str,
    value: Scalar,
    method: &Method,
) -> Result<Value> {
    let property = match schema {
        Some(schema) => {
            let property = schema.property(&inner.store, field)?;
            let declares_fields = schema.schema.get("properties").is_some()
                || ["allOf", "anyOf", "oneOf"]
                    .iter()
                    .any(|k| schema.schema.get(k).is_some());
            let open = schema
                .schema
                .get("additionalProperties")
                .is_some_and(|a| a != false);
            if property.is_none() && declares_fields && !open {
                let fields: Vec<String> = schema
                    .properties(&inner.store)?
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect();
                return Err(Error::invalid_sql(format!(
                    "'{field}' is neither a parameter nor a request body field of method '{}' (parameters: {}; body fields: {})",
                    method.name,
                    param_list(method),
                    fields.join(", ")
                )));
            }
            property
        }
        None => None,
    };
    let type_name = property.as_ref().and_then(|p| p.type_name()).unwrap_or("");
    let bad = |expected: &str, shown: &str| {
        Error::invalid_sql(format!(
            "body field '{field}' expects {expected}; '{shown}' is not one"
        ))
    };
    Ok(match (type_name, value) {
        (_, Scalar::Null) => Value::Null,
        ("string", Scalar::Text(t) | Scalar::Number(t)) => Value::String(t),
        ("string", Scalar::Bool(b)) => Value::String(b.to_string()),
        ("integer" | "number", Scalar::Number(t) | Scalar::Text(t)) => {
            serde_json::from_str::<serde_json::Number>(t.trim())
                .map(Value::Number)
                .map_err(|_| bad("a number", &t))?
        }
        ("boolean", Scalar::Bool(b)) => Value::Bool(b),
        ("boolean", Scalar::Number(t) | Scalar::Text(t)) => match t.as_str() {
            "1" | "true" | "TRUE" | "True" => Value::Bool(true),
            "0" | "false" | "FALSE" | "False" => Value::Bool(false),
            _ => return Err(bad("true or false", &t)),
        },
        ("object" | "array", Scalar::Text(t)) => {
            let parsed: Value = serde_json::from_str(&t)
                .map_err(|_| bad(&format!("JSON ({type_name}) as a quoted string"), &t))?;
            parsed
        }
        (_, Scalar::Text(t)) => {
            let trimmed = t.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                serde_json::from_str(&t).unwrap_or(Value::String(t))
            } else {
                Value::String(t)
            }
        }
        (_, Scalar::Number(t)) => serde_json::from_str::<serde_json::Number>(&t)
            .map(Value::Number)
            .unwrap_or(Value::String(t)),
        (_, Scalar::Bool(b)) => Value::Bool(b),
    })
}
