//! JSON request bodies made from a statement's values, as any-sdk makes them: the fields
//! given are set over `request.base` (at their place: under `DesiredState` for
//! `naive_DesiredState`), `request.default` is the body when none is given, and a property
//! the schema marks `x-stackQL-stringOnly` is sent as JSON text (Cloud Control's
//! `DesiredState`).

use serde_json::{Map, Value};

use super::document::{DocumentStore, Method};
use super::error::Result;

/// The extension that makes a body property JSON text rather than an object.
const STRING_ONLY: &str = "x-stackQL-stringOnly";

/// One field of a method's request body that a statement may give.
#[derive(Debug, Clone)]
pub(crate) struct BodyField {
    /// The property name on the wire.
    pub(crate) wire: String,
    /// Where it goes in the body.
    pub(crate) path: Vec<String>,
    pub(crate) type_name: Option<String>,
    pub(crate) description: Option<String>,
    /// The schema (or the method's `request.required`) requires it.
    pub(crate) required: bool,
}

/// The fields a statement may give `method`'s body: the request schema's properties, or
/// with `naive_<Key>` those of its `<Key>` object.
pub(crate) fn body_fields(store: &DocumentStore, method: &Method) -> Result<Vec<BodyField>> {
    let Some((_, Some(schema))) = method.request_schema(store)? else {
        return Ok(Vec::new());
    };
    let parent = method.request.translate.parent();
    let (schema, prefix) = match parent {
        Some(key) => match schema.property(store, key)? {
            Some(inner) => (inner, vec![key.to_owned()]),
            None => return Ok(Vec::new()),
        },
        None => (schema, Vec::new()),
    };
    let mut required = schema.required_names(store)?;
    if parent.is_none() {
        required.extend(method.request_required.iter().cloned());
    }
    Ok(schema
        .properties(store)?
        .into_iter()
        .map(|(name, property)| {
            let mut path = prefix.clone();
            path.push(name.clone());
            BodyField {
                required: required.contains(&name),
                type_name: property.type_name().map(str::to_owned),
                description: property.description().map(str::to_owned),
                wire: name,
                path,
            }
        })
        .collect())
}

/// How one method's request bodies are made.
#[derive(Debug, Clone)]
pub(crate) struct BodyTemplate {
    /// The `Content-Type` sent.
    pub(crate) media_type: String,
    base: Option<Map<String, Value>>,
    default: Option<Value>,
    /// The operation declares its body required: `{}` when nothing else is sent.
    required: bool,
    /// Top-level properties sent as JSON text.
    string_only: Vec<String>,
}

impl BodyTemplate {
    /// The template of `method`, or `None` when its operation takes no body.
    pub(crate) fn for_method(store: &DocumentStore, method: &Method) -> Result<Option<Self>> {
        let Some((content_type, schema)) = method.request_schema(store)? else {
            return Ok(None);
        };
        let mut string_only = Vec::new();
        if let Some(schema) = schema {
            for (name, property) in schema.properties(store)? {
                if property.schema.get(STRING_ONLY).is_some_and(is_true) {
                    string_only.push(name);
                }
            }
        }
        Ok(Some(BodyTemplate {
            media_type: method.request.media_type.clone().unwrap_or(content_type),
            base: method.request.base.clone(),
            default: method.request.default.clone(),
            required: method.body_required(),
            string_only,
        }))
    }

    /// The body of one request with `fields` (each at its path): `request.base` with the
    /// fields set over it; `request.default` when no field is given; else `{}` when the
    /// body is required, or no body.
    pub(crate) fn render(&self, fields: Vec<(Vec<String>, Value)>) -> Option<Value> {
        if fields.is_empty() {
            return match &self.default {
                Some(default) => Some(self.stringify(default.clone())),
                None => self.required.then(|| Value::Object(Map::new())),
            };
        }
        let mut body = Value::Object(self.base.clone().unwrap_or_default());
        for (path, value) in fields {
            set_path(&mut body, &path, value);
        }
        Some(self.stringify(body))
    }

