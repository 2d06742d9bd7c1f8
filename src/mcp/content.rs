//! Content authored as markdown under `content/` and embedded at build time: tool
//! descriptions (`tools/<tool>.md`), server instructions (`instructions/*.md`, joined in
//! file order), prompts (`prompts/<name>.md`) and resources (`resources/<name>.md`), each with
//! YAML frontmatter. Checked when the server starts: a malformed file, a tool without a
//! description or a description without a tool is an error naming it.

use std::collections::BTreeMap;

use serde::Deserialize;

include!(concat!(env!("OUT_DIR"), "/content.rs"));

/// Why the embedded content is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContentError {
    /// A file's frontmatter is missing or malformed.
    #[error("content/{file}: {message}")]
    Malformed {
        /// The file, relative to `content/`.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A tool the server offers has no `content/tools/<tool>.md`.
    #[error("tool '{0}' has no description under content/tools ({0}.md)")]
    MissingDescription(String),
    /// `content/tools/<name>.md` describes a tool the server does not have.
    #[error("content/tools/{0}.md describes a tool the server does not have")]
    OrphanDescription(String),
}

/// One argument of a prompt.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PromptArgument {
    /// Argument name, used as `{{name}}` in the body.
    pub name: String,
    /// What to pass.
    pub description: String,
    /// Whether the prompt needs it.
    #[serde(default)]
    pub required: bool,
}

/// A prompt: a message template with arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptDoc {
    /// Prompt name (the file stem).
    pub name: String,
    /// Short title.
    pub title: Option<String>,
    /// What the prompt is for.
    pub description: String,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
    /// The message text, with `{{argument}}` placeholders.
    pub body: String,
}

/// A static resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDoc {
    /// Resource name (the file stem).
    pub name: String,
    /// Its URI, e.g. `querygate://docs/sql`.
    pub uri: String,
    /// Short title.
    pub title: Option<String>,
    /// What it holds.
    pub description: String,
    /// MIME type (`text/markdown` unless stated).
    pub mime_type: String,
    /// The text.
    pub body: String,
}

/// Name of the resource that republishes the server instructions.
pub const INSTRUCTIONS_RESOURCE: &str = "stackql_server_instructions";
/// Its URI.
pub const INSTRUCTIONS_URI: &str = "querygate://docs/instructions";

/// Everything under `content/`, parsed.
#[derive(Debug, Clone)]
pub struct Content {
    /// Tool name → description (prose collapsed).
    pub tools: BTreeMap<String, String>,
    /// Server instructions: the instruction files joined in order.
    pub instructions: String,
    /// Prompts by name.
    pub prompts: Vec<PromptDoc>,
    /// Resources by name.
    pub resources: Vec<ResourceDoc>,
    /// Other embedded files (e.g. the query library snapshot) by path.
    pub files: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFront {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptFront {
    name: String,
    title: Option<String>,
    description: String,
    #[serde(default)]
    arguments: Vec<PromptArgument>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceFront {
    name: String,
    uri: String,
    title: Option<String>,
    description: String,
    mime_type: Option<String>,
}

impl Content {
    /// The content embedded in this binary.
    pub fn embedded() -> Result<Self, ContentError> {
        Self::parse(FILES.iter().copied())
    }

    /// Parses content files given as (path relative to `content/`, text).
    pub fn parse<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ContentError> {
        let mut content = Content {
            tools: BTreeMap::new(),
            instructions: String::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            files: BTreeMap::new(),
        };
        let mut instructions = Vec::new();
        for (path, text) in files {
            let text = text.replace("\r\n", "\n");
            let stem = path
                .rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".md"))
                .unwrap_or_default()
                .to_owned();
            let malformed = |message: String| ContentError::Malformed {
                file: path.to_owned(),
                message,
            };
            if let Some(rest) = path.strip_prefix("tools/").filter(|r| r.ends_with(".md")) {
                let (front, body): (ToolFront, &str) = split(&text).map_err(malformed)?;
                if front.name != stem {
                    return Err(malformed(format!(
                        "frontmatter name '{}' differs from the file name '{rest}'",
                        front.name
                    )));
                }
                let prose = collapse_prose(body);
                if prose.is_empty() {
                    return Err(malformed("the description is empty".to_owned()));
                }
                content.tools.insert(front.name, prose);
            } else if path.starts_with("instructions/") && path.ends_with(".md") {
                instructions.push((path.to_owned(), text.trim().to_owned()));
            } else if path.starts_with("prompts/") && path.ends_with(".md") {
                let (front, body): (PromptFront, &str) = split(&text).map_err(malformed)?;
                if front.name != stem {
                    return Err(malformed(format!(
                        "frontmatter name '{}' differs from the file name",
                        front.name
                    )));
                }
                if let Some(undeclared) = placeholders(body)
                    .into_iter()
                    .find(|p| !front.arguments.iter().any(|a| a.name == *p))
                {
                    return Err(malformed(format!(
                        "the body uses {{{{{undeclared}}}}}, which is not a declared argument"
                    )));
                }
                content.prompts.push(PromptDoc {
                    name: front.name,
                    title: front.title,
                    description: collapse_prose(&front.description),
                    arguments: front.arguments,
                    body: body.trim().to_owned(),
                });
            } else if path.starts_with("resources/") && path.ends_with(".md") {
                let (front, body): (ResourceFront, &str) = split(&text).map_err(malformed)?;
                if front.name != stem {
                    return Err(malformed(format!(
                        "frontmatter name '{}' differs from the file name",
                        front.name
                    )));
                }
                if content.resources.iter().any(|r| r.uri == front.uri) {
                    return Err(malformed(format!("uri '{}' is used twice", front.uri)));
                }
                content.resources.push(ResourceDoc {
                    name: front.name,
                    uri: front.uri,
                    title: front.title,
                    description: collapse_prose(&front.description),
                    mime_type: front
                        .mime_type
                        .unwrap_or_else(|| "text/markdown".to_owned()),
                    body: body.trim().to_owned(),
                });
            } else {
                content.files.insert(path.to_owned(), text);
            }
        }
        instructions.sort();
        content.instructions = instructions
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>()
            .join("\n\n");
        if !content.instructions.is_empty() {
            content.resources.push(ResourceDoc {
                name: INSTRUCTIONS_RESOURCE.to_owned(),
                uri: INSTRUCTIONS_URI.to_owned(),
                title: Some("Server instructions".to_owned()),
                description: "The server instructions (discovery workflow, SQL shape, writes, errors, modes) as a document, for clients that do not show them to the model.".to_owned(),
                mime_type: "text/markdown".to_owned(),
                body: content.instructions.clone(),
            });
        }
        Ok(content)
    }

    /// Checks that every offered tool has a description and every description a tool.
    pub fn check_tools(&self, offered: &[&str]) -> Result<(), ContentError> {
        for tool in offered {
            if !self.tools.contains_key(*tool) {
                return Err(ContentError::MissingDescription((*tool).to_owned()));
            }
        }
        for described in self.tools.keys() {
            if !offered.contains(&described.as_str()) {
                return Err(ContentError::OrphanDescription(described.clone()));
            }
        }
        Ok(())
    }
}

/// `{{name}}` placeholders (letters, digits, `_`) in `text`, in order of first use.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with("}}") {
            let name = after[..len].to_owned();
            if !names.contains(&name) {
                names.push(name);
            }
            rest = &after[len + 2..];
        } else {
            rest = after;
        }
    }
    names
}

