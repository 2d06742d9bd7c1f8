//! What the YAML file and environment may say: the top level and the enums several sections
//! share. Each section's own serde types live in its file; unknown keys are refused.

use std::collections::HashMap;

use serde::Deserialize;

use super::limits::RawLimits;
use super::providers::RawProvider;
use super::registry::RawRegistry;
use super::server::RawServer;
use super::tenants::{RawCredentials, RawTenant};
use super::upstream::RawUpstream;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) registry: RawRegistry,
    #[serde(default)]
    pub(super) providers: HashMap<String, RawProvider>,
    #[serde(default)]
    pub(super) upstream: RawUpstream,
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) credentials: RawCredentials,
    #[serde(default)]
    pub(super) tenants: Vec<RawTenant>,
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) approval: super::approval::RawApproval,
    #[serde(default)]
    pub(super) database: super::database::RawDatabase,
    #[serde(default)]
    pub(super) auth: super::identity::RawAuth,
    #[serde(default)]
    pub(super) audit: super::audit::RawAudit,
    #[serde(default)]
    pub(super) log: super::telemetry::RawLog,
    #[serde(default)]
    pub(super) telemetry: super::telemetry::RawTelemetry,
    #[serde(default)]
    pub(super) quotas: super::quotas::RawQuotas,
    #[serde(default)]
    pub(super) tasks: super::tasks::RawTasks,
}

/// How text content of tool results is rendered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Render {
    /// Markdown tables and key/value blocks.
    #[default]
    Markdown,
    /// Compact JSON of the structured result.
    Json,
}
