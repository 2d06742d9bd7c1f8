//! `quotas:` (where the counters live, how many calls a replica leases at once, what happens
//! when the shared store cannot be reached) and each tenant's `tenants[].quotas` (calls per
//! window by query class, for the tenant as a whole and for each of its principals).

use std::time::Duration;

use serde::Deserialize;

use super::problems::Problems;
use crate::policy::QueryClass;

/// `quotas:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuotas {
    #[serde(default)]
    store: Option<QuotaStoreKind>,
    #[serde(default)]
    lease: Option<u64>,
    #[serde(default)]
    on_store_failure: Option<StoreFailure>,
}

/// A tenant's `quotas:`: one rate per class, and the same per principal.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenantQuotas {
    #[serde(default)]
    read: Option<String>,
    #[serde(default)]
    write: Option<String>,
    #[serde(default)]
    delete: Option<String>,
    #[serde(default)]
    exec: Option<String>,
    #[serde(default)]
    per_principal: Option<RawClassQuotas>,
}

/// `read`, `write`, `delete`, `exec`: each `<calls>/<window>`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClassQuotas {
    #[serde(default)]
    read: Option<String>,
    #[serde(default)]
    write: Option<String>,
    #[serde(default)]
    delete: Option<String>,
    #[serde(default)]
    exec: Option<String>,
}

/// Where quota counters live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaStoreKind {
    /// In this process: each replica counts alone.
    Memory,
    /// In the `database:` PostgreSQL, shared by every replica.
    Postgres,
}

/// What a call that needs a quota counter gets while the shared store cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreFailure {
    /// Reads run (logged and counted); writes, deletes and EXECs are refused.
    #[default]
    ReadsOpen,
    /// Every call runs (logged and counted).
    Open,
    /// Every call under a quota is refused.
    Closed,
}

impl StoreFailure {
    /// Whether a call of `class` runs while the store is unreachable.
    pub fn admits(self, class: QuotaClass) -> bool {
        match self {
            StoreFailure::Open => true,
            StoreFailure::Closed => false,
            StoreFailure::ReadsOpen => class == QuotaClass::Read,
        }
    }

    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreFailure::ReadsOpen => "reads_open",
            StoreFailure::Open => "open",
            StoreFailure::Closed => "closed",
        }
    }
}

/// The query classes quotas count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaClass {
    /// SELECT and the other reads.
    Read,
    /// INSERT, UPDATE, REPLACE.
    Write,
    /// DELETE.
    Delete,
    /// EXEC, and anything that is not one of the above.
    Exec,
}

impl QuotaClass {
    /// Every class.
    pub const ALL: [QuotaClass; 4] = [
        QuotaClass::Read,
        QuotaClass::Write,
        QuotaClass::Delete,
        QuotaClass::Exec,
    ];

    /// The class a statement's query class counts under (`unknown` as `exec`, the strictest).
    pub fn of(class: QueryClass) -> Self {
        match class {
            QueryClass::Select => QuotaClass::Read,
            QueryClass::MutationCreate => QuotaClass::Write,
            QueryClass::MutationDelete => QuotaClass::Delete,
            QueryClass::Lifecycle | QueryClass::Unknown => QuotaClass::Exec,
        }
    }

    /// The configuration key and metric label: `read`, `write`, `delete`, `exec`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaClass::Read => "read",
            QuotaClass::Write => "write",
            QuotaClass::Delete => "delete",
            QuotaClass::Exec => "exec",
        }
    }
}

/// A number of calls per fixed window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Calls admitted in one window.
    pub limit: u64,
    /// The window: one second, minute or hour.
    pub window: Duration,
}

impl Quota {
    /// The largest `limit` accepted.
    pub const MAX_LIMIT: u64 = 1_000_000_000;

