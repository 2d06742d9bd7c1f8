//! Property tests of the gate: for generated policies and statements, [`decide`] (sliced
//! policies, one evaluation per slice, a store built once per call) answers exactly as
//! Cedar does over every policy of the tenant, with a store built from scratch for each
//! request and checked against the schema.

use std::path::PathBuf;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityUid, Request, RestrictedExpression,
};
use proptest::prelude::*;

use super::{
    Answer, LoadedPolicies, Question, RequestAnswer, decide, model, parse_sources, resource_entity,
    string, uid,
};
use crate::auth::Principal;
use crate::engine::{ParamValues, PlannedParam, PlannedRequest};
use crate::governance::TenantRules;
use crate::policy::{Mode, QueryClass};

const PROVIDERS: [&str; 3] = ["google", "aws", "p1"];
const SUBJECTS: [&str; 3] = ["alice", "bob", "local"];
const GROUPS: [&str; 2] = ["ops", "dev"];
/// The typed names policies write: subjects of the issuer the generated principals' tokens
/// come from, and the local user.
const NAMES: [&str; 3] = [
    "jwt:https://issuer.example#alice",
    "jwt:https://issuer.example#bob",
    "local",
];
const ISSUER: &str = "https://issuer.example";
const PROJECTS: [&str; 2] = ["sandbox", "prod"];

/// One condition of a generated policy.
fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (prop::sample::select(&PROVIDERS[..]), any::<bool>()).prop_map(|(p, flip)| if flip {
            format!("\"{p}\" == resource.provider")
        } else {
            format!("resource.provider == \"{p}\"")
        }),
        3 => (prop::sample::select(&SUBJECTS[..]), any::<bool>()).prop_map(|(s, flip)| if flip {
            format!("\"{s}\" == principal.subject")
        } else {
            format!("principal.subject == \"{s}\"")
        }),
        1 => (0..3000i64).prop_map(|n| format!("context.row_cap <= {n}")),
        // Fails to evaluate for a row cap above 0 (an overflow).
        1 => Just("context.row_cap * 9223372036854775807 > 0".to_owned()),
        1 => prop::sample::select(&PROJECTS[..]).prop_map(|p| format!(
            "resource.hasTag(\"project\") && resource.getTag(\"project\").contains(\"{p}\")"
        )),
        1 => prop::sample::select(&GROUPS[..])
            .prop_map(|g| format!("principal in Querygate::Group::\"jwt:{ISSUER}#{g}\"")),
        1 => Just("resource.verb != \"EXEC\"".to_owned()),
        1 => Just("principal.issuer != \"\"".to_owned()),
    ]
}

/// A conjunction of 1 to 3 conditions, bracketed either way (`(a && b) && c` or
/// `a && (b && c)`).
fn conjunction() -> impl Strategy<Value = String> {
    (prop::collection::vec(atom(), 1..4), any::<bool>()).prop_map(|(atoms, right)| {
        atoms
            .into_iter()
            .reduce(|acc, a| {
                if right {
                    format!("{a} && ({acc})")
                } else {
                    format!("({acc}) && {a}")
                }
            })
            .unwrap_or_default()
    })
}

fn policy() -> impl Strategy<Value = String> {
    let effect = prop::sample::select(vec!["permit", "forbid"]);
    let principal = prop_oneof![
        2 => Just("principal".to_owned()),
        1 => prop::sample::select(&NAMES[..])
            .prop_map(|s| format!("principal == Querygate::Principal::\"{s}\"")),
        1 => prop::sample::select(&GROUPS[..])
            .prop_map(|g| format!("principal in Querygate::Group::\"jwt:{ISSUER}#{g}\"")),
    ];
    let action = prop_oneof![
        2 => Just("action".to_owned()),
        1 => prop::sample::select(QueryClass::ALL.to_vec())
            .prop_map(|c| format!("action == Querygate::Action::\"{}\"", c.as_str())),
        1 => prop::sample::select(vec!["read", "write"])
            .prop_map(|g| format!("action in Querygate::Action::\"{g}\"")),
    ];
    let when = prop::option::weighted(0.8, conjunction());
    let unless = prop::option::weighted(0.3, conjunction());
    (effect, principal, action, when, unless, any::<bool>()).prop_map(
        |(effect, principal, action, when, unless, unless_first)| {
            let when = when.map(|w| format!("when {{ {w} }}"));
            let unless = unless.map(|u| format!("unless {{ {u} }}"));
            let conditions: Vec<String> = if unless_first {
                unless.into_iter().chain(when).collect()
            } else {
                when.into_iter().chain(unless).collect()
            };
            format!(
                "{effect}({principal}, {action}, resource) {};\n",
                conditions.join(" ")
            )
        },
    )
}

