//! The values a template works on, with the Go types they stand for: a decoded JSON body is
//! `map[string]interface {}`, `[]interface {}`, `float64`, `string`, `bool` or nil, as Go's
//! `encoding/json` gives it; constants and function results add `int`.

use std::borrow::Cow;
use std::rc::Rc;

use super::doc::{Doc, Obj};

/// One value during execution. JSON parts of the input are borrowed; values made while
/// executing (strings, numbers, the result of `jsonMapFromString`) are owned.
#[derive(Debug, Clone)]
pub(super) enum Val<'v> {
    /// Go's invalid value: a nil interface (a missing map key, JSON `null`, `nil`).
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'v, str>),
    /// Part of the input (never `null`, which is [`Val::Nil`]).
    Json(&'v Doc<'v>),
    /// A JSON value made during execution.
    Owned(Rc<Doc<'v>>),
}

/// Go's kinds, as `reflect.Kind.String()` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Invalid,
    Bool,
    Int,
    Float64,
    String,
    Map,
    Slice,
}

impl Kind {
    /// `reflect.Kind.String()`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Invalid => "invalid",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Float64 => "float64",
            Kind::String => "string",
            Kind::Map => "map",
            Kind::Slice => "slice",
        }
    }

    /// The Go type's name, for error messages.
    pub(super) fn type_name(self) -> &'static str {
        match self {
            Kind::Invalid => "<nil>",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Float64 => "float64",
            Kind::String => "string",
            Kind::Map => "map[string]interface {}",
            Kind::Slice => "[]interface {}",
        }
    }
}

/// A borrowed view of a value: what the functions and the executor look at.
#[derive(Debug, Clone, Copy)]
pub(super) enum View<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Map(&'a Obj<'a>),
    Slice(&'a [Doc<'a>]),
}

impl<'v> Val<'v> {
    /// The value of a JSON part of the input.
    pub(super) fn json(value: &'v Doc<'v>) -> Self {
        match value {
            Doc::Null => Val::Nil,
            other => Val::Json(other),
        }
    }

    /// A value made from a JSON value owned by the execution.
    pub(super) fn owned(value: Doc<'v>) -> Self {
        match value {
            Doc::Null => Val::Nil,
            other => Val::Owned(Rc::new(other)),
        }
    }

    /// The value as Go sees it.
    pub(super) fn view(&self) -> View<'_> {
        match self {
            Val::Nil => View::Nil,
            Val::Bool(b) => View::Bool(*b),
            Val::Int(i) => View::Int(*i),
            Val::Float(f) => View::Float(*f),
            Val::Str(s) => View::Str(s),
            Val::Json(j) => view_json(j),
            Val::Owned(j) => view_json(j),
        }
    }

    /// Go's `reflect.Kind`.
    pub(super) fn kind(&self) -> Kind {
        self.view().kind()
    }

    /// `map[key]` of a map value: the element, or nil when the key is missing.
    pub(super) fn map_get(&self, key: &str) -> Val<'v> {
        match self {
            Val::Json(Doc::Object(map)) => map.get(key).map_or(Val::Nil, Val::json),
            Val::Owned(owned) => match owned.as_ref() {
                Doc::Object(map) => map
                    .get(key)
                    .map_or(Val::Nil, |found| Val::owned(found.clone())),
                _ => Val::Nil,
            },
            _ => Val::Nil,
        }
    }

    /// `slice[i]` of a slice value (the caller checked the bounds).
    pub(super) fn slice_get(&self, i: usize) -> Val<'v> {
        match self {
            Val::Json(Doc::Array(items)) => items.get(i).map_or(Val::Nil, Val::json),
            Val::Owned(owned) => match owned.as_ref() {
                Doc::Array(items) => items
                    .get(i)
                    .map_or(Val::Nil, |found| Val::owned(found.clone())),
                _ => Val::Nil,
            },
            _ => Val::Nil,
        }
    }

    /// `slice[from:to]` of a slice value (the caller checked the bounds), as a new value.
    pub(super) fn sub_slice(&self, from: usize, to: usize) -> Val<'v> {
        let items: &[Doc<'v>] = match self {
            Val::Json(Doc::Array(items)) => items,
            Val::Owned(owned) => match owned.as_ref() {
                Doc::Array(items) => items,
                _ => &[],
            },
            _ => &[],
        };
        Val::owned(Doc::Array(items.get(from..to).unwrap_or_default().to_vec()))
    }

    /// The map's keys in Go's order for `range` and printing (sorted).
    pub(super) fn sorted_keys(&self) -> Vec<Cow<'v, str>> {
        match self {
            Val::Json(Doc::Object(map)) => map.iter().map(|(k, _)| Cow::Borrowed(k)).collect(),
            Val::Owned(owned) => match owned.as_ref() {
                Doc::Object(map) => map.iter().map(|(k, _)| Cow::Owned(k.to_owned())).collect(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

fn view_json<'a>(value: &'a Doc<'_>) -> View<'a> {
    match value {
        Doc::Null => View::Nil,
        Doc::Bool(b) => View::Bool(*b),
        Doc::Number(n) => View::Float(n.as_f64().unwrap_or(f64::NAN)),
        Doc::Str(s) => View::Str(s),
        Doc::Array(items) => View::Slice(items),
        Doc::Object(map) => View::Map(map),
    }
}

impl View<'_> {
    /// Go's `reflect.Kind`.
    pub(super) fn kind(&self) -> Kind {
        match self {
            View::Nil => Kind::Invalid,
            View::Bool(_) => Kind::Bool,
            View::Int(_) => Kind::Int,
            View::Float(_) => Kind::Float64,
            View::Str(_) => Kind::String,
            View::Map(_) => Kind::Map,
            View::Slice(_) => Kind::Slice,
        }
    }

    /// Go's truth (`if`, `and`, `or`, `not`): false for nil, false, zero, and empty strings,
    /// slices and maps.
    pub(super) fn truth(&self) -> bool {
        match self {
            View::Nil => false,
            View::Bool(b) => *b,
            View::Int(i) => *i != 0,
            View::Float(f) => *f != 0.0,
            View::Str(s) => !s.is_empty(),
            View::Map(m) => !m.is_empty(),
            View::Slice(s) => !s.is_empty(),
        }
    }
}
