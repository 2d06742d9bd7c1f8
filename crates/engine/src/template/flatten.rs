//! The Azure providers' flatten transform, recognized in a parsed template and run without
//! the interpreter.
//!
//! Every `golang_template_json_v0.3.0` transform of the current Azure providers (3,226
//! methods) is one template: for each element of the body's `value` list it writes an
//! object of the element's `properties` members, then the element's own members, then
//! `"_flattened": true`, each member as `printf "%q"` of its key and `toJson` of its value.
//! Interpreting it costs most of the time a transformed page takes, so [`Flatten::compile`]
//! recognizes its shape in the parsed tree (the text between actions is free, the actions
//! are fixed) and [`Flatten::run`] writes the same text with the same formatting functions
//! the interpreter calls.
//!
//! Anything the compiled form does not follow itself (a body or element that is not an
//! object, a `value` that is not a list, a value `toJson` refuses, a run that could pass the
//! step bound or passes the output bound) gives `None`: the caller then runs the
//! interpreter, whose result and errors are the reference.
//!
//! With `columns` given, a member whose key is none of them (ASCII case aside, as rows are
//! loaded) is left out of the rows: they are read only for those columns, and a member
//! that is not a column is skipped when rows are loaded.

use super::doc::{Doc, Obj};
use super::format;
use super::parse::{Branch, Cmd, Node, Operand, Pipe, Term};
use super::value::Val;

/// Steps charged per node of the compiled form, per row and per member: at least what the
/// interpreter counts for them (a test checks it), so a run within this bound is one the
/// interpreter would not stop.
const STEPS_PER_OP: u64 = 16;
const STEPS_PER_MEMBER: u64 = 32;

/// A recognized flatten template.
#[derive(Debug)]
pub(super) struct Flatten {
    /// The top-level list.
    top: Vec<TopOp>,
}

#[derive(Debug)]
enum TopOp {
    Text(String),
    /// `range $i, $row := index . "<key>"`: the rows.
    Rows {
        key: String,
        body: Vec<RowOp>,
    },
    /// `toJson (index . "<key>")`.
    Json(String),
}

#[derive(Debug)]
enum RowOp {
    Text(String),
    /// `if $i`: its text, written before every row but the first.
    Separator(String),
    /// `$p := index $row "<key>"` then `if eq (kindOf $p) "map"`: the members of that map.
    Nested {
        before: String,
        members: Members,
        after: String,
    },
    /// `range $k, $v := $row`: the row's members.
    Own(Members),
}

/// `{{ printf "%q" $k }}<mid>{{ toJson $v }}` with the texts around them.
#[derive(Debug)]
struct Members {
    before: String,
    mid: String,
    after: String,
}

impl Flatten {
    /// The compiled form of `nodes`, when they have the flatten template's shape.
    pub(super) fn compile(nodes: &[Node]) -> Option<Flatten> {
        let mut top = Vec::new();
        let mut rows = false;
        for node in nodes {
            top.push(match node {
                Node::Text(text) => TopOp::Text(text.clone()),
                Node::Range(branch) if !rows => {
                    rows = true;
                    row_range(branch)?
                }
                Node::Action(pipe) => TopOp::Json(to_json_of_root_key(pipe)?),
                _ => return None,
            });
        }
        rows.then_some(Flatten { top })
    }

    /// The root member holding the rows.
    pub(super) fn rows_key(&self) -> Option<&str> {
        self.top.iter().find_map(|op| match op {
            TopOp::Rows { key, .. } => Some(key.as_str()),
            _ => None,
        })
    }

