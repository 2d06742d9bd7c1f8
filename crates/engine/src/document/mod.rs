//! Provider documents: loading, caching and the model read from them.

mod cache;
mod cascade;
mod json;
mod model;
mod operation;
mod pagination;
mod param;
mod request;
mod retry;
mod schema;
mod snake;
mod store;
mod view;
mod yaml;

pub(crate) use cache::ModelCache;
pub(crate) use model::{ColumnSpec, Method, Provider, Resource};
pub(crate) use pagination::Pagination;
pub(crate) use param::{Param, ParamLocation, find_closing_brace};
pub(crate) use request::{BodyTranslate, RequestSpec, WireTranslate};
pub(crate) use retry::DocumentRetry;
pub(crate) use schema::SchemaAt;
pub(crate) use snake::wire_names;
pub(crate) use store::DocumentStore;
pub(crate) use view::View;
