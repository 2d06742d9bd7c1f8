//! The provider model read from StackQL documents: provider → service → resource → method →
//! parameters, response shape and pagination. Built on demand from cached documents.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::cascade::ConfigCascade;
use super::json::{escape_pointer, ref_of, str_field, unescape_pointer};
use super::operation::{Located, ResponseSpec, locate, params_and_servers, response_spec};
use super::pagination::{Pagination, parse_pagination};
use super::param::{Param, ParamLocation, Server};
use super::retry::DocumentRetry;
use super::schema::{SchemaAt, deref};
use super::store::{Doc, DocumentStore, Reads, split_ref};
use crate::error::{Error, Result};
use crate::rows::RowLocator;
use crate::types::SqlVerb;

/// A provider version as installed in the local registry.
#[derive(Debug)]
pub(crate) struct Provider {
    /// The SQL name (`provider.yaml`'s `name`), e.g. `google`.
    pub(crate) name: String,
    /// `provider.yaml`.
    pub(crate) doc: Arc<Doc>,
}

/// One `providerServices` entry.
#[derive(Debug, Clone)]
pub(crate) struct ServiceEntry {
    /// The entry's `id` (`storage:v1`), else its key.
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
}

impl Provider {
    /// `config` of provider.yaml (auth, pagination defaults), or `null`.
    pub(crate) fn config(&self) -> &Value {
        self.doc.value.get("config").unwrap_or(&Value::Null)
    }

    /// The services this provider lists, one per SQL name (the preferred entry when several
    /// entries share a name, as `compute`, `compute:alpha`, `compute:beta` do), sorted by name.
    pub(crate) fn services(&self) -> Vec<ServiceEntry> {
        self.preferred_entries()
            .into_iter()
            .map(|(name, (key, entry))| ServiceEntry {
                id: str_field(entry, "id").unwrap_or_else(|| key.to_owned()),
                title: str_field(entry, "title"),
                description: str_field(entry, "description"),
                name,
            })
            .collect()
    }

    /// The `providerServices` entry chosen for each SQL name, sorted by name: the entry
    /// marked `preferred`, else the one whose key is the name, else the first.
    fn preferred_entries(&self) -> BTreeMap<String, (&str, &Value)> {
        let mut chosen: BTreeMap<String, (u8, &str, &Value)> = BTreeMap::new();
        let Some(Value::Object(entries)) = self.doc.value.get("providerServices") else {
            return BTreeMap::new();
        };
        for (key, entry) in entries {
            let name = entry.get("name").and_then(Value::as_str).unwrap_or(key);
            let rank = match entry.get("preferred").and_then(Value::as_bool) {
                Some(true) => 0,
                _ if key == name => 1,
                _ => 2,
            };
            match chosen.get(name) {
                Some((best, _, _)) if *best <= rank => {}
                _ => {
                    chosen.insert(name.to_owned(), (rank, key.as_str(), entry));
                }
            }
        }
        chosen
            .into_iter()
            .map(|(name, (_, key, entry))| (name, (key, entry)))
            .collect()
    }

    /// Opens one service by SQL name, loading its documents.
    pub(crate) fn service(self: &Arc<Self>, store: &DocumentStore, name: &str) -> Result<Service> {
        let entries = self.preferred_entries();
        let (_, entry) = entries.get(name).ok_or_else(|| {
            Error::unknown(format!(
                "service '{name}' not found in provider '{}'",
                self.name
            ))
        })?;
        let (doc, pointer) = if let Some(reference) = ref_of(entry, "resources") {
            (store.load(split_ref(reference).0)?, "/resources")
        } else if let Some(reference) = ref_of(entry, "service") {
            (
                store.load(split_ref(reference).0)?,
                "/components/x-stackQL-resources",
            )
        } else {
            return Err(Error::bad_document(format!(
                "provider document '{}': service '{name}' has neither service.$ref nor resources.$ref",
                self.doc.rel
            )));
        };
        Ok(Service {
            provider: self.clone(),
            name: name.to_owned(),
            doc,
            pointer,
        })
    }
}