    /// Parses `<calls>/<window>`: `600/min`, `10/s`, `5000/hour`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (count, unit) = text.split_once('/').ok_or_else(|| {
            format!(
                "'{}' is not <calls>/<window> (e.g. 600/min)",
                text.escape_debug()
            )
        })?;
        let limit: u64 = count.trim().parse().map_err(|_| {
            format!(
                "'{}': the count must be a whole number",
                text.escape_debug()
            )
        })?;
        if limit == 0 || limit > Self::MAX_LIMIT {
            return Err(format!(
                "'{}': the count must be 1 to {} (leave the class out for no quota)",
                text.escape_debug(),
                Self::MAX_LIMIT
            ));
        }
        let seconds = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            _ => {
                return Err(format!(
                    "'{}': the window must be s, min or hour",
                    text.escape_debug()
                ));
            }
        };
        Ok(Quota {
            limit,
            window: Duration::from_secs(seconds),
        })
    }
}

/// One quota per class (`None`: not limited).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassQuotas {
    /// `read`.
    pub read: Option<Quota>,
    /// `write`.
    pub write: Option<Quota>,
    /// `delete`.
    pub delete: Option<Quota>,
    /// `exec`.
    pub exec: Option<Quota>,
}

impl ClassQuotas {
    /// The quota of `class`.
    pub fn of(&self, class: QuotaClass) -> Option<Quota> {
        match class {
            QuotaClass::Read => self.read,
            QuotaClass::Write => self.write,
            QuotaClass::Delete => self.delete,
            QuotaClass::Exec => self.exec,
        }
    }

    /// Whether no class is limited.
    pub fn is_empty(&self) -> bool {
        *self == ClassQuotas::default()
    }
}

/// A tenant's quotas (`tenants[].quotas`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantQuotas {
    /// Calls of the whole tenant, all principals together.
    pub tenant: ClassQuotas,
    /// Calls of each principal of the tenant (`per_principal`).
    pub per_principal: ClassQuotas,
}

impl TenantQuotas {
    /// Whether the tenant has no quota at all.
    pub fn is_empty(&self) -> bool {
        self.tenant.is_empty() && self.per_principal.is_empty()
    }
}

/// Validated `quotas:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaConfig {
    /// Where the counters live: `postgres` by default when `database:` is configured,
    /// else `memory`.
    pub store: QuotaStoreKind,
    /// Calls a replica takes from the shared counter in one round trip (`quotas.lease`,
    /// default 10), capped at a tenth of the quota (at least 1).
    pub lease: u64,
    /// What happens while the shared store cannot be reached (`quotas.on_store_failure`).
    pub on_store_failure: StoreFailure,
}

impl QuotaConfig {
    /// The default `quotas.lease`.
    pub const DEFAULT_LEASE: u64 = 10;
    /// The largest `quotas.lease` accepted.
    pub const MAX_LEASE: u64 = 1000;

    /// The calls leased at once under `quota`: `lease`, at most a tenth of the quota, at
    /// least 1. Always 1 in memory, where taking one costs nothing.
    pub fn lease_for(&self, quota: Quota) -> u64 {
        match self.store {
            QuotaStoreKind::Memory => 1,
            QuotaStoreKind::Postgres => self.lease.min(quota.limit / 10).max(1),
        }
    }
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            store: QuotaStoreKind::Memory,
            lease: Self::DEFAULT_LEASE,
            on_store_failure: StoreFailure::default(),
        }
    }
}

/// Checks `quotas:`; `database` tells whether `database:` is configured.
pub(super) fn check_quotas(raw: RawQuotas, database: bool, problems: &mut Problems) -> QuotaConfig {
    let store = raw.store.unwrap_or(if database {
        QuotaStoreKind::Postgres
    } else {
        QuotaStoreKind::Memory
    });
    if store == QuotaStoreKind::Postgres && !database {
        problems.push(
            "quotas.store",
            "postgres needs database.url or database.url_file",
        );
    }
    let lease = raw.lease.unwrap_or(QuotaConfig::DEFAULT_LEASE);
    if lease == 0 || lease > QuotaConfig::MAX_LEASE {
        problems.push(
            "quotas.lease",
            format!("{lease} is out of range: 1 to {}", QuotaConfig::MAX_LEASE),
        );
    }
    QuotaConfig {
        store,
        lease: lease.clamp(1, QuotaConfig::MAX_LEASE),
        on_store_failure: raw.on_store_failure.unwrap_or_default(),
    }
}

