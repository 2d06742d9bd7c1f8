//! The parameter columns of a resource's table as StackQL lays them out: besides the
//! response's properties and the chosen method's own parameters, the required parameters
//! of every method of the resource whose rows have the same shape (any-sdk's
//! `GetUnionRequiredParameters`: the methods whose select schema is the same). So a view
//! over Azure's `blueprints.assignments` that projects `assignmentName` reads a column
//! when the statement's parameters choose `list`, which does not take it (NULL there, as in
//! StackQL).

use super::document::{DocumentStore, Method, Resource};

/// The required parameters of `resource`'s other methods whose rows have the columns
/// `columns` (the chosen method's row properties, in order), by name, each once. None when
/// the chosen method's rows declare no properties.
pub(crate) fn union_required(
    store: &DocumentStore,
    resource: &Resource,
    chosen: &Method,
    columns: &[String],
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if columns.is_empty() {
        return out;
    }
    for method in &resource.methods {
        if std::ptr::eq(method, chosen) {
            continue;
        }
        // A method whose shape does not work out shares nothing (it fails on its own).
        let Ok(shape) = method.row_shape(store) else {
            continue;
        };
        let same = shape.columns.len() == columns.len()
            && shape.columns.iter().zip(columns).all(|(a, b)| a.name == *b);
        if !same {
            continue;
        }
        for param in method.required_params() {
            if !out.iter().any(|n| n.eq_ignore_ascii_case(&param.name)) {
                out.push(param.name.clone());
            }
        }
    }
    out
}
