//! What a prepared write would send, as the plan an approval binds to: its digest (the
//! requests as sent, before auth, and the documents they were read from) and what a person
//! is shown of each request, secrets masked.

use super::*;

/// What a prepared write would send, once its provider's credential material is known to
/// be present.
pub(super) fn planned(cx: &ExecContext, prepared: &Prepared, verb: &str) -> Result<PlannedWrite> {
    let provider = &prepared.resource.provider;
    check_provider_material(provider, &prepared.auth, cx.credentials.as_ref())
        .map_err(|cause| credential_error(provider, &cause))?;
    let method = prepared.method();
    let resource = prepared.resource.full_name();
    // Each piece length-prefixed, so no two different plans hash alike.
    let mut hasher = Sha256::new();
    let mut piece = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    piece(b"querygate-plan/v2");
    piece(resource.as_bytes());
    piece(method.name.as_bytes());
    // The documents the method was read from: another replica's other documents plan
    // another digest, even for the same requests.
    piece(method.documents_sha256.as_bytes());
    let unsigned = AuthParts::default();
    let secrets = Scrubber::new(&unsigned, cx.credentials.as_ref());
    let mut previews = Vec::new();
    for request in &prepared.requests {
        let leg = Leg {
            method,
            base_url: prepared.base_url.as_deref(),
            values: request.params.iter().map(|(p, v)| (p, v.clone())).collect(),
            body: None,
            auth: &unsigned,
            credentials: cx.credentials.as_ref(),
            tenant: &cx.tenant,
            deadline: cx.deadline,
            admission: None,
        };
        let (url, headers) = unsigned_request(&leg)?;
        piece(method.http_method.as_bytes());
        piece(url.as_bytes());
        for (name, value) in &headers {
            piece(name.as_bytes());
            piece(value);
        }
        let body = request
            .body
            .as_ref()
            .map(|b| b.to_string())
            .unwrap_or_default();
        piece(prepared.media_type.as_bytes());
        piece(body.as_bytes());
        if previews.len() < PREVIEW_REQUESTS {
            previews.push(request_preview(
                &leg,
                request,
                &prepared.media_type,
                &secrets,
            )?);
        }
    }
    let digest = hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(PlannedWrite {
        verb: verb.to_ascii_uppercase(),
        provider: provider.clone(),
        resource,
        method: method.name.clone(),
        requests: prepared.requests.len(),
        digest,
        previews,
    })
}

/// What a person is shown of `request` (sent as `leg`): built as it would be sent, but with
/// the values of secret-named path, query and header parameters as [`MASK`], then masked
/// by [`preview::preview`].
fn request_preview(
    leg: &Leg<'_>,
    request: &Request,
    media_type: &str,
    secrets: &Scrubber,
) -> Result<RequestPreview> {
    let shown = Leg {
        values: request
            .params
            .iter()
            .map(|(p, v)| {
                // A server variable is checked against its pattern: it keeps its value,
                // masked afterwards only if the credentials hold it.
                let masked = p.location != ParamLocation::Server && is_secret_name(&p.name);
                (p, if masked { MASK.to_owned() } else { v.clone() })
            })
            .collect(),
        body: None,
        ..*leg
    };
    let body = request
        .body
        .as_ref()
        .map(|b| (media_type, Bytes::from(b.to_string())));
    let wire = unsigned_wire(&shown, body)?;
    Ok(preview::preview(wire, media_type, secrets))
}
