//! The mode gate's decisions, as pure functions: what a tenant's [`Mode`] lets a call of a
//! given [`QueryClass`] do. No I/O and no logging here: the tool-call pipeline's gate layer,
//! `server_info` and the tool annotations all read these tables.
//!
//! The classes and the decision table are StackQL's (`select`, `mutation_create`,
//! `mutation_delete`, `lifecycle`, `unknown`; `read_only`, `safe`, `delete_safe`,
//! `full_access`), but that `unknown` is refused in every mode ([`decide`]). Classes come from
//! the engine's parse of the statement that will run, never from its first word.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::engine::{ParsedSql, StatementKind};

/// What a tenant's calls may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reads only; every write is refused.
    ReadOnly,
    /// Reads; every write after a person approves it (the default, as in StackQL).
    #[default]
    Safe,
    /// Reads and creating or changing writes; deletes, EXEC and unclassifiable statements
    /// after approval.
    DeleteSafe,
    /// Everything, without approval.
    FullAccess,
}

impl Mode {
    /// Every mode, from the most to the least restrictive.
    pub const ALL: [Mode; 4] = [
        Mode::ReadOnly,
        Mode::Safe,
        Mode::DeleteSafe,
        Mode::FullAccess,
    ];

    /// `read_only`, `safe`, `delete_safe` or `full_access`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read_only",
            Mode::Safe => "safe",
            Mode::DeleteSafe => "delete_safe",
            Mode::FullAccess => "full_access",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call would do, for the gate and the audit log. Ordered from the least to the most
/// dangerous: a text made of several parts takes the class of its most dangerous part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryClass {
    /// Reads only (SELECT, SHOW, DESCRIBE, REGISTRY LIST, and every tool without SQL that
    /// changes nothing).
    Select,
    /// INSERT, UPDATE (PATCH) or REPLACE (PUT).
    MutationCreate,
    /// DELETE.
    MutationDelete,
    /// EXEC of a provider method (it may do anything the method does).
    Lifecycle,
    /// Anything that cannot be classified: unparseable text, several statements, DML carried
    /// inside a query, statements no SQL tool runs.
    Unknown,
}

impl QueryClass {
    /// Every class, from the least to the most dangerous.
    pub const ALL: [QueryClass; 5] = [
        QueryClass::Select,
        QueryClass::MutationCreate,
        QueryClass::MutationDelete,
        QueryClass::Lifecycle,
        QueryClass::Unknown,
    ];

    /// The audit string: `select`, `mutation_create`, `mutation_delete`, `lifecycle`,
    /// `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryClass::Select => "select",
            QueryClass::MutationCreate => "mutation_create",
            QueryClass::MutationDelete => "mutation_delete",
            QueryClass::Lifecycle => "lifecycle",
            QueryClass::Unknown => "unknown",
        }
    }

    /// The class of one statement kind, as the engine parsed it.
    pub fn of_kind(kind: StatementKind) -> QueryClass {
        match kind {
            StatementKind::Select | StatementKind::Metadata | StatementKind::RegistryList => {
                QueryClass::Select
            }
            StatementKind::Insert | StatementKind::Update | StatementKind::Replace => {
                QueryClass::MutationCreate
            }
            StatementKind::Delete => QueryClass::MutationDelete,
            StatementKind::Exec => QueryClass::Lifecycle,
            // Installing provider documents is pull_provider's job; as SQL no tool runs it.
            StatementKind::RegistryPull => QueryClass::Unknown,
        }
    }
}

impl fmt::Display for QueryClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JWT scope of each query class (`auth.jwt.enforce_query_scopes`):
///
/// | class             | scope needed                                        |
/// |-------------------|-----------------------------------------------------|
/// | `select`          | `querygate:read`                                    |
/// | `mutation_create` | `querygate:write`                                   |
/// | `mutation_delete` | `querygate:delete`                                  |
/// | `lifecycle`       | `querygate:exec`                                    |
/// | `unknown`         | `querygate:write`, `querygate:delete` and `querygate:exec` |
///
/// An unclassifiable statement may be any write, so it needs every write scope (fail
/// closed). A SELECT bound to a POST… method is `lifecycle`, so it needs `querygate:exec`.
pub const QUERY_SCOPES: [(QueryClass, &[&str]); 5] = [
    (QueryClass::Select, &[SCOPE_READ]),
    (QueryClass::MutationCreate, &[SCOPE_WRITE]),
    (QueryClass::MutationDelete, &[SCOPE_DELETE]),
    (QueryClass::Lifecycle, &[SCOPE_EXEC]),
    (
        QueryClass::Unknown,
        &[SCOPE_WRITE, SCOPE_DELETE, SCOPE_EXEC],
    ),
];