/// An opened service: its resource definitions and the document they live in.
#[derive(Debug)]
pub(crate) struct Service {
    pub(crate) provider: Arc<Provider>,
    /// SQL name.
    pub(crate) name: String,
    doc: Arc<Doc>,
    pointer: &'static str,
}

impl Service {
    fn resource_map(&self) -> Option<&serde_json::Map<String, Value>> {
        self.doc
            .value
            .pointer(self.pointer)
            .and_then(Value::as_object)
    }

    /// Resource names with titles, sorted.
    pub(crate) fn resource_names(&self) -> Vec<(String, Option<String>)> {
        let mut names: Vec<(String, Option<String>)> = self
            .resource_map()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), str_field(v, "title")))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Opens one resource and all its methods.
    pub(crate) fn resource(&self, store: &DocumentStore, name: &str) -> Result<Resource> {
        let def = self
            .resource_map()
            .and_then(|m| m.get(name))
            .ok_or_else(|| {
                Error::unknown(format!(
                    "resource '{name}' not found in service '{}.{}'",
                    self.provider.name, self.name
                ))
            })?;
        Resource::build(store, self, name, def)
    }
}

/// A resource: the table `provider.service.resource`.
#[derive(Debug)]
pub(crate) struct Resource {
    pub(crate) provider: String,
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) methods: Vec<Method>,
    /// Methods whose definition cannot be resolved: the rest of the resource works, and
    /// using one of these fails with its error.
    pub(crate) broken: Vec<BrokenMethod>,
    /// `sqlVerbs` as declared: verb → method names in preference order.
    verbs: Vec<(SqlVerb, Vec<String>)>,
    /// The SQLite views of `config.views.select`, in fallback order: a SELECT reads the
    /// first whose required parameters the statement gives, in place of any method.
    pub(crate) views: Vec<super::View>,
}

/// A method of a resource whose definition does not resolve (a dangling `$ref`, a missing
/// operation): kept by name so that a statement using it fails naming it.
#[derive(Debug)]
pub(crate) struct BrokenMethod {
    pub(crate) name: String,
    pub(crate) error: Error,
}

impl BrokenMethod {
    /// The error a statement using this method gets.
    pub(crate) fn to_error(&self, resource: &str) -> Error {
        Error::bad_document(format!(
            "method '{}' of resource '{resource}' cannot be used: {}",
            self.name, self.error
        ))
    }
}

impl Resource {
    /// `provider.service.resource`.
    pub(crate) fn full_name(&self) -> String {
        format!("{}.{}.{}", self.provider, self.service, self.name)
    }

    fn build(store: &DocumentStore, service: &Service, name: &str, def: &Value) -> Result<Self> {
        let where_ = format!(
            "{}#{}/{}",
            service.doc.rel,
            service.pointer,
            escape_pointer(name)
        );
        let verbs = declared_verbs(def);
        let resource_config = def.get("config");
        let default_service_doc = ref_of(def, "serviceDoc")
            .or_else(|| ref_of(&service.doc.value, "serviceDoc"))
            .map(|r| split_ref(r).0.to_owned());
        let mut methods = Vec::new();
        let mut broken = Vec::new();
        if let Some(Value::Object(defs)) = def.get("methods") {
            for (method_name, method_def) in defs {
                let verb = verbs
                    .iter()
                    .find(|(_, names)| names.contains(method_name))
                    .map(|(verb, _)| *verb)
                    .or_else(|| label_verb(method_name));
                let context = MethodContext {
                    store,
                    service,
                    resource: name,
                    resource_config,
                    default_service_doc: default_service_doc.as_deref(),
                    location: format!("{where_}/methods/{}", escape_pointer(method_name)),
                };
                match Method::build(&context, method_name, method_def, verb) {
                    Ok(method) => methods.push(method),
                    Err(error) => broken.push(BrokenMethod {
                        name: method_name.clone(),
                        error,
                    }),
                }
            }
        }
        Ok(Resource {
            provider: service.provider.name.clone(),
            service: service.name.clone(),
            name: name.to_owned(),
            methods,
            broken,
            verbs,
            views: super::view::select_views(resource_config),
        })
    }

