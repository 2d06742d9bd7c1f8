use super::*;
use crate::engine::PlannedParam;

fn sources(text: &str) -> Vec<(PathBuf, String)> {
    vec![(PathBuf::from("t.cedar"), text.to_owned())]
}

fn request(method: &str, http: &str, project: Option<&str>) -> PlannedRequest {
    PlannedRequest {
        provider: "google".into(),
        service: "compute".into(),
        resource: "instances".into(),
        method: method.into(),
        http_method: http.into(),
        effect: crate::engine::MethodEffect::of_http_method(http),
        params: vec![PlannedParam {
            name: "project".into(),
            sql_name: None,
            values: match project {
                Some(p) => ParamValues::Given(vec![p.into()]),
                None => ParamValues::Omitted,
            },
        }],
    }
}

/// A principal of a token of `issuer`.
fn jwt(issuer: &str, subject: &str, groups: &[&str]) -> Principal {
    let mut p = Principal::local();
    p.method = crate::auth::Method::Jwt;
    p.issuer = Some(issuer.into());
    p.subject = subject.into();
    p.groups = groups.iter().map(|g| (*g).to_owned()).collect();
    p
}

fn ask(
    policies: &LoadedPolicies,
    principal: &Principal,
    class: QueryClass,
    requests: &[PlannedRequest],
) -> Answer {
    let rules = TenantRules::default();
    decide(
        policies,
        &Question {
            principal,
            tool: "run_mutation_query",
            mode: Mode::FullAccess,
            class,
            sql_class: class,
            verb: "DELETE",
            row_cap: 1000,
            requests,
            rules: &rules,
        },
    )
    .unwrap()
}

#[test]
fn the_schema_parses() {
    model().unwrap();
}

#[test]
fn permits_forbids_and_default_deny() {
    let policies = parse_sources(sources(
        r#"
@id("reads")
permit(principal, action in Querygate::Action::"read", resource);

@id("delete-in-sandbox")
permit(principal in Querygate::Group::"jwt:https://idp.example#ops", action == Querygate::Action::"mutation_delete", resource)
when { resource.hasTag("project") && resource.getTag("project") == ["sandbox"] };

forbid(principal, action, resource) when { principal.subject == "mallory" };
"#,
    ))
    .unwrap();
    assert_eq!(policies.ids(), ["reads", "delete-in-sandbox", "t.cedar#3"]);
    let ops = jwt("https://idp.example", "olga", &["ops"]);
    let plain = Principal::local();
    let delete = |p| [request("delete", "DELETE", p)];
    let a = ask(
        &policies,
        &ops,
        QueryClass::MutationDelete,
        &delete(Some("sandbox")),
    );
    assert!(a.denied().is_none(), "{a:?}");
    assert_eq!(a.policy_ids(), ["delete-in-sandbox"]);
    let a = ask(
        &policies,
        &ops,
        QueryClass::MutationDelete,
        &delete(Some("prod")),
    );
    let denied = a.denied().unwrap();
    assert!(denied.policies.is_empty());
    assert!(
        denied.why_denied().contains("no Cedar policy"),
        "{}",
        denied.why_denied()
    );
    // Omitted: no tag, so nothing permits it.
    assert!(
        ask(&policies, &ops, QueryClass::MutationDelete, &delete(None))
            .denied()
            .is_some()
    );
    // Not in the group.
    assert!(
        ask(
            &policies,
            &plain,
            QueryClass::MutationDelete,
            &delete(Some("sandbox"))
        )
        .denied()
        .is_some()
    );
    // Reads are permitted, unless forbidden.
    let list = [request("list", "GET", Some("prod"))];
    assert!(
        ask(&policies, &plain, QueryClass::Select, &list)
            .denied()
            .is_none()
    );
    let mut mallory = Principal::local();
    mallory.subject = "mallory".into();
    let a = ask(&policies, &mallory, QueryClass::Select, &list);
    assert_eq!(a.denied().unwrap().policies, ["t.cedar#3"]);
    assert!(
        a.denied()
            .unwrap()
            .why_denied()
            .contains("denied by Cedar policy 't.cedar#3'")
    );
}

#[test]
fn problems_name_the_file_and_position() {
    let problems = parse_sources(sources(
        "permit(principal, action, resource)\nwhen { resource.nope == 1 };\n",
    ))
    .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        problems[0].position.map(|p| p.0),
        Some(2),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].to_string().starts_with("t.cedar:2:"),
        "{}",
        problems[0]
    );
    let problems = parse_sources(sources("permit(principal, action, resource\n")).unwrap_err();
    assert!(problems[0].position.is_some(), "{}", problems[0]);
    let problems = parse_sources(sources(
        "permit(principal == ?principal, action, resource);",
    ))
    .unwrap_err();
    assert!(problems[0].message.contains("templates"), "{}", problems[0]);
    let twice = "@id(\"a\") permit(principal, action, resource);\n@id(\"a\") forbid(principal, action, resource);";
    assert!(
        parse_sources(sources(twice)).unwrap_err()[0]
            .message
            .contains("used twice")
    );
    // An unknown action is a validation error.
    let problems = parse_sources(sources(
        "permit(principal, action == Querygate::Action::\"drop\", resource);",
    ))
    .unwrap_err();
    assert!(problems[0].message.contains("drop"), "{}", problems[0]);
}