/// Checks a tenant's `quotas:` (at `key`, e.g. `tenants[1].quotas`).
pub(super) fn check_tenant_quotas(
    key: &str,
    raw: Option<RawTenantQuotas>,
    problems: &mut Problems,
) -> TenantQuotas {
    let Some(raw) = raw else {
        return TenantQuotas::default();
    };
    let own = RawClassQuotas {
        read: raw.read,
        write: raw.write,
        delete: raw.delete,
        exec: raw.exec,
    };
    let tenant = check_classes(key, own, problems);
    let per_principal = match raw.per_principal {
        Some(classes) => check_classes(&format!("{key}.per_principal"), classes, problems),
        None => ClassQuotas::default(),
    };
    for class in QuotaClass::ALL {
        if let (Some(all), Some(one)) = (tenant.of(class), per_principal.of(class))
            && all.window == one.window
            && one.limit > all.limit
        {
            problems.push(
                format!("{key}.per_principal.{}", class.as_str()),
                format!(
                    "{} per principal is more than the tenant's {} in the same window",
                    one.limit, all.limit
                ),
            );
        }
    }
    TenantQuotas {
        tenant,
        per_principal,
    }
}

fn check_classes(key: &str, raw: RawClassQuotas, problems: &mut Problems) -> ClassQuotas {
    let mut one = |name: &str, text: Option<String>| {
        let text = text?;
        Quota::parse(&text)
            .map_err(|message| problems.push(format!("{key}.{name}"), message))
            .ok()
    };
    ClassQuotas {
        read: one("read", raw.read),
        write: one("write", raw.write),
        delete: one("delete", raw.delete),
        exec: one("exec", raw.exec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_their_window_and_bad_ones_are_named() {
        assert_eq!(
            Quota::parse("600/min"),
            Ok(Quota {
                limit: 600,
                window: Duration::from_secs(60)
            })
        );
        assert_eq!(Quota::parse("10/s").unwrap().window, Duration::from_secs(1));
        assert_eq!(
            Quota::parse(" 5 / hour").unwrap().window,
            Duration::from_secs(3600)
        );
        for bad in ["600", "0/min", "x/min", "5/day", "-1/s"] {
            assert!(Quota::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_lease_is_a_tenth_of_the_quota_at_most_and_one_in_memory() {
        let config = QuotaConfig {
            store: QuotaStoreKind::Postgres,
            ..QuotaConfig::default()
        };
        let quota = |limit| Quota {
            limit,
            window: Duration::from_secs(60),
        };
        assert_eq!(config.lease_for(quota(600)), 10);
        assert_eq!(config.lease_for(quota(30)), 3);
        assert_eq!(config.lease_for(quota(5)), 1);
        assert_eq!(QuotaConfig::default().lease_for(quota(600)), 1);
    }

    #[test]
    fn postgres_needs_a_database_and_per_principal_fits_the_tenant() {
        let mut problems = Problems::default();
        let raw = RawQuotas {
            store: Some(QuotaStoreKind::Postgres),
            lease: Some(0),
            on_store_failure: None,
        };
        check_quotas(raw, false, &mut problems);
        let raw = RawTenantQuotas {
            write: Some("3/min".into()),
            per_principal: Some(RawClassQuotas {
                write: Some("5/min".into()),
                read: Some("lots".into()),
                ..RawClassQuotas::default()
            }),
            ..RawTenantQuotas::default()
        };
        check_tenant_quotas("tenants[0].quotas", Some(raw), &mut problems);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "quotas.store: postgres needs database.url or database.url_file",
                "quotas.lease: 0 is out of range: 1 to 1000",
                "tenants[0].quotas.per_principal.read: 'lots' is not <calls>/<window> (e.g. 600/min)",
                "tenants[0].quotas.per_principal.write: 5 per principal is more than the tenant's 3 in the same window",
            ]
        );
    }

    #[test]
    fn the_store_defaults_to_postgres_with_a_database() {
        let mut problems = Problems::default();
        assert_eq!(
            check_quotas(RawQuotas::default(), true, &mut problems).store,
            QuotaStoreKind::Postgres
        );
        assert_eq!(
            check_quotas(RawQuotas::default(), false, &mut problems).store,
            QuotaStoreKind::Memory
        );
        assert!(problems.is_empty());
    }
}
