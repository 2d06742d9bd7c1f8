//! Types the engine's facade exposes: statement results, discovery records, the per-call
//! execution context and the credential source it carries.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::credentials::CredentialStore;
use super::slots::{EvalSlot, EvalSlots};

/// A SQL verb a provider method can be bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SqlVerb {
    /// `SELECT`
    Select,
    /// `INSERT`
    Insert,
    /// `UPDATE` (HTTP PATCH)
    Update,
    /// `REPLACE` (HTTP PUT)
    Replace,
    /// `DELETE`
    Delete,
}

impl SqlVerb {
    /// Parses a `sqlVerbs` key.
    pub(crate) fn from_doc_name(name: &str) -> Option<Self> {
        match name {
            "select" => Some(SqlVerb::Select),
            "insert" => Some(SqlVerb::Insert),
            "update" => Some(SqlVerb::Update),
            "replace" => Some(SqlVerb::Replace),
            "delete" => Some(SqlVerb::Delete),
            _ => None,
        }
    }

    /// The lower-case name, as in `sqlVerbs`.
    pub fn as_str(self) -> &'static str {
        match self {
            SqlVerb::Select => "select",
            SqlVerb::Insert => "insert",
            SqlVerb::Update => "update",
            SqlVerb::Replace => "replace",
            SqlVerb::Delete => "delete",
        }
    }

    /// Method names StackQL binds to this verb when a resource declares no `sqlVerbs` for it.
    pub(crate) fn fallback_method_names(self) -> &'static [&'static str] {
        match self {
            SqlVerb::Select => &["select", "list", "aggregatedList", "get"],
            SqlVerb::Insert => &["insert", "create"],
            SqlVerb::Delete => &["delete"],
            SqlVerb::Update | SqlVerb::Replace => &[],
        }
    }
}

impl fmt::Display for SqlVerb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value in a result row. Integers keep their type; a 64-bit id beyond `i64` arrives as
/// `Text` with every digit; nested JSON arrives as `Text` holding JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// A boolean: a column the provider document types as boolean, selected as it is.
    Boolean(bool),
    /// A 64-bit integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// Text (also JSON text of nested objects and arrays).
    Text(String),
    /// Bytes (rare: only from SQL such as `randomblob`).
    Blob(Vec<u8>),
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Null => Ok(()),
            Cell::Boolean(b) => write!(f, "{b}"),
            Cell::Integer(i) => write!(f, "{i}"),
            Cell::Real(r) => write!(f, "{r}"),
            Cell::Text(t) => f.write_str(t),
            Cell::Blob(b) => write!(f, "<{} bytes>", b.len()),
        }
    }
}

/// One write a statement would make, resolved against the provider documents without
/// sending anything (see `Engine::preflight`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedWrite {
    /// `INSERT`, `UPDATE`, `REPLACE`, `DELETE` or `EXEC`.
    pub verb: String,
    /// The provider.
    pub provider: String,
    /// The resource, `provider.service.resource`.
    pub resource: String,
    /// The provider method the requests call.
    pub method: String,
    /// How many upstream requests it would send (an `IN` list or several rows make more
    /// than one; 0 for an INSERT whose rows come from a SELECT, known only when it runs).
    pub requests: usize,
    /// SHA-256 (hex) of exactly what would be sent, in order: for each request its HTTP
    /// method, URL, headers and body before auth is added (so no credential is in it), after
    /// the resource and method. Planning the same statement again gives the same digest
    /// unless the documents, the provider settings or the tenant's variables changed it.
    pub digest: String,
    /// What a person is shown of the first requests (at most
    /// `PREVIEW_REQUESTS` of [`requests`](Self::requests)), in
    /// order, secrets masked; the digest is over the requests as sent, unmasked.
    pub previews: Vec<RequestPreview>,
}

/// The hash an approval of a statement is bound to: SHA-256 (hex) over every planned
/// write's [`digest`](PlannedWrite::digest), in order. Planning the statement again gives
/// the same hash exactly when every write would send the same requests.
pub fn plan_hash(planned: &[PlannedWrite]) -> String {
    use sha2::{Digest as _, Sha256};
    let mut text = String::from("querygate-plan-set/v1\n");
    for write in planned {
        text.push_str(&write.digest);
        text.push('\n');
    }
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// One upstream request of a planned write as a person approving it sees it: as it would
/// go on the wire before auth is added (no `Authorization` header, signature or auth query
/// parameter is part of it), with every value the tenant's credential material holds and
/// every secret-looking parameter, header or body field shown as `***`, the URL and the
/// body cut at `PREVIEW_TEXT_BYTES` with a marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestPreview {
    /// The HTTP method (`POST`).
    pub http_method: String,
    /// The URL, query string included.
    pub url: String,
    /// The headers the request carries before auth, by name, in order (masked values).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body's media type, when it has a body.
    pub media_type: Option<String>,
    /// The body as it would be sent (masked, cut at the limit with a marker).
    pub body: Option<String>,
    /// How many bytes the body really has.
    #[serde(default)]
    pub body_bytes: usize,
}

/// The result of one statement: named columns and rows of cells.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueryOutput {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows; each has one cell per column.
    pub rows: Vec<Vec<Cell>>,
    /// Things the caller should know about completeness (e.g. a page limit was reached).
    pub warnings: Vec<String>,
    /// What a write, EXEC or registry pull did, one message per upstream request.
    pub messages: Vec<String>,
    /// When a write, EXEC or registry pull completed (RFC 3339, UTC); `None` for reads.
    pub timestamp: Option<String>,
    /// The HTTP status the upstream answered the last write or EXEC request with; `None`
    /// for reads.
    pub upstream_status: Option<u16>,
}

