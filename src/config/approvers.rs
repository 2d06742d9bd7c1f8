//! Approver rules against the rest of the configuration: each names a configured tenant, and
//! each issuer its names are bound to is a trusted issuer that may name that tenant.

use std::collections::BTreeSet;

use super::principal_name::{GroupName, PrincipalName};
use super::problems::Problems;
use super::{ApprovalConfig, ApprovalStoreKind, AuthConfig};

/// Checks `approval.approvers[]` against the tenants and `auth.jwt.issuers[]`.
pub(super) fn check_approvers(
    approval: &ApprovalConfig,
    auth: &AuthConfig,
    tenant_ids: &BTreeSet<String>,
    problems: &mut Problems,
) {
    let issuers: Vec<_> = auth.jwt.iter().flat_map(|jwt| jwt.issuers.iter()).collect();
    for (i, rule) in approval.approvers.iter().enumerate() {
        let key = format!("approval.approvers[{i}]");
        if !tenant_ids.contains(&rule.tenant) {
            problems.push(
                format!("{key}.tenant"),
                format!("'{}' is not a configured tenant", rule.tenant),
            );
        }
        let named = rule
            .subjects
            .iter()
            .filter_map(|s| {
                let name = PrincipalName::parse(s).ok()?;
                Some(("subjects", name.issuer()?.to_owned()))
            })
            .chain(
                rule.groups
                    .iter()
                    .filter_map(|g| Some(("groups", GroupName::parse(g).ok()?.issuer))),
            )
            .chain(rule.issuer.iter().map(|i| ("issuer", i.clone())));
        for (field, issuer) in named {
            match issuers.iter().find(|trusted| trusted.issuer == issuer) {
                None => problems.push(
                    format!("{key}.{field}"),
                    format!(
                        "names issuer '{issuer}', which is not one of auth.jwt.issuers[].issuer (its tokens are never accepted)"
                    ),
                ),
                Some(trusted) if !trusted.tenants.contains(&rule.tenant) => problems.push(
                    format!("{key}.{field}"),
                    format!(
                        "names issuer '{issuer}', whose tokens may not name tenant '{}' (auth.jwt.issuers[].tenants)",
                        rule.tenant
                    ),
                ),
                Some(_) => {}
            }
        }
    }
}

/// Out-of-band approval that nobody could ever decide is refused: without authentication no
/// caller of the API or the page can, and with the memory store the CLI (another process)
/// does not see the approvals either.
pub(super) fn check_deciders(
    approval: &ApprovalConfig,
    auth: &AuthConfig,
    problems: &mut Problems,
) {
    let authenticated = auth.jwt.is_some() || auth.mtls.is_some();
    if approval.out_of_band_enabled()
        && !authenticated
        && approval.store == ApprovalStoreKind::Memory
    {
        problems.push(
            "approval.out_of_band",
            "is on, but nobody could decide: without authentication (auth.jwt or auth.mtls) no caller of the approval API or page is known, and with approval.store: memory `querygate approvals` (another process) cannot see this process's approvals; configure auth, or approval.store: postgres (with database:)",
        );
    }
}
