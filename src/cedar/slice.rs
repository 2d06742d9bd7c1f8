//! Slicing a tenant's policies at load, so that a request is evaluated only against the
//! policies that can apply to it: by action class, by the provider a policy requires and by
//! the subject it names.
//!
//! A policy *guards* on a provider or a subject when it cannot be satisfied, nor fail to
//! evaluate, for another one:
//! - its principal scope is `principal == Querygate::Principal::"n"` (typed name `n`);
//! - or its first condition is a `when` whose leading conjuncts (before any other) include
//!   `resource.provider == "p"` or `principal.subject == "s"` (either way round).
//!
//! Cedar evaluates the scope (which cannot fail), then the conditions left to right,
//! stopping at the first false; `resource.provider` and `principal.subject` are attributes
//! querygate always sets to a string, so such a comparison is a plain true or false. A
//! policy starting with `unless`, or testing the provider or subject only after another
//! condition, guards on nothing and stays in every slice of its action.

use std::collections::{BTreeSet, HashMap};

use cedar_policy::{EntityTypeName, Policy, PolicySet, PrincipalConstraint};

/// Who a policy can apply to: the principal of one typed name (its uid), or every
/// principal whose `subject` attribute is one value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Who {
    /// `principal == Querygate::Principal::"<typed name>"`.
    Name(String),
    /// `principal.subject == "<subject>"`.
    Subject(String),
}

/// What a policy requires before anything else can hold.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Guards {
    /// The provider it requires.
    pub provider: Option<String>,
    /// The principal it requires.
    pub subject: Option<Who>,
}

/// The guards of `policy` (see the module's doc); `principal_type` is
/// `Querygate::Principal`.
pub(super) fn guards_of(policy: &Policy, principal_type: &EntityTypeName) -> Guards {
    let mut guards = Guards::default();
    if let PrincipalConstraint::Eq(uid) = policy.principal_constraint()
        && uid.type_name() == principal_type
    {
        guards.subject = Some(Who::Name(uid.id().unescaped().to_owned()));
    }
    let Ok(json) = policy.to_json() else {
        return guards;
    };
    let Some(first) = json
        .get("conditions")
        .and_then(|c| c.as_array())
        .and_then(|c| c.first())
    else {
        return guards;
    };
    if first.get("kind").and_then(|k| k.as_str()) != Some("when") {
        return guards;
    }
    let Some(body) = first.get("body") else {
        return guards;
    };
    let mut conjuncts = Vec::new();
    flatten_and(body, &mut conjuncts);
    for conjunct in conjuncts {
        match guard_of(conjunct) {
            Some(Guard::Provider(p)) => {
                guards.provider.get_or_insert(p);
            }
            Some(Guard::Subject(s)) => {
                guards.subject.get_or_insert(Who::Subject(s));
            }
            // Anything else may fail: the conjuncts after it guard on nothing.
            None => break,
        }
    }
    guards
}

/// The operands of a chain of `&&` (in the policy's JSON form), in evaluation order.
fn flatten_and<'j>(expr: &'j serde_json::Value, out: &mut Vec<&'j serde_json::Value>) {
    match expr
        .get("&&")
        .and_then(|and| Some((and.get("left")?, and.get("right")?)))
    {
        Some((left, right)) => {
            flatten_and(left, out);
            flatten_and(right, out);
        }
        None => out.push(expr),
    }
}

enum Guard {
    Provider(String),
    Subject(String),
}

/// `resource.provider == "p"` or `principal.subject == "s"` (either way round).
fn guard_of(expr: &serde_json::Value) -> Option<Guard> {
    let eq = expr.get("==")?;
    let attribute = |e: &serde_json::Value| {
        let dot = e.get(".")?;
        let var = dot.get("left")?.get("Var")?.as_str()?;
        let attr = dot.get("attr")?.as_str()?;
        match (var, attr) {
            ("resource", "provider") => Some(true),
            ("principal", "subject") => Some(false),
            _ => None,
        }
    };
    let literal =
        |e: &serde_json::Value| e.get("Value").and_then(|v| v.as_str()).map(str::to_owned);
    let (left, right) = (eq.get("left")?, eq.get("right")?);
    let (is_provider, value) = match (attribute(left), attribute(right)) {
        (Some(is_provider), _) => (is_provider, literal(right)?),
        (None, Some(is_provider)) => (is_provider, literal(left)?),
        (None, None) => return None,
    };
    Some(if is_provider {
        Guard::Provider(value)
    } else {
        Guard::Subject(value)
    })
}