/// The scope of reads.
pub const SCOPE_READ: &str = "querygate:read";
/// The scope of INSERT, UPDATE and REPLACE (and of `pull_provider`).
pub const SCOPE_WRITE: &str = "querygate:write";
/// The scope of DELETE.
pub const SCOPE_DELETE: &str = "querygate:delete";
/// The scope of EXEC.
pub const SCOPE_EXEC: &str = "querygate:exec";

/// Every query scope, in the order of [`QUERY_SCOPES`] (for `scopes_supported`).
pub const ALL_QUERY_SCOPES: [&str; 4] = [SCOPE_READ, SCOPE_WRITE, SCOPE_DELETE, SCOPE_EXEC];

/// The scopes a call of `class` needs (see [`QUERY_SCOPES`]).
pub fn required_scopes(class: QueryClass) -> &'static [&'static str] {
    match class {
        QueryClass::Select => &[SCOPE_READ],
        QueryClass::MutationCreate => &[SCOPE_WRITE],
        QueryClass::MutationDelete => &[SCOPE_DELETE],
        QueryClass::Lifecycle => &[SCOPE_EXEC],
        QueryClass::Unknown => &[SCOPE_WRITE, SCOPE_DELETE, SCOPE_EXEC],
    }
}

/// The scopes of `required` that `granted` lacks (empty: the call may go on).
pub fn missing_scopes<'a>(
    required: &[&'a str],
    granted: &std::collections::BTreeSet<String>,
) -> Vec<&'a str> {
    required
        .iter()
        .copied()
        .filter(|scope| !granted.contains(*scope))
        .collect()
}

/// Why the gate holds or refuses a call: the tenant's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason {
    /// The mode that decided.
    pub mode: Mode,
}

impl fmt::Display for Reason {
    /// StackQL's reason phrase: `server is in 'read_only' mode`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server is in '{}' mode", self.mode)
    }
}

/// The mode's verdict on one call, before anyone is asked: the gate turns it into the
/// call's [`Decision`](crate::audit::Decision) (allowed, refused, or how its approval ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Run it only after a person approves this very call.
    NeedsApproval(Reason),
    /// Never run it in this mode.
    Refuse(Reason),
}

impl Verdict {
    /// `allow`, `needs_approval` or `refuse_immediate` (StackQL's strings).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::NeedsApproval(_) => "needs_approval",
            Verdict::Refuse(_) => "refuse_immediate",
        }
    }
}

/// StackQL's decision table, but that `unknown` is refused in every mode: no tool runs a
/// statement that cannot be classified (the gate refuses it as no tool's before it asks
/// this table), so the tools that report the table's verdict (`validate_select_query`,
/// `validate_mutation_query`) say so too.
///
/// | mode \ class  | select | mutation_create | mutation_delete | lifecycle | unknown |
/// |---------------|--------|-----------------|-----------------|-----------|---------|
/// | `read_only`   | allow  | refuse          | refuse          | refuse    | refuse  |
/// | `safe`        | allow  | approval        | approval        | approval  | refuse  |
/// | `delete_safe` | allow  | allow           | approval        | approval  | refuse  |
/// | `full_access` | allow  | allow           | allow           | allow     | refuse  |
pub fn decide(mode: Mode, class: QueryClass) -> Verdict {
    let reason = Reason { mode };
    match (mode, class) {
        (_, QueryClass::Select) => Verdict::Allow,
        (_, QueryClass::Unknown) | (Mode::ReadOnly, _) => Verdict::Refuse(reason),
        (Mode::FullAccess, _) | (Mode::DeleteSafe, QueryClass::MutationCreate) => Verdict::Allow,
        (Mode::Safe | Mode::DeleteSafe, _) => Verdict::NeedsApproval(reason),
    }
}