    /// The methods a statement of `verb` may use, in preference order: the `sqlVerbs` list
    /// when the document declares that verb (an empty list means none), otherwise StackQL's
    /// fallback method names (`select`, `list`, `aggregatedList`, `get` for SELECT; `insert`,
    /// `create` for INSERT; `delete` for DELETE).
    pub(crate) fn methods_for(&self, verb: SqlVerb) -> Vec<&Method> {
        let declared = self
            .verbs
            .iter()
            .find(|(v, _)| *v == verb)
            .map(|(_, names)| names);
        let names: Vec<&str> = match declared {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => verb.fallback_method_names().to_vec(),
        };
        names
            .into_iter()
            .filter_map(|name| self.method(name))
            .collect()
    }

    /// A method by name.
    pub(crate) fn method(&self, name: &str) -> Option<&Method> {
        self.methods.iter().find(|m| m.name == name)
    }

    /// The error for a statement of `verb` that found no usable method when one of the
    /// methods bound to that verb is broken: it names the broken method and why.
    pub(crate) fn broken_for(&self, verb: SqlVerb) -> Option<Error> {
        let declared = self
            .verbs
            .iter()
            .find(|(v, _)| *v == verb)
            .map(|(_, names)| names);
        let names: Vec<&str> = match declared {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => verb.fallback_method_names().to_vec(),
        };
        names.into_iter().find_map(|name| self.broken_method(name))
    }

    /// The error for using the method `name` when its definition does not resolve.
    pub(crate) fn broken_method(&self, name: &str) -> Option<Error> {
        self.broken
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.to_error(&self.full_name()))
    }
}

/// `sqlVerbs` of a resource: each declared verb with its method names, in document order.
fn declared_verbs(def: &Value) -> Vec<(SqlVerb, Vec<String>)> {
    let mut out = Vec::new();
    let Some(Value::Object(verbs)) = def.get("sqlVerbs") else {
        return out;
    };
    for (verb_name, refs) in verbs {
        let Some(verb) = SqlVerb::from_doc_name(verb_name) else {
            continue;
        };
        let names = refs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("$ref").and_then(Value::as_str))
            .filter_map(|target| target.rsplit_once("/methods/"))
            .map(|(_, method)| unescape_pointer(method))
            .collect();
        out.push((verb, names));
    }
    out
}

/// The verb shown for a method no `sqlVerbs` entry binds, as StackQL labels it: by its
/// lower-cased name (`aggregatedList` stays unlabelled, so it is listed as EXEC, though a
/// SELECT without `sqlVerbs` still falls back to it).
fn label_verb(method_name: &str) -> Option<SqlVerb> {
    match method_name.to_ascii_lowercase().as_str() {
        "select" | "list" | "get" => Some(SqlVerb::Select),
        "insert" | "create" => Some(SqlVerb::Insert),
        "delete" => Some(SqlVerb::Delete),
        _ => None,
    }
}

/// The effect of a method, from what its document says of it (see `effect`).
#[allow(clippy::too_many_arguments)]
fn method_effect(
    cx: &MethodContext<'_>,
    name: &str,
    http_method: &str,
    path: &str,
    operation: &Value,
    op_doc: &Doc,
    params: &[Param],
    verb: Option<SqlVerb>,
) -> crate::effect::MethodEffect {
    let provider = &cx.service.provider;
    let aws_target = params
        .iter()
        .find(|p| {
            p.location == ParamLocation::Header
                && p.name
                    .eq_ignore_ascii_case(crate::effect::AWS_TARGET_HEADER)
        })
        .and_then(|p| match p.allowed.as_slice() {
            [only] => Some(only.as_str()),
            [] => p.default.as_deref(),
            _ => None,
        });
    let verbs: Vec<&str> = verb.map(SqlVerb::as_str).into_iter().collect();
    crate::effect::of_method(&crate::effect::MethodFacts {
        provider: &provider.name,
        service: &cx.service.name,
        resource: cx.resource,
        method: name,
        http_method,
        path,
        operation,
        document: &op_doc.value,
        aws_target,
        auth_type: provider
            .config()
            .get("auth")
            .and_then(|auth| auth.get("type"))
            .and_then(Value::as_str),
        sql_verbs: &verbs,
    })
}

