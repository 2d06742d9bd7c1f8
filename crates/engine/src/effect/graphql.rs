//! The effect of a method whose request is a GraphQL operation of the document
//! (`x-stackQL-graphQL.query`, a Go template over the statement's parameters): the template
//! is run with every value a placeholder, and the result parsed as a GraphQL document. Only
//! `query` operations read; a `mutation` or `subscription`, or text that does not parse, is
//! not a read.

use graphql_parser::query::{Definition, OperationDefinition};
use serde_json::{Map, Value};

use super::{Effect, EffectSource, MethodEffect};
use crate::template::{Dialect, Limits, Template};

/// The GraphQL query template of the operation, when it has one.
pub(super) fn query_of(operation: &Value) -> Option<&str> {
    operation.get("x-stackQL-graphQL")?.get("query")?.as_str()
}

/// Bounds on running the query template with placeholders.
const LIMITS: Limits = Limits {
    max_steps: 100_000,
    max_output: 1 << 20,
};

/// The effect of the GraphQL operation `template` runs.
pub(super) fn effect(template: &str) -> MethodEffect {
    match operations(template) {
        Ok(kinds) if !kinds.is_empty() && kinds.iter().all(|kind| *kind == "query") => {
            MethodEffect::new(
                Effect::Read,
                EffectSource::Graphql,
                "a GraphQL query operation (parsed)",
            )
        }
        Ok(kinds) if kinds.is_empty() => MethodEffect::new(
            Effect::Other,
            EffectSource::Graphql,
            "a GraphQL document with no operation: not a read",
        ),
        Ok(kinds) => {
            let kind = kinds
                .iter()
                .find(|kind| **kind != "query")
                .copied()
                .unwrap_or("operation");
            let effect = if kind == "mutation" {
                Effect::Write
            } else {
                Effect::Other
            };
            MethodEffect::new(
                effect,
                EffectSource::Graphql,
                format!("a GraphQL {kind} operation (parsed): not a read"),
            )
        }
        Err(why) => MethodEffect::new(
            Effect::Other,
            EffectSource::Graphql,
            format!("the GraphQL operation does not parse ({why}): not a read"),
        ),
    }
}

/// The kinds of the operations (`query`, `mutation`, `subscription`) of the GraphQL
/// document `template` renders with every parameter a placeholder: first the empty text (a
/// parameter spliced in as a fragment of syntax, such as a cursor argument, then adds
/// nothing), then `0` (a value where GraphQL needs one). The first rendering that parses
/// decides; the operation's kind is the document's, never a value's.
fn operations(template: &str) -> Result<Vec<&'static str>, String> {
    let parsed = Template::parse(template, Dialect { v2: true }).map_err(|err| err.to_string())?;
    let names = fields_read(template);
    let mut first_error = None;
    for placeholder in ["", "0"] {
        let mut dot = Map::new();
        for name in &names {
            dot.insert(name.clone(), Value::String(placeholder.to_owned()));
        }
        let text = parsed
            .execute_json(&Value::Object(dot), LIMITS)
            .map_err(|err| err.to_string())?;
        match graphql_parser::parse_query::<String>(&text) {
            Ok(document) => return Ok(kinds(&document)),
            Err(err) => {
                first_error.get_or_insert_with(|| first_line(&err.to_string()));
            }
        }
    }
    Err(first_error.unwrap_or_default())
}

/// The kind of each operation of `document` (fragments have none).
fn kinds(document: &graphql_parser::query::Document<'_, String>) -> Vec<&'static str> {
    document
        .definitions
        .iter()
        .filter_map(|definition| match definition {
            Definition::Operation(operation) => Some(match operation {
                OperationDefinition::SelectionSet(_) | OperationDefinition::Query(_) => "query",
                OperationDefinition::Mutation(_) => "mutation",
                OperationDefinition::Subscription(_) => "subscription",
            }),
            Definition::Fragment(_) => None,
        })
        .collect()
}

/// The names `template` reads as `.name` inside its actions.
fn fields_read(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after.find("}}").unwrap_or(after.len());
        let action = &after[..end];
        for (index, _) in action.match_indices('.') {
            let name: String = action[index + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
        rest = &after[end..];
    }
    names
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}