/// Policies sliced by the provider they require.
#[derive(Debug, Default)]
pub(super) struct ByProvider {
    /// The policies for a provider no policy requires.
    general: PolicySet,
    /// For each provider a policy requires: `general` and those policies.
    providers: HashMap<String, PolicySet>,
}

impl ByProvider {
    /// Slices `policies` (each with the provider it requires).
    fn of(policies: &[(&Policy, Option<&str>)]) -> Result<Self, String> {
        let mut slice = ByProvider::default();
        for (policy, _) in policies.iter().filter(|(_, p)| p.is_none()) {
            slice
                .general
                .add((*policy).clone())
                .map_err(|e| e.to_string())?;
        }
        let providers: BTreeSet<&str> = policies.iter().filter_map(|(_, p)| *p).collect();
        for provider in providers {
            let mut set = slice.general.clone();
            for (policy, _) in policies.iter().filter(|(_, p)| *p == Some(provider)) {
                set.add((*policy).clone()).map_err(|e| e.to_string())?;
            }
            slice.providers.insert(provider.to_owned(), set);
        }
        Ok(slice)
    }

    /// The policies that can apply to a request to `provider`.
    pub(super) fn for_provider(&self, provider: &str) -> &PolicySet {
        self.providers.get(provider).unwrap_or(&self.general)
    }

    #[cfg(test)]
    pub(super) fn general(&self) -> &PolicySet {
        &self.general
    }
}

/// The policies whose action scope holds for one action.
#[derive(Debug, Default)]
pub(super) struct ActionSlice {
    /// Those that guard on no subject.
    pub shared: ByProvider,
    /// Those that guard on a principal, by principal.
    pub subjects: HashMap<Who, ByProvider>,
}

impl ActionSlice {
    /// Slices the policies of one action (each with its guards).
    pub(super) fn of(policies: &[(&Policy, &Guards)]) -> Result<Self, String> {
        let pairs = |subject: Option<&Who>| -> Vec<(&Policy, Option<&str>)> {
            policies
                .iter()
                .filter(|(_, g)| g.subject.as_ref() == subject)
                .map(|(p, g)| (*p, g.provider.as_deref()))
                .collect()
        };
        let shared = ByProvider::of(&pairs(None))?;
        let subjects: BTreeSet<&Who> = policies
            .iter()
            .filter_map(|(_, g)| g.subject.as_ref())
            .collect();
        let mut by_subject = HashMap::with_capacity(subjects.len());
        for subject in subjects {
            by_subject.insert(subject.clone(), ByProvider::of(&pairs(Some(subject)))?);
        }
        Ok(ActionSlice {
            shared,
            subjects: by_subject,
        })
    }

    /// The slices of the principal with typed name `name` and subject `subject` (at most
    /// two: one for each way a policy can name it; one when both are the same string).
    pub(super) fn principal_slices(&self, name: &str, subject: &str) -> Vec<&ByProvider> {
        let by_name = self.subjects.get(&Who::Name(name.to_owned()));
        let by_subject = self.subjects.get(&Who::Subject(subject.to_owned()));
        by_name.into_iter().chain(by_subject).collect()
    }

    /// The policy sets to evaluate for a request of a principal (its slices) to `provider`
    /// (disjoint; the policies that can apply are their union).
    pub(super) fn sets_for<'s>(
        &'s self,
        principal: &[&'s ByProvider],
        provider: &str,
    ) -> impl Iterator<Item = &'s PolicySet> {
        std::iter::once(self.shared.for_provider(provider))
            .chain(principal.iter().map(|s| s.for_provider(provider)))
            .filter(|set| set.policies().next().is_some())
    }
}
