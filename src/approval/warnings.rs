//! What a person starting the server should know about its approval settings: said once at
//! start, on stderr and in the log. Pure: reads the configuration only.

use crate::config::{Config, OutOfBand};

/// The warnings of `config`'s approval settings, each one sentence with the key to change.
pub fn start_warnings(config: &Config) -> Vec<String> {
    let approval = &config.approval;
    let mut warnings = Vec::new();
    if approval.out_of_band == OutOfBand::Fallback && approval.require_distinct_approver {
        warnings.push(
            "approval.out_of_band is fallback: clients that can be asked in the call (MCP 2026-07-28, and stdio clients with elicitation) are asked there, so the person at that client approves its own call and approval.require_distinct_approver holds only for out-of-band decisions; set approval.out_of_band: always to have every approval decided by an approver".to_owned(),
        );
    }
    let authenticated = config.auth.jwt.is_some() || config.auth.mtls.is_some();
    if approval.out_of_band_enabled() && !authenticated {
        warnings.push(
            "approval.out_of_band is on without authentication (auth.jwt or auth.mtls): no caller of the approval API or page can decide, so out-of-band approvals are decided only with querygate approvals on a machine that reaches approval.store".to_owned(),
        );
    }
    warnings
}