#[test]
fn a_reload_takes_a_valid_change_and_keeps_the_policies_in_force_on_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.cedar");
    std::fs::write(&file, "@id(\"a\") permit(principal, action, resource);").unwrap();
    let policies =
        TenantPolicies::open("t", vec![dir.path().to_owned()], Duration::from_secs(1)).unwrap();
    assert_eq!(policies.current().ids(), ["a"]);
    assert!(!policies.reload_if_changed(), "nothing changed");
    std::fs::write(&file, "permit(principal, action, resource) when { nope };").unwrap();
    assert!(!policies.reload_if_changed(), "a broken change was taken");
    assert_eq!(policies.current().ids(), ["a"]);
    std::fs::write(&file, "@id(\"b\") forbid(principal, action, resource);").unwrap();
    assert!(policies.reload_if_changed());
    assert_eq!(policies.current().ids(), ["b"]);
    // A new file in the folder is a change too.
    std::fs::write(
        dir.path().join("q.cedar"),
        "@id(\"c\") permit(principal, action, resource);",
    )
    .unwrap();
    assert!(policies.reload_if_changed());
    assert_eq!(policies.current().ids(), ["b", "c"]);
}

#[test]
fn policies_are_sliced_by_action_and_leading_provider_without_changing_answers() {
    let policies = parse_sources(sources(
        r#"
@id("google-reads")
permit(principal, action in Querygate::Action::"read", resource)
when { resource.provider == "google" && context.row_cap <= 10 };

@id("aws-reads")
permit(principal, action == Querygate::Action::"select", resource)
when { "aws" == resource.provider };

@id("deletes")
permit(principal, action == Querygate::Action::"mutation_delete", resource);

@id("tag-then-provider")
forbid(principal, action, resource)
when { context.row_cap * 9223372036854775807 > 0 && resource.provider == "aws" };

@id("unless-first")
forbid(principal, action, resource)
unless { resource.provider == "google" } when { resource.provider == "azure" };
"#,
    ))
    .unwrap();
    let select = &policies.slices[0].shared;
    let ids = |set: &PolicySet| {
        let mut ids: Vec<String> = set.policies().map(|p| p.id().to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(select.general()), ["tag-then-provider", "unless-first"]);
    assert_eq!(
        ids(select.for_provider("google")),
        ["google-reads", "tag-then-provider", "unless-first"]
    );
    assert_eq!(
        ids(select.for_provider("aws")),
        ["aws-reads", "tag-then-provider", "unless-first"]
    );
    assert_eq!(ids(select.for_provider("other")), ids(select.general()));
    let delete = &policies.slices[2].shared;
    assert_eq!(
        ids(delete.general()),
        ["deletes", "tag-then-provider", "unless-first"]
    );
    // The answers are those of every policy: google reads within the row cap.
    let plain = Principal::local();
    let list = [request("list", "GET", Some("p"))];
    let a = ask(&policies, &plain, QueryClass::Select, &list);
    assert!(a.denied().is_some(), "row_cap 1000 > 10: {a:?}");
    // A policy whose provider test is not first still runs, and its error (an overflow)
    // denies.
    let mut aws = request("list", "GET", Some("p"));
    aws.provider = "aws".into();
    let a = ask(&policies, &plain, QueryClass::Select, &[aws]);
    let denied = a.denied().unwrap();
    assert_eq!(denied.policies, ["tag-then-provider"], "{a:?}");
    assert!(!denied.errors.is_empty());
    let mut azure = request("delete", "DELETE", Some("p"));
    azure.provider = "azure".into();
    // Denied: `unless-first` forbids it and `tag-then-provider` fails (the error names it).
    let a = ask(&policies, &plain, QueryClass::MutationDelete, &[azure]);
    assert_eq!(a.denied().unwrap().policies, ["tag-then-provider"], "{a:?}");
}

#[test]
fn policies_naming_a_subject_are_asked_only_for_that_subject() {
    let policies = parse_sources(sources(
        r#"
@id("scope")
forbid(principal == Querygate::Principal::"jwt:https://issuer.example#alice", action, resource);

@id("leading")
forbid(principal, action, resource)
when { resource.provider == "google" && principal.subject == "bob" && principal.issuer != "" };

@id("late")
forbid(principal, action, resource)
when { principal.issuer != "" && principal.subject == "carol" };

@id("all")
permit(principal, action, resource);
"#,
    ))
    .unwrap();
    let ids = |set: &PolicySet| {
        let mut ids: Vec<String> = set.policies().map(|p| p.id().to_string()).collect();
        ids.sort();
        ids
    };
    let select = &policies.slices[0];
    assert_eq!(ids(select.shared.general()), ["all", "late"]);
    let mut subjects: Vec<&slice::Who> = select.subjects.keys().collect();
    subjects.sort();
    let alice = slice::Who::Name("jwt:https://issuer.example#alice".into());
    let bob = slice::Who::Subject("bob".into());
    assert_eq!(subjects, [&alice, &bob]);
    assert_eq!(ids(select.subjects[&alice].for_provider("aws")), ["scope"]);
    assert_eq!(
        ids(select.subjects[&bob].for_provider("google")),
        ["leading"]
    );
    assert!(ids(select.subjects[&bob].for_provider("aws")).is_empty());
    let list = |provider: &str| {
        let mut r = request("list", "GET", Some("p"));
        r.provider = provider.into();
        [r]
    };
    let who = |subject: &str| jwt("https://issuer.example", subject, &[]);
    let a = ask(&policies, &who("dave"), QueryClass::Select, &list("google"));
    assert_eq!(a.policy_ids(), ["all"], "{a:?}");
    let a = ask(&policies, &who("alice"), QueryClass::Select, &list("aws"));
    assert_eq!(a.denied().unwrap().policies, ["scope"], "{a:?}");
    let a = ask(&policies, &who("bob"), QueryClass::Select, &list("google"));
    assert_eq!(a.denied().unwrap().policies, ["leading"], "{a:?}");
    let a = ask(&policies, &who("bob"), QueryClass::Select, &list("aws"));
    assert!(a.denied().is_none(), "{a:?}");
    let a = ask(&policies, &who("carol"), QueryClass::Select, &list("aws"));
    assert_eq!(a.denied().unwrap().policies, ["late"], "{a:?}");
    // The principal scope names alice of one issuer: alice of another is not her.
    let other = jwt("https://other.example", "alice", &[]);
    let a = ask(&policies, &other, QueryClass::Select, &list("aws"));
    assert_eq!(a.policy_ids(), ["all"], "{a:?}");
}

#[test]
fn principals_and_groups_are_named_by_typed_names_bound_to_their_issuer() {
    let policies = parse_sources(sources(
        r#"
@id("alice")
permit(principal == Querygate::Principal::"jwt:https://a.example#alice", action, resource);

@id("sre")
permit(principal in Querygate::Group::"jwt:https://a.example#sre", action, resource);

@id("agent")
permit(principal, action, resource) when { principal == Querygate::Principal::"uri:spiffe://acme/agent" };
"#,
    ))
    .unwrap();
    let list = [request("list", "GET", Some("p"))];
    let allowed = |p: &Principal| {
        ask(&policies, p, QueryClass::Select, &list)
            .denied()
            .is_none()
    };
    assert!(allowed(&jwt("https://a.example", "alice", &[])));
    assert!(allowed(&jwt("https://a.example", "zed", &["sre"])));
    // The same sub or group from another trusted issuer is someone else.
    assert!(!allowed(&jwt("https://b.example", "alice", &[])));
    assert!(!allowed(&jwt("https://b.example", "zed", &["sre"])));
    // A token whose sub reads like a typed name is still that issuer's subject.
    assert!(!allowed(&jwt(
        "https://b.example",
        "uri:spiffe://acme/agent",
        &[]
    )));
    let mut agent = Principal::local();
    agent.method = crate::auth::Method::Mtls;
    agent.subject = "uri:spiffe://acme/agent".into();
    assert!(allowed(&agent));

    // Bare names are refused at load, with the typed form.
    let problems = parse_sources(sources(
        r#"
permit(principal == Querygate::Principal::"alice", action, resource);
permit(principal in Querygate::Group::"sre", action, resource);
forbid(principal, action, resource) when { principal in [Querygate::Group::"contractors"] };
"#,
    ))
    .unwrap_err();
    let said: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    for text in [
        "Querygate::Principal::\"alice\": 'alice' is a bare name",
        "'jwt:<issuer>#alice'",
        "'jwt:<issuer>#sre'",
        "'jwt:<issuer>#contractors'",
    ] {
        assert!(said.iter().any(|p| p.contains(text)), "{text}: {said:#?}");
    }
    // The untyped groups attribute is gone: a policy testing it does not load.
    let problems = parse_sources(sources(
        r#"permit(principal, action, resource) when { principal.groups.contains("sre") };"#,
    ))
    .unwrap_err();
    assert!(problems[0].message.contains("groups"), "{problems:?}");
}

#[test]
fn positions_count_lines_and_characters() {
    assert_eq!(position("ab\ncd", 0), (1, 1));
    assert_eq!(position("ab\ncd", 4), (2, 2));
    assert_eq!(position("ab", 99), (1, 3));
}
