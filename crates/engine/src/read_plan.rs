//! What a held SELECT would send, as a person approving it sees it and as the approval is
//! bound to: for each table it reads, the method and one request built as it would go on
//! the wire before auth (the first value of each fanned-out parameter; a value another
//! table's rows supply shown as `{name}`), and a digest over the method, that request and
//! every value each parameter takes. Planning the statement again gives the same digest
//! unless the documents (a method moved to another path or verb), the provider settings or
//! the statement's values changed it.

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use super::document::{Method, Param, ParamLocation, Resource};
use super::error::Result;
use super::preview::{self, PREVIEW_REQUESTS};
use super::request_body::{BodyTemplate, typed};
use super::sql::Source;
use super::types::{ExecContext, PlannedWrite};
use super::upstream::{AuthParts, Leg, LegBody, Scrubber, unsigned_wire};

/// One table a SELECT reads, as planned.
pub(crate) struct ReadJob<'a> {
    pub(crate) resource: &'a Resource,
    pub(crate) method: &'a Method,
    pub(crate) base_url: Option<&'a str>,
    /// The parameters the statement supplies, and where their values come from.
    pub(crate) params: &'a [(Param, Source)],
    /// OData options pushed down to every request.
    pub(crate) pushdown: &'a [(Param, String)],
    /// How the request body is made, when the operation takes one.
    pub(crate) body: Option<&'a BodyTemplate>,
}

/// The values one parameter takes, as the digest covers them.
fn values_of(source: &Source) -> (Vec<String>, Option<String>) {
    match source {
        Source::Literals(literals) => (literals.iter().map(|l| l.text.clone()).collect(), None),
        Source::Constant(sql) => (Vec::new(), Some(format!("constant:{sql}"))),
        Source::Column { occurrence, column } => {
            (Vec::new(), Some(format!("column:{occurrence}.{column}")))
        }
        Source::Expr { occurrence, sql } => (Vec::new(), Some(format!("expr:{occurrence}:{sql}"))),
    }
}

/// The plan of one table of a held SELECT (see the module).
pub(crate) fn planned_read(cx: &ExecContext, job: &ReadJob<'_>) -> Result<PlannedWrite> {
    let mut hasher = Sha256::new();
    let mut piece = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    piece(b"querygate-read-plan/v2");
    let resource = job.resource.full_name();
    piece(resource.as_bytes());
    piece(job.method.name.as_bytes());
    piece(job.method.documents_sha256.as_bytes());
    piece(job.method.http_method.as_bytes());
    let mut requests = 1usize;
    let mut first: Vec<(&Param, String)> = Vec::with_capacity(job.params.len());
    for (param, source) in job.params {
        let (values, runtime) = values_of(source);
        piece(param.name.as_bytes());
        piece(param.location.as_str().as_bytes());
        for value in &values {
            piece(value.as_bytes());
        }
        if let Some(runtime) = &runtime {
            piece(runtime.as_bytes());
            requests = 0;
        } else {
            requests = requests.saturating_mul(values.len().max(1));
        }
        let shown = values
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{{{}}}", param.name));
        first.push((param, shown));
    }
    for (param, value) in job.pushdown {
        piece(param.name.as_bytes());
        piece(value.as_bytes());
    }
    let body = job.body.and_then(|template| {
        let fields = first
            .iter()
            .filter(|(p, _)| p.location == ParamLocation::Body)
            .map(|(p, v)| (p.body_path.clone(), typed(v, p.type_name.as_deref())))
            .collect();
        template.render(fields).map(|json| LegBody {
            media_type: template.media_type.clone(),
            json,
        })
    });
    let unsigned = AuthParts::default();
    let leg = Leg {
        method: job.method,
        base_url: job.base_url,
        values: first
            .iter()
            .filter(|(p, _)| p.location != ParamLocation::Body)
            .map(|(p, v)| (*p, v.clone()))
            .chain(job.pushdown.iter().map(|(p, v)| (p, v.clone())))
            .collect(),
        body: None,
        auth: &unsigned,
        credentials: cx.credentials.as_ref(),
        tenant: &cx.tenant,
        deadline: cx.deadline,
        admission: None,
    };
    let wire_body = body
        .as_ref()
        .map(|b| (b.media_type.as_str(), Bytes::from(b.json.to_string())));
    let media_type = body
        .as_ref()
        .map(|b| b.media_type.clone())
        .unwrap_or_default();
    let wire = unsigned_wire(&leg, wire_body)?;
    piece(wire.url.as_bytes());
    for (name, value) in &wire.headers {
        piece(name.as_bytes());
        piece(value.as_bytes());
    }
    piece(wire.body.as_deref().unwrap_or_default());
    let secrets = Scrubber::new(&unsigned, cx.credentials.as_ref());
    let previews = if PREVIEW_REQUESTS > 0 {
        vec![preview::preview(wire, &media_type, &secrets)]
    } else {
        Vec::new()
    };
    let digest = hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(PlannedWrite {
        verb: "SELECT".to_owned(),
        provider: job.resource.provider.clone(),
        resource,
        method: job.method.name.clone(),
        requests,
        digest,
        previews,
    })
}
