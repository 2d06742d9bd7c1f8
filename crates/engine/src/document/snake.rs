//! `config.snake_case_aliases` of a provider document: response columns (and parameters)
//! exposed under their snake_case names while the wire names stay in requests and are what
//! rows are read by.

use serde_json::Value;

use super::ColumnSpec;
use super::param::to_snake;

/// Whether a provider's `config` sets `snake_case_aliases: true` (any-sdk reads the
/// setting from the provider's `config` only).
pub(crate) fn enabled(provider_config: &Value) -> bool {
    provider_config
        .get("snake_case_aliases")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The SQL name of the wire name `wire`: its snake_case form as StackQL derives it
/// (`publicAccess` → `public_access`), a hyphenated name (a header such as
/// `x-ms-client-id` or `X-Sfc-Session`) each segment so and joined by `_`
/// (`x_ms_client_id`, `x_sfc_session`), so that it needs no quoting in SQL.
pub(crate) fn sql_name(wire: &str) -> String {
    if wire.contains('-') {
        return wire
            .split('-')
            .filter(|segment| !segment.is_empty())
            .map(to_snake)
            .collect::<Vec<_>>()
            .join("_");
    }
    to_snake(wire)
}

/// The SQL alias of `wire` when it differs from the wire name beyond ASCII case.
pub(crate) fn alias(wire: &str) -> Option<String> {
    let snake = sql_name(wire);
    (!snake.is_empty() && !snake.eq_ignore_ascii_case(wire)).then_some(snake)
}

/// The column names of a row schema's properties `wires`, each with its wire name when
/// that differs: with aliases on, a property is named by its [`alias`] unless that alias
/// is another property's name or an earlier column's (ASCII case aside), when it keeps its
/// wire name.
pub(crate) fn column_names<'a>(
    aliases: bool,
    wires: impl Iterator<Item = &'a str> + Clone,
) -> Vec<(String, Option<String>)> {
    let mut columns: Vec<(String, Option<String>)> = Vec::new();
    for wire in wires.clone() {
        let taken = |name: &str| {
            wires.clone().any(|w| w.eq_ignore_ascii_case(name))
                || columns.iter().any(|(c, _)| c.eq_ignore_ascii_case(name))
        };
        match alias(wire).filter(|_| aliases).filter(|a| !taken(a)) {
            Some(name) => columns.push((name, Some(wire.to_owned()))),
            None => columns.push((wire.to_owned(), None)),
        }
    }
    columns
}

/// (column, wire name) of the `columns` named otherwise than their wire names.
pub(crate) fn wire_names(columns: &[ColumnSpec]) -> Vec<(String, String)> {
    columns
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.wire.clone()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{alias, column_names, enabled, sql_name};

    #[test]
    fn columns_keep_their_wire_names_when_the_alias_is_taken() {
        let wires = ["VpcId", "vpc_id", "cidrBlock", "name"];
        assert_eq!(
            column_names(true, wires.iter().copied()),
            [
                ("VpcId".to_owned(), None),
                ("vpc_id".to_owned(), None),
                ("cidr_block".to_owned(), Some("cidrBlock".to_owned())),
                ("name".to_owned(), None),
            ]
        );
        assert_eq!(
            column_names(false, ["cidrBlock"].iter().copied()),
            [("cidrBlock".to_owned(), None)]
        );
    }

    #[test]
    fn the_setting_is_a_boolean_of_the_provider_config() {
        assert!(enabled(&json!({"snake_case_aliases": true})));
        assert!(!enabled(&json!({"snake_case_aliases": false})));
        assert!(!enabled(&json!({"snake_case_aliases": "true"})));
        assert!(!enabled(&json!({})));
    }

    #[test]
    fn hyphenated_names_join_their_segments_with_underscores() {
        assert_eq!(sql_name("x-ms-client-id"), "x_ms_client_id");
        assert_eq!(sql_name("X-Sfc-Session"), "x_sfc_session");
        assert_eq!(
            sql_name("X-Snowflake-Authorization-Token-Type"),
            "x_snowflake_authorization_token_type"
        );
        assert_eq!(sql_name("countryRegion"), "country_region");
        assert_eq!(sql_name("VpcId"), "vpc_id");
    }

    #[test]
    fn no_alias_when_only_case_differs() {
        assert_eq!(alias("Name"), None);
        assert_eq!(alias("id"), None);
        assert_eq!(alias("already_snake"), None);
        assert_eq!(alias("ipAddress").as_deref(), Some("ip_address"));
        assert_eq!(alias("x-ms-client-id").as_deref(), Some("x_ms_client_id"));
    }
}
