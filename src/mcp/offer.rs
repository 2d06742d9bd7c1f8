//! What the server offers: every name of `server.enabled_tools`, `enabled_prompts` and
//! `enabled_resources` must be one the server has, checked once at start.

use super::StartError;
use super::content::Content;
use super::tools::CATALOGUE;
use crate::config::ServerConfig;

/// Checks the embedded content against the tool catalogue, and each allowlist of `server`
/// against what the server has.
pub(super) fn check_offered(content: &Content, server: &ServerConfig) -> Result<(), StartError> {
    let all: Vec<&str> = CATALOGUE.iter().map(|t| t.name).collect();
    content.check_tools(&all)?;
    check_allowlist(
        "enabled_tools",
        "tools",
        server.enabled_tools.as_deref(),
        &all,
    )?;
    let prompts: Vec<&str> = content.prompts.iter().map(|p| p.name.as_str()).collect();
    check_allowlist(
        "enabled_prompts",
        "prompts",
        server.enabled_prompts.as_deref(),
        &prompts,
    )?;
    let resources: Vec<&str> = content.resources.iter().map(|r| r.name.as_str()).collect();
    check_allowlist(
        "enabled_resources",
        "resources",
        server.enabled_resources.as_deref(),
        &resources,
    )
}

/// Refuses the first name of `names` that is not in `known`.
fn check_allowlist(
    list: &'static str,
    kind: &'static str,
    names: Option<&[String]>,
    known: &[&str],
) -> Result<(), StartError> {
    for name in names.unwrap_or_default() {
        if !known.contains(&name.as_str()) {
            return Err(StartError::UnknownName {
                list,
                name: name.clone(),
                kind,
                known: known.join(", "),
            });
        }
    }
    Ok(())
}
