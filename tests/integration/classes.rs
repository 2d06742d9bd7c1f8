//! The gate's statement classes, from the engine's parse of the text (never its first word):
//! a table of StackQL's examples and bypass attempts with the class we intend, and a property
//! test that no text is classed less dangerous than its most dangerous statement.

use querygate::engine::ParsedSql;
use querygate::policy::{QueryClass, classify};

use QueryClass::{Lifecycle, MutationCreate as Create, MutationDelete as Delete, Select, Unknown};

fn class(sql: &str) -> QueryClass {
    classify(&ParsedSql::parse(sql))
}

/// (statement, intended class). StackQL's examples first (where our class differs, the
/// parse knows better than its first-word rule, always in the safe direction or equal),
/// then bypass attempts.
const TABLE: &[(&str, QueryClass)] = &[
    // StackQL's examples.
    ("", Unknown),
    ("   ", Unknown),
    ("select * from t", Select),
    ("  SELECT 1", Select),
    ("select\n1", Select),
    ("Show methods in x.y.z;", Select),
    ("describe x.y.z", Select),
    ("DESC x.y.z", Select),
    ("EXPLAIN select 1", Unknown),
    ("EXPLAIN DELETE FROM t", Unknown),
    (
        "insert into testapi.widgets.widgets (org, name) values ('a', 'b')",
        Create,
    ),
    (
        "UPDATE testapi.widgets.widgets SET size = 1 WHERE org = 'a' AND id = 'b'",
        Create,
    ),
    (
        "replace testapi.widgets.widgets set name = 'n' where org = 'a' and id = 'b'",
        Create,
    ),
    (
        "merge into t using s on t.id = s.id when matched then delete",
        Unknown,
    ),
    ("UPSERT into t values (1)", Unknown),
    (
        "delete from testapi.widgets.widgets where org = 'a' and id = 'b'",
        Delete,
    ),
    (
        "EXEC google.compute.instances.start @project = 'p'",
        Lifecycle,
    ),
    ("   exec aws.foo.bar.baz @a='1'", Lifecycle),
    ("vacuum foo", Unknown),
    ("BEGIN", Unknown),
    ("REGISTRY PULL google", Unknown),
    ("REGISTRY LIST", Select),
    ("registry list github", Select),
    ("(select 1)", Select),
    ("SELECT*FROM t", Select),
    ("select;", Unknown),
    ("-- comment then select\nselect 1", Select),
    ("/* c */ select 1", Select),
    ("WITH t AS (SELECT 1) SELECT * FROM t", Select),
    (
        "WITH a AS (SELECT 1), b AS (SELECT 2) SELECT * FROM a, b",
        Select,
    ),
    ("WITH", Unknown),
    (
        "WITH t AS (SELECT 1) DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Unknown,
    ),
    (
        "WITH t AS (SELECT 1) INSERT INTO testapi.widgets.widgets (org) SELECT 'a'",
        Unknown,
    ),
    (
        "with t as (select 1) update testapi.widgets.widgets set size = 1 where org = 'a' and id = 'b'",
        Unknown,
    ),
    ("with t as (select 'update' x) select * from t", Select),
    (
        "select 1; delete from testapi.widgets.widgets where org = 'a' and id = 'b'",
        Delete,
    ),
    // Several statements: the most dangerous part wins.
    ("select 1; select 2", Select),
    (
        "select 1; insert into testapi.widgets.widgets (org) values ('a')",
        Create,
    ),
    (
        "insert into testapi.widgets.widgets (org) values ('a'); select 1",
        Create,
    ),
    (
        "select 1; EXEC testapi.widgets.widgets.restart @org = 'a', @id = 'b'",
        Lifecycle,
    ),
    (
        "EXEC testapi.widgets.widgets.restart @org = 'a', @id = 'b'; delete from testapi.widgets.widgets where org = 'a' and id = 'b'",
        Lifecycle,
    ),
    (
        "select 1;;; delete from testapi.widgets.widgets where org = 'a' and id = 'b';",
        Delete,
    ),
    (
        "SHOW PROVIDERS; DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Delete,
    ),
    (
        "REGISTRY LIST; DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Delete,
    ),
    ("select 1; garbage here", Unknown),
    ("select 1; REGISTRY PULL github", Unknown),
    (
        "DESCRIBE testapi.widgets.widgets; UPDATE testapi.widgets.widgets SET size = 1 WHERE org = 'a' AND id = 'b'",
        Create,
    ),
    // Semicolons that do not split.
    ("select ';delete from t' as x", Select),
    (
        "select 1 -- ; delete from testapi.widgets.widgets where org = 'a' and id = 'b'",
        Select,
    ),
    ("select 1 /* ; delete from t */", Select),
    ("select \"a;b\" from t", Select),
    (
        "EXEC testapi.widgets.widgets.restart @org = 'a;b', @id = 'c'",
        Lifecycle,
    ),
    (
        "EXEC testapi.widgets.widgets.restart @org = 'a', @id = 'b', @@json = '{\"x\": \";DELETE\"}'",
        Lifecycle,
    ),
    // Comments, parentheses, case and whitespace.
    (
        "/* select */ DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Delete,
    ),
    (
        "-- select\nDELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Delete,
    ),
    (
        "\t\n  dElEtE   FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        Delete,
    ),
    (
        "/**/INSERT/**/INTO testapi.widgets.widgets (org) VALUES ('a')",
        Create,
    ),
    ("((select 1))", Select),
    ("select (select 1)", Select),
    ("select * from (select 1) as t", Select),
    ("select 1 union select 2", Select),
    ("values (1), (2)", Select),
    // DML inside queries.
    (
        "select * from (delete from testapi.widgets.widgets where org = 'a' returning *)",
        Unknown,
    ),
    (
        "select * from t where id in (delete from t returning id)",
        Unknown,
    ),
    ("select 1 union all (delete from t)", Unknown),
    (
        "WITH d AS (DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b' RETURNING *) SELECT * FROM d",
        Unknown,
    ),
    (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i FROM n",
        Select,
    ),
    (
        "INSERT INTO testapi.widgets.widgets (org, name) SELECT 'a', name FROM testapi.items.items WHERE org = 'b'",
        Create,
    ),
    // The engine does not run a DELETE whose WHERE holds a subquery: it does not parse, so
    // it is unknown (more dangerous than a DELETE, never less).
    (
        "DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id IN (SELECT id FROM testapi.items.items WHERE org = 'a')",
        Unknown,
    ),
    // Without a semicolon the parser reads one statement: `delete` is a column alias here,
    // and what runs is the SELECT it parsed.
    (
        "select 1 \ndelete from testapi.widgets.widgets where org = 'a' and id = 'b'",
        Select,
    ),
    // EXEC as a row source runs the method: lifecycle, never a read.
    (
        "SELECT * FROM (EXEC testapi.widgets.widgets.restart @org = 'a', @id = 'b')",
        Lifecycle,
    ),
    // Not SQL the engine runs.
    ("DROP TABLE t", Unknown),
    ("CREATE TABLE t (a int)", Unknown),
    ("ATTACH DATABASE 'x' AS y", Unknown),
    ("PRAGMA writable_schema = 1", Unknown),
    ("ALTER TABLE t ADD COLUMN b", Unknown),
    ("GRANT ALL ON t TO u", Unknown),
    ("SELEC 1", Unknown),
    ("select 'unterminated", Unknown),
    ("EXEC", Unknown),
    ("SHOW", Unknown),
    ("REGISTRY", Unknown),
    ("REGISTRY DELETE github", Unknown),
];