/// A column of a resource, from the response schema or a parameter.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSpec {
    pub(crate) name: String,
    pub(crate) type_name: String,
    pub(crate) description: Option<String>,
    /// The property's `xml.name` (its element or attribute name in an XML body).
    pub(crate) xml_name: Option<String>,
    /// The property's `xml.attribute: true`.
    pub(crate) xml_attribute: bool,
    /// The property's name in the response when the column is named otherwise
    /// (`config.snake_case_aliases`: column `public_access`, wire name `publicAccess`).
    pub(crate) wire: Option<String>,
}

/// Where rows sit in a method's response, and the columns of a row.
#[derive(Debug)]
pub(crate) struct RowShape {
    /// Shared with the statements that load rows of this shape.
    pub(crate) locator: Arc<RowLocator>,
    /// The row schema's properties (empty when the schema declares none).
    pub(crate) columns: Vec<ColumnSpec>,
}

/// One method: an OpenAPI operation plus StackQL's response and pagination settings.
#[derive(Debug)]
pub(crate) struct Method {
    pub(crate) name: String,
    /// SHA-256 (hex) over the digests of the documents the method was read from
    /// (`provider.yaml`, the service document, the operation's document): a plan binds to it.
    pub(crate) documents_sha256: String,
    pub(crate) verb: Option<SqlVerb>,
    pub(crate) http_method: String,
    pub(crate) path: String,
    pub(crate) servers: Vec<Server>,
    pub(crate) params: Vec<Param>,
    pub(crate) response: ResponseSpec,
    pub(crate) pagination: Option<Pagination>,
    pub(crate) summary: Option<String>,
    pub(crate) description: Option<String>,
    /// The operation object and the document its `$ref`s are relative to.
    pub(crate) operation: Value,
    pub(crate) operation_doc: Arc<Doc>,
    /// `#…` location of the method definition, for error messages.
    pub(crate) location: String,
    /// The request body schema, if the operation takes one.
    pub(crate) request_body: Option<Value>,
    /// Body fields the method definition's `request.required` marks required.
    pub(crate) request_required: Vec<String>,
    /// `request.base`, `request.default`, `request.mediaType` and the body translate
    /// algorithm.
    pub(crate) request: super::RequestSpec,
    /// The nearest `config.retry` (method, resource, service document, provider).
    pub(crate) retry: Option<DocumentRetry>,
    /// The nearest `config.queryParamPushdown` (method, resource, service document).
    pub(crate) pushdown: Option<Value>,
    /// `request.nativeCasing` (`pascal`, `camel`, `kebab`): the wire names of parameters and
    /// body fields also answer to their snake_case form in SQL.
    pub(crate) native_casing: Option<String>,
    /// The provider's `config.snake_case_aliases`: response columns and parameters are
    /// named in snake_case in SQL; requests and rows keep the wire names.
    pub(crate) snake_aliases: bool,
    /// What the method does upstream, with the evidence (see `effect`).
    pub(crate) effect: crate::effect::MethodEffect,
    /// The row shape once worked out, with the documents it was worked out from beyond
    /// those of the method itself.
    shape: OnceLock<(Arc<RowShape>, Reads)>,
}

