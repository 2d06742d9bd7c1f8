//! Runs a parsed template over a value, as Go's `text/template` executes: dot and `$`,
//! variables scoped to their control structure, `range` over slices (index, element), maps
//! (sorted keys) and integers, nil printed as `<no value>`, lazy `and`/`or`. Every node,
//! iteration and call counts a step; the steps and the output are bounded.

use std::borrow::Cow;

use super::Limits;
use super::doc::Doc;
use super::error::TemplateError;
use super::format;
use super::funcs;
use super::parse::{Branch, Cmd, Node, Operand, Pipe, Term};
use super::value::{Val, View};

/// How a list ended: normally, or by `{{break}}`/`{{continue}}`.
enum Flow {
    Normal,
    Break,
    Continue,
}

pub(super) struct Exec<'a> {
    vars: Vec<(&'a str, Val<'a>)>,
    out: String,
    steps: u64,
    limits: Limits,
}

type Run<T> = Result<T, TemplateError>;

impl<'a> Exec<'a> {
    /// `expected`: the output's likely size, reserved up front (within the output bound).
    pub(super) fn new(dot: &Val<'a>, limits: Limits, expected: usize) -> Self {
        Exec {
            vars: vec![("$", dot.clone())],
            out: String::with_capacity(expected.min(limits.max_output)),
            steps: 0,
            limits,
        }
    }

    pub(super) fn run(mut self, dot: &Val<'a>, nodes: &'a [Node]) -> Run<String> {
        self.list(dot, nodes)?;
        Ok(self.out)
    }