/// Everything an engine call needs to know about who it runs for.
#[derive(Clone, Debug)]
pub struct ExecContext {
    /// The tenant the call runs for.
    pub tenant: String,
    /// The principal (for logs); `anonymous` until authentication exists.
    pub principal: String,
    /// Providers this tenant may use; `None` allows every installed provider.
    pub allowed_providers: Option<BTreeSet<String>>,
    /// The tenant's credentials.
    pub credentials: Arc<CredentialStore>,
    /// Where the statement gets a slot for each piece of its local work; `None`: no bound.
    pub slots: Option<Arc<dyn EvalSlots>>,
    /// When the call must be answered: an upstream request that would have to wait for its
    /// tenant's pace towards a provider past it is not sent (`None`: the upstream timeout
    /// bounds the wait).
    pub deadline: Option<tokio::time::Instant>,
    /// The bearer token the caller authenticated with, for providers whose tenant
    /// settings exchange it for an upstream token; `None` (stdio, the command line, mTLS,
    /// no authentication): such providers refuse the call.
    pub subject_token: Option<crate::credentials::SubjectToken>,
}

impl ExecContext {
    /// The context used before authentication exists: principal `anonymous` of tenant
    /// `default`, every provider allowed, credentials from the process environment (for
    /// tests: the `test-support` feature).
    #[cfg(any(test, feature = "test-support"))]
    pub fn anonymous_default() -> Self {
        ExecContext {
            tenant: "default".to_owned(),
            principal: "anonymous".to_owned(),
            allowed_providers: None,
            credentials: Arc::new(CredentialStore::process_env()),
            slots: None,
            deadline: None,
            subject_token: None,
        }
    }

    /// Who the call is for, as role sessions name it.
    pub(crate) fn caller(&self) -> crate::identity::Caller<'_> {
        crate::identity::Caller {
            tenant: &self.tenant,
            principal: &self.principal,
            subject_token: self.subject_token.as_ref(),
        }
    }

    /// A slot from this context's slots (see [`EvalSlots`]), or none when it has none (no
    /// bound).
    pub(crate) async fn slot(&self) -> Option<EvalSlot> {
        match &self.slots {
            Some(slots) => Some(slots.acquire().await),
            None => None,
        }
    }

    /// Whether this tenant may use `provider` (its SQL name).
    pub fn allows(&self, provider: &str) -> bool {
        self.allowed_providers
            .as_ref()
            .is_none_or(|set| set.contains(provider))
    }
}

/// An installed provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderInfo {
    /// SQL name.
    pub name: String,
    /// The version in use (newest installed unless pinned).
    pub version: String,
    /// Every installed version, newest first.
    pub versions: Vec<String>,
}

/// A service of a provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceInfo {
    /// The provider document's id of the service (`storage:v1`).
    pub id: String,
    /// SQL name.
    pub name: String,
    /// Title from the provider document.
    pub title: Option<String>,
    /// Description from the provider document.
    pub description: Option<String>,
}

/// A resource (table) of a service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceInfo {
    /// SQL name.
    pub name: String,
    /// `provider.service.resource`.
    pub id: String,
    /// Title from the document.
    pub title: Option<String>,
}

/// A parameter of a method.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParamInfo {
    /// Name, as used in WHERE or `EXEC @name`.
    pub name: String,
    /// `path`, `query`, `header`, `cookie` or `server`.
    pub location: String,
    /// Whether the statement must supply it.
    pub required: bool,
    /// JSON schema type, when known.
    pub type_name: Option<String>,
    /// Default value, when the document gives one.
    pub default: Option<String>,
    /// Allowed values, when the document lists them.
    pub allowed_values: Vec<String>,
    /// Description from the document.
    pub description: Option<String>,
}

/// A method of a resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MethodInfo {
    /// Method name (`list_for_org`).
    pub name: String,
    /// The SQL verb it is bound to; `None` means only `EXEC` reaches it.
    pub sql_verb: Option<SqlVerb>,
    /// Names of the required parameters.
    pub required_params: Vec<String>,
    /// The HTTP method of its operation (`None` for a view, which reads through the
    /// methods its SQL names).
    pub http_method: Option<String>,
    /// What it does upstream, with the evidence (`None` for a view).
    pub effect: Option<super::effect::MethodEffect>,
}

/// A column of a resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// JSON schema type (`string`, `integer`, `object`, …).
    pub type_name: String,
    /// Description from the document.
    pub description: Option<String>,
}

/// A method's full input/output contract.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodContract {
    /// `provider.service.resource`.
    pub resource: String,
    /// Method name.
    pub name: String,
    /// Bound SQL verb, if any.
    pub sql_verb: Option<SqlVerb>,
    /// HTTP method (`GET`).
    pub http_method: String,
    /// Path template (`/orgs/{org}/repos`).
    pub path: String,
    /// Summary from the operation.
    pub summary: Option<String>,
    /// Description from the operation.
    pub description: Option<String>,
    /// Every parameter.
    pub params: Vec<ParamInfo>,
    /// The request body schema, if the method takes a body.
    pub request_body: Option<serde_json::Value>,
    /// `objectKey` of the response, if any.
    pub object_key: Option<String>,
    /// The columns a SELECT through this method returns.
    pub columns: Vec<ColumnInfo>,
}
