//! Tenants: who a request runs for, and the [`ExecContext`] the engine receives for it.
//!
//! The HTTP stage's auth layer puts a [`Principal`] in the request extensions (stdio runs as
//! a local principal); the tool-call stage turns it into an `ExecContext` here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cedar::TenantPolicies;
use crate::config::{Config, Mode, TenantConfig};
use crate::engine::{CredentialStore, ExecContext};

pub use crate::auth::Principal;

/// Why a principal cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenantError {
    /// A tenant's Cedar policy files do not load or do not validate: each problem with its
    /// file and position.
    #[error("{}", problems.join("; "))]
    Policies {
        /// `tenants[<i>].policy_files: <file>:<line>:<column>: <what>`, one per problem.
        problems: Vec<String>,
    },
    /// The principal names a tenant the configuration does not have.
    #[error("unknown tenant '{0}'")]
    Unknown(String),
    /// A tenant's credential store could not be opened.
    #[error("tenant '{tenant}': {message}")]
    Credentials {
        /// The tenant.
        tenant: String,
        /// What failed, naming the file.
        message: String,
    },
}

/// The configured tenants, their credential stores and their Cedar policies.
#[derive(Debug, Clone)]
pub struct Tenants {
    tenants: HashMap<String, Tenant>,
}

/// One tenant as the server runs it.
#[derive(Debug, Clone)]
struct Tenant {
    config: TenantConfig,
    credentials: Arc<CredentialStore>,
    /// `None`: no `policy_files`, nothing asked.
    policies: Option<Arc<TenantPolicies>>,
}

impl Tenants {
    /// Opens every tenant's credential store: its env file (created empty with mode 0600
    /// when absent) and, for the tenant that opts in (`default` by default), the process
    /// environment. No tenant can read another's store. Loads and validates each tenant's
    /// Cedar policy files: a problem in any fails the whole, naming every problem.
    pub fn open(config: &Config) -> Result<Self, TenantError> {
        let mut tenants = HashMap::new();
        let mut problems = Vec::new();
        for (index, tenant) in config.tenants.iter().enumerate() {
            let policies = if tenant.policy_files.is_empty() {
                None
            } else {
                match TenantPolicies::open(
                    &tenant.id,
                    tenant.policy_files.clone(),
                    tenant.policy_reload_interval,
                ) {
                    Ok(policies) => Some(Arc::new(policies)),
                    Err(found) => {
                        problems.extend(
                            found
                                .iter()
                                .map(|p| format!("tenants[{index}].policy_files: {p}")),
                        );
                        None
                    }
                }
            };
            let store = match &tenant.env_file {
                Some(file) => CredentialStore::open(file, tenant.process_env).map_err(|err| {
                    TenantError::Credentials {
                        tenant: tenant.id.clone(),
                        message: err.message().to_owned(),
                    }
                })?,
                None if tenant.process_env => CredentialStore::process_env(),
                None => CredentialStore::empty(),
            }
            .with_aws_roles(tenant.aws_roles.clone())
            .with_token_exchanges(tenant.token_exchanges.clone());
            tenants.insert(
                tenant.id.clone(),
                Tenant {
                    config: tenant.clone(),
                    credentials: Arc::new(store),
                    policies,
                },
            );
        }
        if !problems.is_empty() {
            return Err(TenantError::Policies { problems });
        }
        Ok(Tenants { tenants })
    }

    /// Reloads each tenant's Cedar policies when their files change, for as long as they
    /// are in use (`tenants[].policy_reload_interval`). Needs a tokio runtime.
    pub fn watch_policies(&self) {
        for policies in self.tenants.values().filter_map(|t| t.policies.as_ref()) {
            policies.watch();
        }
    }

    /// A tenant's Cedar policies; `None` when it has none (or is unknown).
    pub fn policies(&self, tenant: &str) -> Option<&Arc<TenantPolicies>> {
        self.tenants.get(tenant)?.policies.as_ref()
    }

    /// The engine context for a principal's calls.
    pub fn context(&self, principal: &Principal) -> Result<ExecContext, TenantError> {
        let Tenant {
            config,
            credentials,
            ..
        } = self
            .tenants
            .get(&principal.tenant)
            .ok_or_else(|| TenantError::Unknown(principal.tenant.clone()))?;
        Ok(ExecContext {
            tenant: config.id.clone(),
            principal: principal.display_name(),
            allowed_providers: config.allowed_providers.clone(),
            credentials: credentials.clone(),
            slots: None,
            deadline: None,
            subject_token: principal.subject_token.clone(),
        })
    }

    /// Whether `principal` may call `tool`: the tenant's `allowed_tools` and the
    /// credential's scopes must both include it.
    pub fn allows_tool(&self, principal: &Principal, tool: &str) -> bool {
        self.tool_access(principal, tool) == ToolAccess::Allowed
    }

    /// What the tenant's `allowed_tools` and the credential's scopes say about `tool`.
    pub fn tool_access(&self, principal: &Principal, tool: &str) -> ToolAccess {
        let tenant_allows = self.tenants.get(&principal.tenant).is_some_and(|t| {
            t.config
                .allowed_tools
                .as_ref()
                .is_none_or(|tools| tools.contains(tool))
        });
        if !tenant_allows {
            ToolAccess::NotInTenantAllowlist
        } else if !principal.may_call(tool) {
            ToolAccess::NotInScopes
        } else {
            ToolAccess::Allowed
        }
    }

    /// A tenant's mode.
    pub fn mode(&self, tenant: &str) -> Option<Mode> {
        self.tenants.get(tenant).map(|t| t.config.mode)
    }

    /// A tenant's settings.
    pub fn config(&self, tenant: &str) -> Option<&TenantConfig> {
        self.tenants.get(tenant).map(|t| &t.config)
    }
}

/// Whether a caller may use a tool at all (before any mode decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAccess {
    /// Neither the tenant's `allowed_tools` nor the credential's scopes exclude it.
    Allowed,
    /// The tenant's `allowed_tools` does not name it.
    NotInTenantAllowlist,
    /// The credential's scopes do not grant it.
    NotInScopes,
}