/// Variants of a statement that must not change its class: case, leading comments and
/// whitespace, a trailing semicolon.
fn variants(sql: &str) -> Vec<String> {
    vec![
        sql.to_owned(),
        format!("/* note */ {sql}"),
        format!("-- note\n{sql}"),
        format!("\n\t {sql} \n"),
        format!("{sql};"),
    ]
}

#[test]
fn the_table_classes_every_statement_as_intended() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (sql, expected) in TABLE {
        let got = class(sql);
        if got != *expected {
            wrong.push(format!("{sql:?}: got {got}, expected {expected}"));
        }
        checked += 1;
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    // Every statement that parses keeps its class under harmless decoration; REGISTRY
    // statements must start with their keyword and so are left out.
    for (sql, expected) in TABLE {
        if sql.trim().is_empty()
            || sql
                .trim_start()
                .to_ascii_uppercase()
                .starts_with("REGISTRY")
        {
            continue;
        }
        for variant in variants(sql) {
            let got = class(&variant);
            // A decorated unparseable text stays unknown; a decorated statement keeps its
            // class, or becomes more dangerous, never less.
            if got < *expected {
                wrong.push(format!("{variant:?}: got {got}, at least {expected}"));
            }
            checked += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "decorated statements classed less dangerous:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 200, "only {checked} statements checked");
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

#[test]
fn no_text_is_classed_less_dangerous_than_its_most_dangerous_statement() {
    let parts: Vec<(&str, QueryClass)> = TABLE
        .iter()
        .copied()
        .filter(|(sql, _)| !sql.trim().is_empty() && !sql.trim_end().ends_with(';'))
        // An unterminated quote would swallow the parts after it, so the parts would no
        // longer be the text's statements.
        .filter(|(sql, _)| sql.matches('\'').count() % 2 == 0)
        .collect();
    let joiners = [";", "; ", ";\n", " ;\t", ";/* x */", ";-- x\n"];
    let decorations = ["", "/* a */ ", "-- b\n", "\n  ", "\t"];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let count = 1 + (rng.next() % 4) as usize;
        let mut text = String::new();
        let mut worst = Select;
        for i in 0..count {
            let (sql, class) = *rng.pick(&parts);
            if i > 0 {
                let joiner: &&str = rng.pick(&joiners);
                text.push_str(joiner);
            }
            let decoration: &&str = rng.pick(&decorations);
            text.push_str(decoration);
            text.push_str(sql);
            // A part may end in a line comment: the next part starts on a new line, so
            // the parts stay the statements the text holds.
            text.push('\n');
            worst = worst.max(class);
        }
        let got = class(&text);
        assert!(
            got >= worst,
            "{text:?} classed {got}, but a part is {worst}"
        );
        if count > 1 {
            // Several statements never pass as one.
            assert!(
                ParsedSql::parse(&text).into_single().is_err(),
                "{text:?} ran as one statement"
            );
        }
    }
}
