//! Go `text/template`, as StackQL's response transforms use it.
//!
//! A provider document's `response.transform` (`golang_template_json_v0.3.0`,
//! `golang_template_text_v0.3.0` and their `v0.1.0` spellings) is a Go template that any-sdk
//! runs over the upstream response. This module parses such a template once ([`Template`])
//! and runs it ([`Template::execute`]) with Go's semantics: actions and pipelines, variables
//! and `$`, `if`/`else if`/`else`, `range` (slices, maps in sorted key order, integers,
//! `else`, `break`, `continue`), `with`/`else with`, `{{-`/`-}}` trimming, comments, Go's
//! builtin functions and any-sdk's own (see `funcs`). `define`, `template` and `block` are
//! not supported (no transform of the registry uses them) and do not parse.
//!
//! The input is what any-sdk gives the template: for JSON transforms the body decoded as
//! Go's `encoding/json` decodes into `interface{}` (numbers are `float64`, so `kindOf` of one
//! is `float64` and printing 1234567 gives `1.234567e+06`, as in Go), for text transforms the
//! body as one string. Execution is bounded ([`Limits`]): steps (each node, iteration and
//! call) and output bytes.
//!
//! Why our own interpreter rather than the `gtmpl` crate (0.7.1, the only Go template crate
//! on crates.io): its last release is years old, it has no way to bound steps or output, it
//! lacks `$x = …` assignment (used by the registry's Cloudflare templates), it ranges over
//! maps in hash order (Go sorts the keys: the Azure flatten templates depend on it for
//! their output and duplicate-key precedence), runs a `range`'s `else` even after
//! iterations, fails on `range` over nil (Go runs no iteration), and would need its own value
//! tree copied from every response. The language subset the registry uses is small (see
//! `docs/engine.md`), so a focused interpreter over borrowed `serde_json` values is less code
//! to trust than adapting that crate.

mod doc;
mod error;
mod exec;
mod flatten;
mod format;
mod funcs;
mod lex;
mod parse;
mod projected;
mod value;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use serde_json::Value as Json;

pub(crate) use self::error::TemplateError;
pub(crate) use self::funcs::Dialect;

use self::doc::Doc;
use self::exec::Exec;
use self::flatten::{Columns, Flatten};
use self::parse::Node;
use self::value::Val;

/// Bounds on one execution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Nodes, iterations and calls.
    pub(crate) max_steps: u64,
    /// Bytes of output.
    pub(crate) max_output: usize,
}

/// Why a template over a JSON body did not run to the end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The body is not JSON.
    #[error("{0}")]
    Json(serde_json::Error),
    /// The template failed or ran past its bounds.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// A parsed template.
#[derive(Debug)]
pub(crate) struct Template {
    nodes: Vec<Node>,
    /// The compiled form, when the template is the Azure flatten transform.
    flatten: Option<Flatten>,
}

impl Template {
    /// Parses `source` with the functions of `dialect`.
    pub(crate) fn parse(source: &str, dialect: Dialect) -> Result<Self, TemplateError> {
        let items = lex::lex(source)?;
        let nodes = parse::parse(items, &dialect)?;
        let flatten = Flatten::compile(&nodes);
        Ok(Template { nodes, flatten })
    }

    /// Runs the template with the JSON value `input` as dot.
    pub(crate) fn execute_json(
        &self,
        input: &Json,
        limits: Limits,
    ) -> Result<String, TemplateError> {
        self.execute_doc(&Doc::of_json(input), limits, 0)
    }

    /// Runs the template with the first JSON value of `body` as dot, as Go's decoder reads
    /// it (what follows that value is not read): `Ok(None)` when the body holds no value, an
    /// error when it is not JSON. `columns`: the row properties the output is read for
    /// (ASCII case aside), `None` for all; a template recognized as the Azure flatten
    /// transform leaves the other members of its rows out (see `flatten`).
    pub(crate) fn execute_json_body(
        &self,
        body: &[u8],
        limits: Limits,
        columns: Option<&[String]>,
    ) -> Result<Option<String>, BodyError> {
        // Response transforms mostly rewrite the body's members: about its size again.
        let expected = body.len().saturating_mul(2);
        let columns = columns.map(Columns::new);
        if let (Some(flatten), Some(columns)) = (&self.flatten, &columns)
            && let Some(out) = flatten_projected(flatten, body, limits, columns, expected)
        {
            return Ok(Some(out));
        }
        let mut values = serde_json::Deserializer::from_slice(body).into_iter::<Doc<'_>>();
        let doc = match values.next() {
            None => return Ok(None),
            Some(Err(err)) => return Err(BodyError::Json(err)),
            Some(Ok(doc)) => doc,
        };
        if let Some(flatten) = &self.flatten {
            let mut out = String::with_capacity(expected.min(limits.max_output));
            if flatten
                .run(
                    &doc,
                    limits.max_steps,
                    limits.max_output,
                    columns.as_ref(),
                    &mut out,
                )
                .is_some()
            {
                return Ok(Some(out));
            }
        }
        Ok(Some(self.execute_doc(&doc, limits, expected)?))
    }

    fn execute_doc(
        &self,
        input: &Doc<'_>,
        limits: Limits,
        expected: usize,
    ) -> Result<String, TemplateError> {
        let dot = Val::json(input);
        Exec::new(&dot, limits, expected).run(&dot, &self.nodes)
    }

    /// Runs the template with the string `input` as dot.
    pub(crate) fn execute_text(
        &self,
        input: &str,
        limits: Limits,
    ) -> Result<String, TemplateError> {
        let dot = Val::Str(std::borrow::Cow::Borrowed(input));
        Exec::new(&dot, limits, 0).run(&dot, &self.nodes)
    }
}

/// What the compiled flatten writes of `columns` for `body`, decoded only as far as the
/// run reads it (see `projected`); `None` when the body is not JSON or the compiled form
/// gives up (the caller then decodes the body whole and runs as without columns).
fn flatten_projected(
    flatten: &Flatten,
    body: &[u8],
    limits: Limits,
    columns: &Columns<'_>,
    expected: usize,
) -> Option<String> {
    let projection = projected::Projection {
        rows: flatten.rows_key()?,
        nested: flatten::NESTED,
        columns,
    };
    let doc = projected::decode(body, projection)?;
    let mut out = String::with_capacity(expected.min(limits.max_output));
    flatten
        .run(
            &doc,
            limits.max_steps,
            limits.max_output,
            Some(columns),
            &mut out,
        )
        .map(|_| out)
}