fn request() -> impl Strategy<Value = PlannedRequest> {
    (
        prop::sample::select(&PROVIDERS[..]),
        prop::option::of(prop::sample::select(&PROJECTS[..])),
        prop::sample::select(vec![("list", "GET"), ("delete", "DELETE"), ("run", "POST")]),
    )
        .prop_map(|(provider, project, (method, http))| PlannedRequest {
            provider: provider.into(),
            service: "compute".into(),
            resource: "instances".into(),
            method: method.into(),
            http_method: http.into(),
            effect: crate::engine::MethodEffect::of_http_method(http),
            params: vec![PlannedParam {
                name: "project".into(),
                sql_name: None,
                values: project.map_or(ParamValues::Omitted, |p| {
                    ParamValues::Given(vec![p.to_owned()])
                }),
            }],
        })
}

fn principal() -> impl Strategy<Value = Principal> {
    (
        prop::sample::select(&SUBJECTS[..]),
        prop::sample::subsequence(&GROUPS[..], 0..=GROUPS.len()),
        any::<bool>(),
    )
        .prop_map(|(subject, groups, issuer)| {
            let mut principal = Principal::local();
            principal.subject = subject.to_owned();
            principal.groups = groups.into_iter().map(str::to_owned).collect();
            if issuer {
                principal.method = crate::auth::Method::Jwt;
                principal.issuer = Some(ISSUER.to_owned());
            }
            principal
        })
}

/// Cedar's answer over every policy, each request in a store of its own built from
/// scratch and checked against the schema.
fn decide_plain(policies: &LoadedPolicies, question: &Question<'_>) -> Answer {
    let model = model().unwrap();
    let principal = question.principal;
    let principal_uid = uid(&model.principal_type, &principal.typed_name());
    let groups: Vec<EntityUid> = principal
        .typed_groups()
        .map(|g| uid(&model.group_type, &g))
        .collect();
    let context = Context::from_pairs([
        ("tool".to_owned(), string(question.tool)),
        ("mode".to_owned(), string(question.mode.as_str())),
        ("sql_class".to_owned(), string(question.sql_class.as_str())),
        (
            "row_cap".to_owned(),
            RestrictedExpression::new_long(question.row_cap.try_into().unwrap()),
        ),
    ])
    .unwrap();
    let mut answers = Vec::new();
    for request in question.requests {
        let method = request.full_method();
        let principal_entity = Entity::new(
            principal_uid.clone(),
            [
                ("subject".to_owned(), string(&principal.subject)),
                (
                    "issuer".to_owned(),
                    string(principal.issuer.as_deref().unwrap_or_default()),
                ),
                ("auth_method".to_owned(), string(principal.method.as_str())),
                ("tenant".to_owned(), string(&principal.tenant)),
            ]
            .into_iter()
            .collect(),
            groups.iter().cloned().collect(),
        )
        .unwrap();
        let resource_uid = uid(&model.method_type, &method);
        let (resource, _) = resource_entity(resource_uid.clone(), request, question).unwrap();
        let entities = Entities::from_entities(
            [principal_entity, resource]
                .into_iter()
                .chain(groups.iter().map(|g| Entity::with_uid(g.clone()))),
            Some(&model.schema),
        )
        .unwrap();
        let cedar_request = Request::new(
            principal_uid.clone(),
            model.action(question.class).clone(),
            resource_uid,
            context.clone(),
            Some(&model.schema),
        )
        .unwrap();
        let response = Authorizer::new().is_authorized(&cedar_request, &policies.set, &entities);
        let diagnostics = response.diagnostics();
        let mut errors: Vec<(String, String)> = diagnostics
            .errors()
            .map(|e| match e {
                cedar_policy::AuthorizationError::PolicyEvaluationError(inner) => {
                    (inner.policy_id().to_string(), e.to_string())
                }
            })
            .collect();
        errors.sort();
        let mut decided: Vec<String> = if errors.is_empty() {
            diagnostics.reason().map(ToString::to_string).collect()
        } else {
            errors.iter().map(|(id, _)| id.clone()).collect()
        };
        decided.sort();
        answers.push(RequestAnswer {
            method,
            allowed: response.decision() == Decision::Allow && errors.is_empty(),
            policies: decided,
            errors: errors.into_iter().map(|(_, e)| e).collect(),
        });
    }
    Answer { requests: answers }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn sliced_decisions_are_those_of_every_policy(
        texts in prop::collection::vec(policy(), 1..12),
        principal in principal(),
        requests in prop::collection::vec(request(), 1..4),
        class in prop::sample::select(QueryClass::ALL.to_vec()),
        row_cap in prop::sample::select(vec![0usize, 5, 1000]),
    ) {
        let text = texts.concat();
        let policies = parse_sources(vec![(PathBuf::from("t.cedar"), text.clone())])
            .map_err(|p| TestCaseError::fail(format!("{p:?}\n{text}")))?;
        let rules = TenantRules::default();
        let question = Question {
            principal: &principal,
            tool: "run_mutation_query",
            mode: Mode::FullAccess,
            class,
            sql_class: class,
            verb: "DELETE",
            row_cap,
            requests: &requests,
            rules: &rules,
        };
        let fast = decide(&policies, &question).unwrap();
        prop_assert_eq!(fast, decide_plain(&policies, &question), "{}", text);
    }
}