    fn stringify(&self, mut body: Value) -> Value {
        if let Value::Object(map) = &mut body {
            for key in &self.string_only {
                if let Some(value) = map.get_mut(key)
                    && (value.is_object() || value.is_array())
                {
                    *value = Value::String(value.to_string());
                }
            }
        }
        body
    }
}

/// Sets `value` at `path` in `body`, making the objects on the way (a non-object on the
/// way is replaced).
pub(crate) fn set_path(body: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = body;
    for key in parents {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        at = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(Map::new());
    }
    if let Value::Object(map) = at {
        map.insert(last.clone(), value);
    }
}

fn is_true(value: &Value) -> bool {
    value.as_bool() == Some(true) || value.as_str() == Some("true")
}

/// A WHERE value as the JSON its field's type wants: numbers and booleans as such, objects
/// and arrays parsed from their JSON text; anything that does not read as its type stays
/// text.
pub(crate) fn typed(text: &str, type_name: Option<&str>) -> Value {
    let parsed = || serde_json::from_str::<Value>(text.trim()).ok();
    match type_name {
        Some("integer" | "number") => parsed().filter(Value::is_number),
        Some("boolean") => match text {
            "1" | "true" | "TRUE" | "True" => Some(Value::Bool(true)),
            "0" | "false" | "FALSE" | "False" => Some(Value::Bool(false)),
            _ => None,
        },
        Some("object" | "array") => parsed().filter(|v| v.is_object() || v.is_array()),
        Some(_) => None,
        None => {
            let trimmed = text.trim_start();
            (trimmed.starts_with('{') || trimmed.starts_with('['))
                .then(parsed)
                .flatten()
        }
    }
    .unwrap_or_else(|| Value::String(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(base: Option<Value>, default: Option<Value>, required: bool) -> BodyTemplate {
        BodyTemplate {
            media_type: "application/x-amz-json-1.0".to_owned(),
            base: base.and_then(|b| b.as_object().cloned()),
            default,
            required,
            string_only: vec!["DesiredState".to_owned()],
        }
    }

    fn path(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn fields_go_over_the_base_at_their_place() {
        let t = template(Some(json!({"TypeName": "AWS::S3::Bucket"})), None, true);
        let body = t.render(vec![
            (path(&["DesiredState", "BucketName"]), json!("b1")),
            (path(&["DesiredState", "Tags"]), json!([{"Key": "k"}])),
            (path(&["ClientToken"]), json!("c")),
        ]);
        assert_eq!(
            body,
            Some(json!({
                "TypeName": "AWS::S3::Bucket",
                "ClientToken": "c",
                "DesiredState": "{\"BucketName\":\"b1\",\"Tags\":[{\"Key\":\"k\"}]}"
            }))
        );
        // A given field replaces the base's.
        let body = t.render(vec![(path(&["TypeName"]), json!("AWS::S3::BucketPolicy"))]);
        assert_eq!(body, Some(json!({"TypeName": "AWS::S3::BucketPolicy"})));
    }

    #[test]
    fn without_fields_the_default_or_an_empty_required_body() {
        let base = Some(json!({"TypeName": "x"}));
        assert_eq!(
            template(base.clone(), Some(json!({"MaxResults": 5})), false).render(Vec::new()),
            Some(json!({"MaxResults": 5}))
        );
        assert_eq!(
            template(base.clone(), None, true).render(Vec::new()),
            Some(json!({}))
        );
        assert_eq!(template(base, None, false).render(Vec::new()), None);
    }

    #[test]
    fn values_are_typed_by_their_schema() {
        assert_eq!(typed("5", Some("integer")), json!(5));
        assert_eq!(typed("five", Some("integer")), json!("five"));
        assert_eq!(typed("true", Some("boolean")), json!(true));
        assert_eq!(typed("{\"a\": [1]}", Some("object")), json!({"a": [1]}));
        assert_eq!(typed("{\"a\": 1}", Some("string")), json!("{\"a\": 1}"));
        assert_eq!(typed("[1, 2]", None), json!([1, 2]));
        assert_eq!(typed("AWS::S3::Bucket", None), json!("AWS::S3::Bucket"));
    }
}
