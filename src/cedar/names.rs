//! The principal and group names a policy writes must be typed
//! ([`crate::config::PrincipalName`], [`crate::config::GroupName`]): `Querygate::Principal::"alice"`
//! would match a token's `sub` of any issuer, so it is refused at load with its typed form.

use cedar_policy::Policy;
use serde_json::Value;

use crate::config::{GroupName, PrincipalName};

/// What is wrong with the names `policy` writes: one message per untyped name.
pub(super) fn untyped_names(policy: &Policy) -> Vec<String> {
    let Ok(json) = policy.to_json() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk(&json, &mut found);
    found
}

/// Every entity reference (`{"type": …, "id": …}`, in the scope or as a literal's
/// `__entity`) of a Principal or a Group, checked.
fn walk(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let (Some(Value::String(kind)), Some(Value::String(id))) =
                (map.get("type"), map.get("id"))
            {
                let problem = match kind.as_str() {
                    "Querygate::Principal" => PrincipalName::parse(id).err(),
                    "Querygate::Group" => GroupName::parse(id).err(),
                    _ => None,
                };
                if let Some(problem) = problem {
                    found.push(format!("{kind}::{}: {problem}", Value::String(id.clone())));
                }
            }
            map.values().for_each(|v| walk(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
        _ => {}
    }
}