    /// Writes what the template writes for `root` (only the members named in `columns`, when
    /// given); the steps charged, or `None` when the interpreter must run instead.
    pub(super) fn run(
        &self,
        root: &Doc<'_>,
        max_steps: u64,
        max_output: usize,
        columns: Option<&Columns<'_>>,
        out: &mut String,
    ) -> Option<u64> {
        let Doc::Object(root) = root else {
            return None;
        };
        let keep = |key: &str| columns.is_none_or(|c| c.contains(key));
        let mut steps = Steps {
            taken: 0,
            max: max_steps,
        };
        for op in &self.top {
            steps.charge(STEPS_PER_OP)?;
            match op {
                TopOp::Text(text) => out.push_str(text),
                TopOp::Json(key) => write_json(out, root.get(key))?,
                TopOp::Rows { key, body } => {
                    let items: &[Doc<'_>] = match root.get(key) {
                        None | Some(Doc::Null) => &[],
                        Some(Doc::Array(items)) => items,
                        Some(_) => return None,
                    };
                    for (i, item) in items.iter().enumerate() {
                        let Doc::Object(row) = item else {
                            return None;
                        };
                        steps.charge(STEPS_PER_OP * (body.len() as u64 + 1))?;
                        for op in body {
                            match op {
                                RowOp::Text(text) => out.push_str(text),
                                RowOp::Separator(text) if i > 0 => out.push_str(text),
                                RowOp::Separator(_) => {}
                                RowOp::Nested {
                                    before,
                                    members,
                                    after,
                                } => {
                                    if let Some(Doc::Object(nested)) = row.get(NESTED) {
                                        out.push_str(before);
                                        steps.charge(
                                            STEPS_PER_MEMBER * nested.charged_len() as u64,
                                        )?;
                                        members.write(nested, &keep, out)?;
                                        out.push_str(after);
                                    }
                                }
                                RowOp::Own(members) => {
                                    steps.charge(STEPS_PER_MEMBER * row.charged_len() as u64)?;
                                    members.write(row, &keep, out)?;
                                }
                            }
                        }
                        if out.len() > max_output {
                            return None;
                        }
                    }
                }
            }
        }
        (out.len() <= max_output).then_some(steps.taken)
    }
}

/// The columns a statement loads, as a row member's key is matched to them (ASCII case
/// aside, as rows are loaded).
#[derive(Debug)]
pub(super) struct Columns<'c> {
    names: &'c [String],
    /// Bit `n` set: a name of `n` bytes (63: of 63 or more) is among them, so most keys are
    /// told apart by their length alone.
    lengths: u64,
}

impl<'c> Columns<'c> {
    pub(super) fn new(names: &'c [String]) -> Self {
        let lengths = names
            .iter()
            .fold(0, |bits, name| bits | Self::length_bit(name));
        Columns { names, lengths }
    }

    fn length_bit(key: &str) -> u64 {
        1 << key.len().min(63)
    }

    /// Whether `key` names one of the columns.
    pub(super) fn contains(&self, key: &str) -> bool {
        self.lengths & Self::length_bit(key) != 0
            && self.names.iter().any(|name| name.eq_ignore_ascii_case(key))
    }
}

/// Steps charged against the bound.
struct Steps {
    taken: u64,
    max: u64,
}

impl Steps {
    fn charge(&mut self, n: u64) -> Option<()> {
        self.taken = self.taken.saturating_add(n);
        (self.taken <= self.max).then_some(())
    }
}

/// The key the nested members are read from.
pub(super) const NESTED: &str = "properties";

impl Members {
    fn write(&self, map: &Obj<'_>, keep: &impl Fn(&str) -> bool, out: &mut String) -> Option<()> {
        for (key, value) in map.iter().filter(|(key, _)| keep(key)) {
            out.push_str(&self.before);
            format::quote_into(out, key);
            out.push_str(&self.mid);
            format::json_of(out, value).ok()?;
            out.push_str(&self.after);
        }
        Some(())
    }
}

/// `toJson` of an input value, as the interpreter prints `{{ toJson X }}`.
fn write_json(out: &mut String, value: Option<&Doc<'_>>) -> Option<()> {
    match value.map(Val::json) {
        Some(Val::Json(doc)) => format::json_of(out, doc).ok(),
        _ => {
            out.push_str("null");
            Some(())
        }
    }
}

// ---- recognizing the shape ----------------------------------------------------------------