/// The class of a text from the engine's parse of each of its statements: the most
/// dangerous part wins; a statement that does not parse is `unknown`, and so is one that
/// carries other statements inside it (a CTE carrying a DELETE, …).
pub fn classify(parsed: &ParsedSql) -> QueryClass {
    class_of_parts(parsed.parts().iter().map(|part| {
        part.as_ref()
            .ok()
            .map(|statement| (statement.kind(), statement.nests_statements()))
    }))
}

/// [`classify`] over each part's kind and whether it nests statements (`None`: it did not
/// parse).
fn class_of_parts(parts: impl IntoIterator<Item = Option<(StatementKind, bool)>>) -> QueryClass {
    parts
        .into_iter()
        .map(|part| match part {
            Some((kind, false)) => QueryClass::of_kind(kind),
            Some((_, true)) | None => QueryClass::Unknown,
        })
        .max()
        .unwrap_or(QueryClass::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_and_class_pair_follows_stackqls_table_but_unknown_is_refused() {
        use QueryClass::*;
        use Verdict::*;
        let allow = Allow;
        for mode in Mode::ALL {
            let r = Reason { mode };
            let expected = match mode {
                Mode::ReadOnly => [allow, Refuse(r), Refuse(r), Refuse(r), Refuse(r)],
                Mode::Safe => [
                    allow,
                    NeedsApproval(r),
                    NeedsApproval(r),
                    NeedsApproval(r),
                    Refuse(r),
                ],
                Mode::DeleteSafe => [allow, allow, NeedsApproval(r), NeedsApproval(r), Refuse(r)],
                Mode::FullAccess => [allow, allow, allow, allow, Refuse(r)],
            };
            for (class, want) in [Select, MutationCreate, MutationDelete, Lifecycle, Unknown]
                .into_iter()
                .zip(expected)
            {
                assert_eq!(decide(mode, class), want, "{mode} × {class}");
            }
        }
    }

    #[test]
    fn every_class_has_the_scopes_of_the_documented_table() {
        for (class, scopes) in QUERY_SCOPES {
            assert_eq!(required_scopes(class), scopes, "{class}");
        }
        assert_eq!(QUERY_SCOPES.len(), QueryClass::ALL.len());
        let granted = ["querygate:read".to_owned(), "querygate:exec".to_owned()].into();
        assert!(missing_scopes(required_scopes(QueryClass::Select), &granted).is_empty());
        assert_eq!(
            missing_scopes(required_scopes(QueryClass::Unknown), &granted),
            ["querygate:write", "querygate:delete"]
        );
    }

    #[test]
    fn reasons_read_like_stackqls() {
        assert_eq!(
            Reason {
                mode: Mode::ReadOnly
            }
            .to_string(),
            "server is in 'read_only' mode"
        );
        assert_eq!(
            Verdict::Refuse(Reason { mode: Mode::Safe }).as_str(),
            "refuse_immediate"
        );
    }

    #[test]
    fn the_most_dangerous_part_wins() {
        use StatementKind as K;
        let c = |parts: &[Option<(K, bool)>]| class_of_parts(parts.iter().copied());
        assert_eq!(c(&[Some((K::Select, false))]), QueryClass::Select);
        assert_eq!(
            c(&[Some((K::Select, false)), Some((K::Delete, false))]),
            QueryClass::MutationDelete
        );
        assert_eq!(
            c(&[Some((K::Insert, false)), Some((K::Select, false))]),
            QueryClass::MutationCreate
        );
        assert_eq!(c(&[Some((K::Select, true))]), QueryClass::Unknown);
        assert_eq!(c(&[Some((K::Select, false)), None]), QueryClass::Unknown);
        assert_eq!(c(&[]), QueryClass::Unknown);
    }

    #[test]
    fn modes_and_classes_spell_their_config_and_audit_names() {
        for mode in Mode::ALL {
            let parsed: Mode =
                serde_json::from_value(serde_json::Value::from(mode.as_str())).unwrap();
            assert_eq!(parsed, mode);
        }
        let names: Vec<&str> = QueryClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "select",
                "mutation_create",
                "mutation_delete",
                "lifecycle",
                "unknown"
            ]
        );
    }
}