/// Splits `---\n<yaml>\n---\n<body>`.
fn split<T: serde::de::DeserializeOwned>(text: &str) -> Result<(T, &str), String> {
    let rest = text
        .strip_prefix("---\n")
        .ok_or("the file must start with YAML frontmatter between '---' lines")?;
    let end = rest
        .find("\n---\n")
        .map(|i| (i, i + 5))
        .or_else(|| rest.strip_suffix("\n---").map(|r| (r.len(), rest.len())))
        .ok_or("the frontmatter has no closing '---' line")?;
    let front: T =
        serde_norway::from_str(&rest[..end.0]).map_err(|err| format!("frontmatter: {err}"))?;
    Ok((front, &rest[end.1..]))
}

/// Soft line breaks become spaces; blank lines keep paragraphs apart.
pub fn collapse_prose(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_collapse_soft_breaks_and_keep_paragraphs() {
        let content = Content::parse([(
            "tools/run_select_query.md",
            "---\nname: run_select_query\n---\nRun a\nSELECT.\n\nSecond\r\nparagraph.\n",
        )])
        .unwrap();
        assert_eq!(
            content.tools["run_select_query"],
            "Run a SELECT.\n\nSecond paragraph."
        );
        assert!(content.check_tools(&["run_select_query"]).is_ok());
        assert_eq!(
            content.check_tools(&["run_select_query", "server_info"]),
            Err(ContentError::MissingDescription("server_info".into()))
        );
        assert_eq!(
            content.check_tools(&[]),
            Err(ContentError::OrphanDescription("run_select_query".into()))
        );
    }

    #[test]
    fn malformed_files_are_named() {
        let err = Content::parse([("tools/a.md", "---\nname: b\n---\ntext")]).unwrap_err();
        assert!(err.to_string().starts_with("content/tools/a.md"), "{err}");
        let err = Content::parse([("tools/a.md", "no frontmatter")]).unwrap_err();
        assert!(err.to_string().contains("frontmatter"), "{err}");
    }

    #[test]
    fn the_embedded_content_parses() {
        let content = Content::embedded().unwrap();
        assert!(!content.tools.is_empty());
        assert_eq!(content.prompts.len(), 7);
        assert_eq!(content.resources.len(), 4);
        assert!(
            content.instructions.starts_with("# "),
            "{}",
            content.instructions
        );
        let synthetic = content.resources.last().unwrap();
        assert_eq!(synthetic.name, INSTRUCTIONS_RESOURCE);
        assert_eq!(synthetic.body, content.instructions);
    }

    #[test]
    fn prompt_placeholders_must_be_declared_arguments() {
        let ok = "---\nname: p\ndescription: d\narguments:\n  - name: a\n    description: x\n---\nUse {{a}} and {{ not_a_placeholder }} and {{}}.";
        let content = Content::parse([("prompts/p.md", ok)]).unwrap();
        assert_eq!(content.prompts[0].arguments[0].name, "a");
        let bad = "---\nname: p\ndescription: d\n---\nUse {{b}}.";
        let err = Content::parse([("prompts/p.md", bad)]).unwrap_err();
        assert!(err.to_string().contains("{{b}}"), "{err}");
        assert_eq!(placeholders("{{a}}{{b}}{{a}}{{c d}}"), ["a", "b"]);
    }

    #[test]
    fn instructions_join_in_file_order_and_are_republished() {
        let content = Content::parse([
            ("instructions/10-b.md", "# B\n"),
            ("instructions/00-a.md", "# A\n"),
        ])
        .unwrap();
        assert_eq!(content.instructions, "# A\n\n# B");
        assert_eq!(content.resources[0].uri, INSTRUCTIONS_URI);
        let none = Content::parse([]).unwrap();
        assert!(none.resources.is_empty());
    }
}