/// `range $i, $row := index . "<key>"` over the row list.
fn row_range(branch: &Branch) -> Option<TopOp> {
    if branch.else_list.is_some() {
        return None;
    }
    let [index, row] = declared_pair(&branch.pipe)?;
    let key = root_key(call(&branch.pipe, "index")?)?;
    let mut body = Vec::new();
    let mut nested_var: Option<&str> = None;
    for node in &branch.list {
        body.push(match node {
            Node::Text(text) => RowOp::Text(text.clone()),
            Node::If(branch) if is_var_pipe(&branch.pipe, index) && branch.else_list.is_none() => {
                match branch.list.as_slice() {
                    [Node::Text(text)] => RowOp::Separator(text.clone()),
                    _ => return None,
                }
            }
            Node::Action(pipe) if nested_var.is_none() => {
                let var = nested_declaration(pipe, row)?;
                if var == index {
                    return None;
                }
                nested_var = Some(var);
                continue;
            }
            Node::If(branch) if branch.else_list.is_none() => {
                let var = nested_var?;
                if !is_map_test(&branch.pipe, var) {
                    return None;
                }
                let (before, inner, after) = match branch.list.as_slice() {
                    [Node::Range(r)] => ("", r, ""),
                    [Node::Text(b), Node::Range(r)] => (b.as_str(), r, ""),
                    [Node::Range(r), Node::Text(a)] => ("", r, a.as_str()),
                    [Node::Text(b), Node::Range(r), Node::Text(a)] => (b.as_str(), r, a.as_str()),
                    _ => return None,
                };
                let members = member_range(inner, var, &[index, row, var])?;
                RowOp::Nested {
                    before: before.to_owned(),
                    members,
                    after: after.to_owned(),
                }
            }
            Node::Range(inner) => {
                let names: Vec<&str> = [index, row].into_iter().chain(nested_var).collect();
                RowOp::Own(member_range(inner, row, &names)?)
            }
            _ => return None,
        });
    }
    if index == row {
        return None;
    }
    Some(TopOp::Rows { key, body })
}

/// `$p := index $row "properties"`: the name of `$p`.
fn nested_declaration<'p>(pipe: &'p Pipe, row: &str) -> Option<&'p str> {
    let [var] = pipe.vars.as_slice() else {
        return None;
    };
    if pipe.assign || var == row {
        return None;
    }
    match call(pipe, "index")? {
        [
            Term {
                operand: Operand::Var(r),
                fields: f1,
            },
            Term {
                operand: Operand::Str(key),
                fields: f2,
            },
        ] if r == row && key == NESTED && f1.is_empty() && f2.is_empty() => Some(var),
        _ => None,
    }
}

/// `eq (kindOf $p) "map"`.
fn is_map_test(pipe: &Pipe, var: &str) -> bool {
    if !pipe.vars.is_empty() {
        return false;
    }
    let Some(
        [
            Term {
                operand: Operand::Pipe(kind),
                fields: f1,
            },
            Term {
                operand: Operand::Str(map),
                fields: f2,
            },
        ],
    ) = call(pipe, "eq")
    else {
        return false;
    };
    map == "map"
        && f1.is_empty()
        && f2.is_empty()
        && kind.vars.is_empty()
        && matches!(call(kind, "kindOf"), Some([t]) if is_var_term(t, var))
}

