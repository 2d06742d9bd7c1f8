//! Just enough of OpenAPI schemas to derive a resource's columns: `$ref` (also across files),
//! `allOf`/`anyOf`/`oneOf` property unions, arrays' `items` and maps' `additionalProperties`.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::store::{Doc, DocumentStore, split_ref};
use crate::error::{Error, Result};

/// A schema together with the document its `$ref`s are relative to.
#[derive(Debug, Clone)]
pub(crate) struct SchemaAt {
    pub(crate) doc: Arc<Doc>,
    pub(crate) schema: Value,
}

/// `$ref` chains longer than this are treated as a malformed document (cycles).
const MAX_REF_DEPTH: usize = 32;

/// Follows `$ref`s until `value` is a concrete object.
pub(crate) fn deref(
    store: &DocumentStore,
    doc: &Arc<Doc>,
    value: &Value,
) -> Result<(Arc<Doc>, Value)> {
    let mut doc = doc.clone();
    let mut current = value.clone();
    for _ in 0..MAX_REF_DEPTH {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Ok((doc, current));
        };
        let (file, pointer) = split_ref(reference);
        if !file.is_empty() {
            doc = store.load(file)?;
        }
        current = doc.at(pointer)?.clone();
    }
    Err(Error::bad_document(format!(
        "provider document '{}': $ref chain deeper than {MAX_REF_DEPTH} (a cycle?)",
        doc.rel
    )))
}

impl SchemaAt {
    /// Resolves `$ref`s at the top of `schema`.
    pub(crate) fn resolve(store: &DocumentStore, doc: &Arc<Doc>, schema: &Value) -> Result<Self> {
        let (doc, schema) = deref(store, doc, schema)?;
        Ok(SchemaAt { doc, schema })
    }

    /// Whether this schema describes an array.
    pub(crate) fn is_array(&self) -> bool {
        self.schema.get("type").and_then(Value::as_str) == Some("array")
            || (self.schema.get("items").is_some() && self.schema.get("properties").is_none())
    }

    /// The `type` keyword, if any (`string`, `integer`, `object`, …).
    pub(crate) fn type_name(&self) -> Option<&str> {
        self.schema.get("type").and_then(Value::as_str)
    }

    /// The element schema of an array.
    pub(crate) fn items(&self, store: &DocumentStore) -> Result<Option<SchemaAt>> {
        match self.schema.get("items") {
            Some(items) => Ok(Some(SchemaAt::resolve(store, &self.doc, items)?)),
            None => Ok(None),
        }
    }

    /// The value schema of a map (`additionalProperties: {…}`).
    pub(crate) fn map_values(&self, store: &DocumentStore) -> Result<Option<SchemaAt>> {
        match self.schema.get("additionalProperties") {
            Some(values @ Value::Object(_)) => {
                Ok(Some(SchemaAt::resolve(store, &self.doc, values)?))
            }
            _ => Ok(None),
        }
    }

    /// The object's properties in document order, merged over `allOf`/`anyOf`/`oneOf`
    /// members (first definition of a name wins). Each property schema is resolved.
    pub(crate) fn properties(&self, store: &DocumentStore) -> Result<Vec<(String, SchemaAt)>> {
        let mut out: Vec<(String, SchemaAt)> = Vec::new();
        self.collect_properties(store, &mut out, 0)?;
        Ok(out)
    }

    fn collect_properties(
        &self,
        store: &DocumentStore,
        out: &mut Vec<(String, SchemaAt)>,
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_REF_DEPTH {
            return Err(Error::bad_document(format!(
                "provider document '{}': schema composition nested too deeply",
                self.doc.rel
            )));
        }
        if let Some(Value::Object(props)) = self.schema.get("properties") {
            push_properties(store, &self.doc, props, out)?;
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = self.schema.get(key) {
                for member in members {
                    let member = SchemaAt::resolve(store, &self.doc, member)?;
                    member.collect_properties(store, out, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// A property's schema by exact name (resolving only that property).
    pub(crate) fn property(&self, store: &DocumentStore, name: &str) -> Result<Option<SchemaAt>> {
        self.find_property(store, name, 0)
    }

    fn find_property(
        &self,
        store: &DocumentStore,
        name: &str,
        depth: usize,
    ) -> Result<Option<SchemaAt>> {
        if depth > MAX_REF_DEPTH {
            return Err(Error::bad_document(format!(
                "provider document '{}': schema composition nested too deeply",
                self.doc.rel
            )));
        }
        if let Some(schema) = self.schema.get("properties").and_then(|p| p.get(name)) {
            return Ok(Some(SchemaAt::resolve(store, &self.doc, schema)?));
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = self.schema.get(key) {
                for member in members {
                    let member = SchemaAt::resolve(store, &self.doc, member)?;
                    if let Some(found) = member.find_property(store, name, depth + 1)? {
                        return Ok(Some(found));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Names in the schema's `required` lists, merged over `allOf` members.
    pub(crate) fn required_names(&self, store: &DocumentStore) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        self.collect_required(store, &mut out, 0)?;
        Ok(out)
    }

    fn collect_required(
        &self,
        store: &DocumentStore,
        out: &mut Vec<String>,
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_REF_DEPTH {
            return Err(Error::bad_document(format!(
                "provider document '{}': schema composition nested too deeply",
                self.doc.rel
            )));
        }
        for name in self
            .schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
        }
        if let Some(Value::Array(members)) = self.schema.get("allOf") {
            for member in members {
                SchemaAt::resolve(store, &self.doc, member)?.collect_required(
                    store,
                    out,
                    depth + 1,
                )?;
            }
        }
        Ok(())
    }

    /// The schema's description, if any.
    pub(crate) fn description(&self) -> Option<&str> {
        self.schema.get("description").and_then(Value::as_str)
    }
}

fn push_properties(
    store: &DocumentStore,
    doc: &Arc<Doc>,
    props: &Map<String, Value>,
    out: &mut Vec<(String, SchemaAt)>,
) -> Result<()> {
    for (name, schema) in props {
        if out.iter().any(|(existing, _)| existing == name) {
            continue;
        }
        out.push((name.clone(), SchemaAt::resolve(store, doc, schema)?));
    }
    Ok(())
}