/// The body fields a method definition's `request.required` names.
fn request_required(def: &Value) -> Vec<String> {
    def.get("request")
        .and_then(|r| r.get("required"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

struct MethodContext<'a> {
    store: &'a DocumentStore,
    service: &'a Service,
    /// The resource's name.
    resource: &'a str,
    resource_config: Option<&'a Value>,
    default_service_doc: Option<&'a str>,
    location: String,
}

impl Method {
    fn build(
        cx: &MethodContext<'_>,
        name: &str,
        def: &Value,
        verb: Option<SqlVerb>,
    ) -> Result<Self> {
        let store = cx.store;
        let reference = def
            .get("operation")
            .and_then(|o| o.get("$ref"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::bad_document(format!("{}: method has no operation.$ref", cx.location))
            })?;
        let (file, pointer) = split_ref(reference);
        // In the split layout the operation is looked up in the resource's service document
        // (`serviceDoc`), as StackQL does: the file part of the `$ref` is not consulted, so a
        // ref that names another version's copy (`googleapis.com/v2.0.1/…`) resolves here.
        let op_doc = match cx.default_service_doc {
            Some(default) if cx.service.pointer == "/resources" => store.load(default)?,
            _ if file.is_empty() => cx.service.doc.clone(),
            _ => store.load(file)?,
        };
        let found = locate(&op_doc, reference, pointer, &cx.location)?;
        let (params, servers) =
            params_and_servers(store, &op_doc, &found, reference, &cx.location)?;
        let Located {
            http_method,
            path,
            operation,
            ..
        } = found;
        let response = response_spec(def.get("response"), &op_doc, &cx.location)?;
        let configs = ConfigCascade {
            method: def.get("config"),
            resource: cx.resource_config,
            operation_doc: op_doc.value.get("x-stackQL-config"),
            service_doc: cx.service.doc.value.get("x-stackQL-config"),
            provider: Some(cx.service.provider.config()),
        };
        let pagination = configs.find(|c| parse_pagination(c.get("pagination")?));
        let retry = configs.find(|c| DocumentRetry::parse(c.get("retry")?));
        let mut request = super::RequestSpec::parse(def, cx.resource_config)
            .map_err(|err| Error::bad_document(format!("{}: {err}", cx.location)))?;
        request.wire = super::request::WireTranslate::from_configs(configs.levels());
        request.aws_canonical = super::request::aws_canonical_from_configs(configs.levels());
        let request_body = operation
            .get("requestBody")
            .map(|body| deref(store, &op_doc, body).map(|(_, v)| v))
            .transpose()?;
        let effect = method_effect(
            cx,
            name,
            &http_method,
            &path,
            operation,
            &op_doc,
            &params,
            verb,
        );
        let documents_sha256 = crate::lock::sha256_hex(
            [
                &cx.service.provider.doc.sha256,
                &cx.service.doc.sha256,
                &op_doc.sha256,
            ]
            .map(String::as_str)
            .join("\n")
            .as_bytes(),
        );
        Ok(Method {
            name: name.to_owned(),
            documents_sha256,
            verb,
            http_method: http_method.to_ascii_uppercase(),
            path,
            servers,
            params,
            response,
            pagination,
            summary: str_field(operation, "summary"),
            description: str_field(operation, "description"),
            operation: operation.clone(),
            operation_doc: op_doc.clone(),
            location: cx.location.clone(),
            request_body,
            request,
            retry,
            // The provider's `config` is not consulted for push-down.
            pushdown: configs.find_below_provider(|c| {
                c.get("queryParamPushdown")
                    .filter(|p| p.is_object())
                    .cloned()
            }),
            native_casing: def
                .get("request")
                .and_then(|r| str_field(r, "nativeCasing"))
                .filter(|c| !c.eq_ignore_ascii_case("snake")),
            snake_aliases: super::snake::enabled(cx.service.provider.config()),
            request_required: request_required(def),
            effect,
            shape: OnceLock::new(),
        })
    }

    /// The request body's media type and schema, if the operation takes a body. JSON is
    /// preferred when the operation offers several media types.
    pub(crate) fn request_schema(
        &self,
        store: &DocumentStore,
    ) -> Result<Option<(String, Option<SchemaAt>)>> {
        let Some(Value::Object(content)) =
            self.request_body.as_ref().and_then(|b| b.get("content"))
        else {
            return Ok(None);
        };
        let chosen = content
            .iter()
            .find(|(media, _)| media.as_str() == "application/json")
            .or_else(|| content.iter().find(|(media, _)| media.contains("json")))
            .or_else(|| content.iter().next());
        let Some((media, body)) = chosen else {
            return Ok(None);
        };
        let schema = body
            .get("schema")
            .map(|schema| SchemaAt::resolve(store, &self.operation_doc, schema))
            .transpose()?;
        Ok(Some((media.clone(), schema)))
    }

    /// The request body fields a caller must supply: the body schema's required
    /// properties and those the method's `request.required` names, sorted.
    pub(crate) fn required_body_fields(&self, store: &DocumentStore) -> Result<Vec<String>> {
        let Some((_, Some(schema))) = self.request_schema(store)? else {
            return Ok(Vec::new());
        };
        let mut required = schema.required_names(store)?;
        required.extend(self.request_required.iter().cloned());
        let mut fields: Vec<String> = schema
            .properties(store)?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| required.contains(name))
            .collect();
        fields.sort();
        fields.dedup();
        Ok(fields)
    }

    /// Whether the operation declares its request body required.
    pub(crate) fn body_required(&self) -> bool {
        self.request_body
            .as_ref()
            .and_then(|b| b.get("required"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The snake_case name SQL may use for the wire name `wire` (`VpcId` → `vpc_id`,
    /// `x-ms-client-id` → `x_ms_client_id`), when the method declares a native casing or
    /// its provider `snake_case_aliases`, and the two differ.
    pub(crate) fn sql_alias(&self, wire: &str) -> Option<String> {
        if self.native_casing.is_none() && !self.snake_aliases {
            return None;
        }
        super::snake::alias(wire)
    }

    /// Whether the SQL name `sql` means the parameter or body field `wire`: the same name
    /// (case-insensitive), or its snake_case alias.
    pub(crate) fn answers_to(&self, wire: &str, sql: &str) -> bool {
        wire.eq_ignore_ascii_case(sql)
            || self
                .sql_alias(wire)
                .is_some_and(|alias| alias.eq_ignore_ascii_case(sql))
    }

    /// Parameters a statement must supply for this method to run.
    pub(crate) fn required_params(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.required)
    }

    /// The success response this method's rows come from (the configured response key, else
    /// the first `2xx` one), its `$ref`s resolved, with the document it was found in.
    fn success_response(&self, store: &DocumentStore) -> Result<Option<(Arc<Doc>, Value)>> {
        let Some(Value::Object(responses)) = self.operation.get("responses") else {
            return Ok(None);
        };
        let key = self
            .response
            .doc_key
            .clone()
            .or_else(|| responses.keys().find(|k| k.starts_with('2')).cloned());
        let Some(response) = key.and_then(|k| responses.get(&k)) else {
            return Ok(None);
        };
        deref(store, &self.operation_doc, response).map(Some)
    }

    /// The schema of the success response this method's rows come from.
    pub(crate) fn response_schema(&self, store: &DocumentStore) -> Result<Option<SchemaAt>> {
        if let Some(schema) = &self.response.schema_override {
            return Ok(Some(SchemaAt::resolve(store, &self.operation_doc, schema)?));
        }
        let Some((doc, response)) = self.success_response(store)? else {
            return Ok(None);
        };
        let Some(Value::Object(content)) = response.get("content") else {
            return Ok(None);
        };
        let media = self
            .response
            .media_type
            .as_deref()
            .and_then(|m| content.get(m))
            .or_else(|| content.get("application/json"))
            .or_else(|| content.values().next());
        match media.and_then(|m| m.get("schema")) {
            Some(schema) => Ok(Some(SchemaAt::resolve(store, &doc, schema)?)),
            None => Ok(None),
        }
    }

    /// The name of the success response's schema when it is a `$ref`
    /// (`#/components/schemas/Operation` → `Operation`).
    pub(crate) fn response_schema_name(&self, store: &DocumentStore) -> Result<Option<String>> {
        let Some((_, response)) = self.success_response(store)? else {
            return Ok(None);
        };
        let content = response.get("content");
        let media = self
            .response
            .media_type
            .as_deref()
            .and_then(|m| content.and_then(|c| c.get(m)))
            .or_else(|| content.and_then(|c| c.get("application/json")));
        Ok(media
            .and_then(|m| m.get("schema"))
            .and_then(|s| s.get("$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
            .map(str::to_owned))
    }

    /// Where rows sit in a response, and the schema of one row.
    fn row_schema(&self, store: &DocumentStore) -> Result<(RowLocator, Option<SchemaAt>)> {
        let schema = self.response_schema(store)?;
        if let Some(key) = &self.response.object_key {
            let locator = RowLocator::parse(key).map_err(|err| {
                Error::bad_document(format!("{}: objectKey '{key}': {err}", self.location))
            })?;
            let row_schema = match (&locator, &schema) {
                (RowLocator::Path(steps), Some(root)) => follow_schema(store, root, steps)?,
                _ => None,
            };
            return Ok((locator, row_schema));
        }
        let Some(root) = schema else {
            return Ok((RowLocator::Auto, None));
        };
        if root.is_array() {
            return Ok((RowLocator::Path(Vec::new()), root.items(store)?));
        }
        if let Some(items) = root.property(store, "items")?
            && items.is_array()
        {
            let steps = vec![crate::rows::Step::Key("items".to_owned())];
            return Ok((RowLocator::Path(steps), items.items(store)?));
        }
        Ok((RowLocator::Path(Vec::new()), Some(root)))
    }

    /// Where rows sit in a response, and the columns of a row: the row schema's
    /// properties (empty when the schema declares none). Worked out once per method; the
    /// documents read for it beyond the method's own are kept for [`Self::shape_unchanged`].
    pub(crate) fn row_shape(&self, store: &DocumentStore) -> Result<Arc<RowShape>> {
        if let Some((shape, _)) = self.shape.get() {
            return Ok(shape.clone());
        }
        let (shape, reads) = store.recording(|| self.work_out_shape(store));
        let shape = Arc::new(shape?);
        if reads.complete() {
            let _ = self.shape.set((shape.clone(), reads));
        }
        Ok(shape)
    }

    /// Whether the row shape, if worked out, still stands: the documents it was read from
    /// load as the same documents.
    pub(crate) fn shape_unchanged(&self, store: &DocumentStore) -> bool {
        self.shape
            .get()
            .is_none_or(|(_, reads)| store.unchanged(reads))
    }

    fn work_out_shape(&self, store: &DocumentStore) -> Result<RowShape> {
        let (locator, row_schema) = self.row_schema(store)?;
        let Some(row_schema) = row_schema else {
            return Ok(RowShape {
                locator: Arc::new(locator),
                columns: Vec::new(),
            });
        };
        let properties = row_schema.properties(store)?;
        let names = super::snake::column_names(
            self.snake_aliases,
            properties.iter().map(|(name, _)| name.as_str()),
        );
        let columns = properties
            .into_iter()
            .zip(names)
            .map(|((_, schema), (name, wire))| {
                let xml = schema.schema.get("xml");
                ColumnSpec {
                    wire,
                    type_name: schema.type_name().unwrap_or("object").to_owned(),
                    description: schema.description().map(str::to_owned),
                    xml_name: xml
                        .and_then(|x| x.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    xml_attribute: xml
                        .and_then(|x| x.get("attribute"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    name,
                }
            })
            .collect();
        Ok(RowShape {
            locator: Arc::new(locator),
            columns,
        })
    }

    /// The resource's columns as this method returns them.
    pub(crate) fn columns(&self, store: &DocumentStore) -> Result<Vec<ColumnSpec>> {
        Ok(self.row_shape(store)?.columns.clone())
    }
}

/// Walks a row locator through a schema to the schema of one row.
fn follow_schema(
    store: &DocumentStore,
    root: &SchemaAt,
    steps: &[crate::rows::Step],
) -> Result<Option<SchemaAt>> {
    use crate::rows::Step;
    let mut current = root.clone();
    for step in steps {
        let next = match step {
            Step::Key(key) => current.property(store, key)?,
            Step::Each if current.is_array() => current.items(store)?,
            Step::Each => current.map_values(store)?,
        };
        match next {
            Some(next) => current = next,
            None => return Ok(None),
        }
    }
    if current.is_array() {
        return current.items(store);
    }
    Ok(Some(current))
}