    fn step(&mut self) -> Run<()> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(TemplateError::Limit(format!(
                "more than {} steps",
                self.limits.max_steps
            )));
        }
        Ok(())
    }

    fn check_output(&self) -> Run<()> {
        match self.out.len() > self.limits.max_output {
            true => Err(TemplateError::Limit(format!(
                "output over {} bytes",
                self.limits.max_output
            ))),
            false => Ok(()),
        }
    }

    fn write(&mut self, text: &str) -> Run<()> {
        if self.out.len() + text.len() > self.limits.max_output {
            return Err(TemplateError::Limit(format!(
                "output over {} bytes",
                self.limits.max_output
            )));
        }
        self.out.push_str(text);
        Ok(())
    }

    fn list(&mut self, dot: &Val<'a>, nodes: &'a [Node]) -> Run<Flow> {
        for node in nodes {
            self.step()?;
            match node {
                Node::Text(text) => self.write(text)?,
                Node::Action(pipe) => {
                    if pipe.vars.is_empty() && self.direct(dot, pipe)? {
                        continue;
                    }
                    let value = self.pipeline(dot, pipe)?;
                    if pipe.vars.is_empty() {
                        match value.view() {
                            View::Nil => self.write("<no value>")?,
                            View::Str(text) => self.write(text)?,
                            view => {
                                format::value_text(&mut self.out, view);
                                self.check_output()?;
                            }
                        }
                    }
                }
                Node::If(branch) => {
                    let flow = self.if_or_with(dot, branch, false)?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::With(branch) => {
                    let flow = self.if_or_with(dot, branch, true)?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Range(branch) => self.range(dot, branch)?,
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    /// Prints the actions response transforms spend their time in, `{{ toJson X }}` and
    /// `{{ printf "%q" X }}`, straight into the output: the same text, steps and errors as
    /// the general path, without a string per action. `false` when `pipe` is another action
    /// (nothing was evaluated).
    fn direct(&mut self, dot: &Val<'a>, pipe: &'a Pipe) -> Run<bool> {
        let [cmd] = pipe.cmds.as_slice() else {
            return Ok(false);
        };
        let Some((
            Term {
                operand: Operand::Func(name),
                ..
            },
            args,
        )) = cmd.args.split_first()
        else {
            return Ok(false);
        };
        match (name.as_str(), args) {
            ("toJson", [arg]) => {
                self.step()?;
                let value = self.term(dot, arg, pipe.line)?;
                let mark = self.out.len();
                let written = match &value {
                    Val::Json(j) => format::json_of(&mut self.out, j),
                    Val::Owned(j) => format::json_of(&mut self.out, j.as_ref()),
                    other => format::to_json(&mut self.out, other.view()),
                };
                if let Err(err) = written {
                    self.out.truncate(mark);
                    return Err(TemplateError::exec(
                        pipe.line,
                        format!("toJson: json: {}", err.0),
                    ));
                }
                self.check_output()?;
                Ok(true)
            }
            (
                "printf",
                [
                    Term {
                        operand: Operand::Str(format),
                        fields,
                    },
                    arg,
                ],
            ) if format == "%q" && fields.is_empty() => {
                self.step()?;
                let value = self.term(dot, arg, pipe.line)?;
                match value.view() {
                    View::Str(text) => format::quote_into(&mut self.out, text),
                    view => self.out.push_str(&format::sprintf(format, &[view])),
                }
                self.check_output()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn if_or_with(&mut self, dot: &Val<'a>, branch: &'a Branch, with: bool) -> Run<Flow> {
        let mark = self.vars.len();
        let value = self.pipeline(dot, &branch.pipe)?;
        let flow = if value.view().truth() {
            match with {
                true => self.list(&value, &branch.list),
                false => self.list(dot, &branch.list),
            }
        } else if let Some(else_list) = &branch.else_list {
            self.list(dot, else_list)
        } else {
            Ok(Flow::Normal)
        };
        self.vars.truncate(mark);
        flow
    }

    fn range(&mut self, dot: &Val<'a>, branch: &'a Branch) -> Run<()> {
        let mark = self.vars.len();
        let value = self.pipeline(dot, &branch.pipe)?;
        let body_mark = self.vars.len();
        let line = branch.pipe.line;
        let mut ran = false;
        match value.view() {
            View::Slice(items) => {
                for i in 0..items.len() {
                    ran = true;
                    let elem = value.slice_get(i);
                    if self.iteration(branch, Val::Int(i as i64), elem, body_mark)? {
                        break;
                    }
                }
            }
            View::Map(_) => {
                if let Val::Json(Doc::Object(map)) = value {
                    // A map of the input: its members are in key order, no lookup per key.
                    for (key, elem) in map.iter() {
                        ran = true;
                        let key = Val::Str(Cow::Borrowed(key));
                        if self.iteration(branch, key, Val::json(elem), body_mark)? {
                            break;
                        }
                    }
                } else {
                    for key in value.sorted_keys() {
                        ran = true;
                        let elem = value.map_get(&key);
                        if self.iteration(branch, Val::Str(key), elem, body_mark)? {
                            break;
                        }
                    }
                }
            }
            View::Int(n) => {
                if branch.pipe.vars.len() > 1 {
                    return Err(TemplateError::exec(
                        line,
                        "can't use two iteration variables with an integer range",
                    ));
                }
                for i in 0..n.max(0) {
                    ran = true;
                    if self.iteration(branch, Val::Int(i), Val::Int(i), body_mark)? {
                        break;
                    }
                }
            }
            View::Nil => {}
            other => {
                return Err(TemplateError::exec(
                    line,
                    format!("range can't iterate over {}", {
                        let mut t = String::new();
                        format::value_text(&mut t, other);
                        t
                    }),
                ));
            }
        }
        if !ran && let Some(else_list) = &branch.else_list {
            self.list(dot, else_list)?;
        }
        self.vars.truncate(mark);
        Ok(())
    }

    /// One iteration of `range`; whether it broke the loop.
    fn iteration(
        &mut self,
        branch: &'a Branch,
        index: Val<'a>,
        elem: Val<'a>,
        body_mark: usize,
    ) -> Run<bool> {
        self.step()?;
        let vars = &branch.pipe.vars;
        if branch.pipe.assign {
            if let Some(last) = vars.last() {
                self.set(last, elem.clone(), branch.pipe.line)?;
            }
            if vars.len() > 1 {
                self.set(&vars[0], index, branch.pipe.line)?;
            }
        } else {
            // The declared variables are the last ones pushed: the element is the last.
            let top = self.vars.len();
            if !vars.is_empty() {
                self.vars[top - 1].1 = elem.clone();
            }
            if vars.len() > 1 {
                self.vars[top - 2].1 = index;
            }
        }
        let flow = self.list(&elem, &branch.list);
        self.vars.truncate(body_mark);
        Ok(matches!(flow?, Flow::Break))
    }

    fn set(&mut self, name: &str, value: Val<'a>, line: usize) -> Run<()> {
        match self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
            Some(slot) => {
                slot.1 = value;
                Ok(())
            }
            None => Err(TemplateError::exec(
                line,
                format!("undefined variable: {name}"),
            )),
        }
    }

    fn var(&self, name: &str, line: usize) -> Run<Val<'a>> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| TemplateError::exec(line, format!("undefined variable: {name}")))
    }

    fn pipeline(&mut self, dot: &Val<'a>, pipe: &'a Pipe) -> Run<Val<'a>> {
        let mut value: Option<Val<'a>> = None;
        for cmd in &pipe.cmds {
            value = Some(self.command(dot, cmd, value, pipe.line)?);
        }
        let value = value.unwrap_or(Val::Nil);
        for var in &pipe.vars {
            if pipe.assign {
                self.set(var, value.clone(), pipe.line)?;
            } else {
                self.vars.push((var.as_str(), value.clone()));
            }
        }
        Ok(value)
    }

    fn command(
        &mut self,
        dot: &Val<'a>,
        cmd: &'a Cmd,
        piped: Option<Val<'a>>,
        line: usize,
    ) -> Run<Val<'a>> {
        self.step()?;
        let (first, rest) = cmd
            .args
            .split_first()
            .ok_or_else(|| TemplateError::exec(line, "empty command"))?;
        if let Operand::Func(name) = &first.operand {
            return self.call(dot, name, rest, piped, line);
        }
        if !rest.is_empty() || piped.is_some() {
            return Err(TemplateError::exec(
                line,
                "can't give argument to non-function",
            ));
        }
        self.term(dot, first, line)
    }

    fn call(
        &mut self,
        dot: &Val<'a>,
        name: &str,
        args: &'a [Term],
        piped: Option<Val<'a>>,
        line: usize,
    ) -> Run<Val<'a>> {
        if name == "and" || name == "or" {
            if args.is_empty() && piped.is_none() {
                return Err(TemplateError::exec(
                    line,
                    format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            let mut last = Val::Nil;
            for arg in args {
                last = self.term(dot, arg, line)?;
                let truth = last.view().truth();
                if (name == "and" && !truth) || (name == "or" && truth) {
                    return Ok(last);
                }
            }
            if let Some(piped) = piped {
                last = piped;
            }
            return Ok(last);
        }
        let mut values = Vec::with_capacity(args.len() + 1);
        for arg in args {
            values.push(self.term(dot, arg, line)?);
        }
        values.extend(piped);
        funcs::call(name, values)
            .map_err(|message| TemplateError::exec(line, format!("{name}: {message}")))
    }

    fn term(&mut self, dot: &Val<'a>, term: &'a Term, line: usize) -> Run<Val<'a>> {
        let mut value = match &term.operand {
            Operand::Dot => dot.clone(),
            Operand::Nil => Val::Nil,
            Operand::Bool(b) => Val::Bool(*b),
            Operand::Int(i) => Val::Int(*i),
            Operand::Float(f) => Val::Float(*f),
            Operand::Str(s) => Val::Str(Cow::Borrowed(s)),
            Operand::Var(name) => self.var(name, line)?,
            Operand::Func(name) => self.call(dot, name, &[], None, line)?,
            Operand::Pipe(pipe) => self.pipeline(dot, pipe)?,
        };
        for field in &term.fields {
            value = match value.view() {
                View::Map(_) => value.map_get(field),
                View::Nil => {
                    return Err(TemplateError::exec(
                        line,
                        format!("nil pointer evaluating interface {{}}.{field}"),
                    ));
                }
                other => {
                    return Err(TemplateError::exec(
                        line,
                        format!(
                            "can't evaluate field {field} in type {}",
                            other.kind().type_name()
                        ),
                    ));
                }
            };
        }
        Ok(value)
    }
}