/// `range $k, $v := $<over>` printing `{{ printf "%q" $k }}…{{ toJson $v }}`; `outer`: the
/// variables in scope, which the loop's must not shadow.
fn member_range(branch: &Branch, over: &str, outer: &[&str]) -> Option<Members> {
    if branch.else_list.is_some() || !is_var_pipe_declaring(&branch.pipe, over) {
        return None;
    }
    let [key, value] = declared_pair(&branch.pipe)?;
    if key == value || outer.iter().any(|o| *o == key || *o == value) {
        return None;
    }
    let (before, quote, mid, json, after) = match branch.list.as_slice() {
        [Node::Action(q), Node::Text(m), Node::Action(j)] => ("", q, m.as_str(), j, ""),
        [
            Node::Text(b),
            Node::Action(q),
            Node::Text(m),
            Node::Action(j),
        ] => (b.as_str(), q, m.as_str(), j, ""),
        [
            Node::Action(q),
            Node::Text(m),
            Node::Action(j),
            Node::Text(a),
        ] => ("", q, m.as_str(), j, a.as_str()),
        [
            Node::Text(b),
            Node::Action(q),
            Node::Text(m),
            Node::Action(j),
            Node::Text(a),
        ] => (b.as_str(), q, m.as_str(), j, a.as_str()),
        _ => return None,
    };
    let quoted = quote.vars.is_empty()
        && matches!(call(quote, "printf"), Some([Term { operand: Operand::Str(f), fields }, t])
            if f == "%q" && fields.is_empty() && is_var_term(t, key));
    let json =
        json.vars.is_empty() && matches!(call(json, "toJson"), Some([t]) if is_var_term(t, value));
    (quoted && json).then(|| Members {
        before: before.to_owned(),
        mid: mid.to_owned(),
        after: after.to_owned(),
    })
}

/// `toJson (index . "<key>")`: the key.
fn to_json_of_root_key(pipe: &Pipe) -> Option<String> {
    if !pipe.vars.is_empty() {
        return None;
    }
    let [
        Term {
            operand: Operand::Pipe(inner),
            fields,
        },
    ] = call(pipe, "toJson")?
    else {
        return None;
    };
    if !fields.is_empty() || !inner.vars.is_empty() {
        return None;
    }
    root_key(call(inner, "index")?)
}

/// The key of `index . "<key>"`'s arguments: the root and a string, neither with fields.
fn root_key(args: &[Term]) -> Option<String> {
    match args {
        [
            Term {
                operand: Operand::Dot,
                fields: f1,
            },
            Term {
                operand: Operand::Str(key),
                fields: f2,
            },
        ] if f1.is_empty() && f2.is_empty() => Some(key.clone()),
        _ => None,
    }
}

/// The arguments of a pipeline that is one call of `name`.
fn call<'p>(pipe: &'p Pipe, name: &str) -> Option<&'p [Term]> {
    let [Cmd { args }] = pipe.cmds.as_slice() else {
        return None;
    };
    match args.split_first()? {
        (
            Term {
                operand: Operand::Func(f),
                fields,
            },
            rest,
        ) if f == name && fields.is_empty() => Some(rest),
        _ => None,
    }
}

/// The two variables a `range` pipeline declares (`:=`, not `=`).
fn declared_pair(pipe: &Pipe) -> Option<[&str; 2]> {
    match pipe.vars.as_slice() {
        [a, b] if !pipe.assign => Some([a.as_str(), b.as_str()]),
        _ => None,
    }
}

/// A pipeline that is the variable `var` alone, declaring nothing.
fn is_var_pipe(pipe: &Pipe, var: &str) -> bool {
    pipe.vars.is_empty() && is_single_var(pipe, var)
}

/// A pipeline that is the variable `var` alone (it may declare variables).
fn is_var_pipe_declaring(pipe: &Pipe, var: &str) -> bool {
    is_single_var(pipe, var)
}

fn is_single_var(pipe: &Pipe, var: &str) -> bool {
    matches!(pipe.cmds.as_slice(), [Cmd { args }] if matches!(args.as_slice(), [t] if is_var_term(t, var)))
}

fn is_var_term(term: &Term, var: &str) -> bool {
    term.fields.is_empty() && matches!(&term.operand, Operand::Var(v) if v == var)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_match_keys_ascii_case_aside_whatever_their_length() {
        let long = "k".repeat(70);
        let names = vec!["Name".to_owned(), long.to_uppercase(), "a".repeat(63)];
        let columns = Columns::new(&names);
        assert!(columns.contains("name"));
        assert!(columns.contains("NAME"));
        assert!(!columns.contains("names"));
        assert!(!columns.contains("nam"));
        assert!(columns.contains(&long));
        assert!(!columns.contains(&"k".repeat(71)));
        assert!(columns.contains(&"A".repeat(63)));
        assert!(!columns.contains(&"a".repeat(64)));
        assert!(!Columns::new(&[]).contains(""));
    }
}
