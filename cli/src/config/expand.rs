//! Variables in configuration values, as the clients that wrote the file expand them:
//! `${VAR}` and `${VAR:-default}` (Claude Code), `${env:VAR}` (VS Code, Cursor), `${input:id}`
//! (VS Code's inputs: codemode cannot prompt, so the value comes from the environment variable
//! `CODEMODE_INPUT_<ID>`), `${workspaceFolder}`, `${userHome}` and `${pathSeparator}`.
//!
//! A variable that is not set (and has no default) is an error naming the variable; the caller
//! adds the server and the key. What was used is recorded, so that `codemode config check` can
//! say which variables resolved without showing their values.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where variables come from.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    /// The environment codemode runs in.
    pub environment: BTreeMap<String, String>,
    /// `${workspaceFolder}`: the folder the configuration belongs to.
    pub workspace: Option<PathBuf>,
    /// `${userHome}`.
    pub home: Option<PathBuf>,
    /// The ids a VS Code configuration declares in `inputs`.
    pub inputs: Vec<String>,
}

/// How one variable resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It is set (its value has this many characters).
    Set(usize),
    /// It is not set; its default was used.
    Defaulted,
    /// It is not set and has no default.
    Missing,
}

/// A variable a value used, as written (`GITHUB_TOKEN`, `env:GITHUB_TOKEN`, `input:token`), and
/// how it resolved.
pub type Used = (String, Resolution);

/// The environment variable that holds VS Code input `id`: `CODEMODE_INPUT_` and the id in upper
/// case, with every character that is not a letter or digit as `_`.
pub fn input_variable(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("CODEMODE_INPUT_{id}")
}

impl Variables {
    /// `text` with its variables expanded; each variable met is added to `used`. The error names
    /// the variable that could not be resolved, and what to do.
    pub fn expand(&self, text: &str, used: &mut Vec<Used>) -> Result<String, String> {
        let mut expanded = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            expanded.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("\"${{\" without a closing \"}}\" in {text:?}"))?;
            let variable = &after[..end];
            expanded.push_str(&self.resolve(variable, used)?);
            rest = &after[end + 1..];
        }
        expanded.push_str(rest);
        Ok(expanded)
    }

    /// The value of one `${...}`.
    fn resolve(&self, variable: &str, used: &mut Vec<Used>) -> Result<String, String> {
        let mut record = |resolution: Resolution| {
            if !used.iter().any(|(name, _)| name == variable) {
                used.push((variable.to_owned(), resolution));
            }
        };
        let path = |path: &Option<PathBuf>, what: &str| {
            path.as_ref()
                .map(|path| path.display().to_string())
                .ok_or_else(|| format!("${{{variable}}}: {what} is not known here"))
        };
        match variable {
            "workspaceFolder" => return path(&self.workspace, "the workspace folder"),
            "userHome" => return path(&self.home, "the home folder (HOME is not set)"),
            "pathSeparator" | "/" => return Ok("/".to_owned()),
            _ => {}
        }
        if let Some(id) = variable.strip_prefix("input:") {
            let name = input_variable(id);
            if !self.inputs.iter().any(|input| input == id) {
                record(Resolution::Missing);
                return Err(format!(
                    "${{input:{id}}} names no input: the file's \"inputs\" declares no id \"{id}\""
                ));
            }
            return match self.environment.get(&name) {
                Some(value) => {
                    record(Resolution::Set(value.chars().count()));
                    Ok(value.clone())
                }
                None => {
                    record(Resolution::Missing);
                    Err(format!(
                        "${{input:{id}}} is not set: codemode cannot prompt for inputs, so set \
                         the environment variable {name}"
                    ))
                }
            };
        }
        let (name, default) = match variable.strip_prefix("env:") {
            Some(name) => (name, None),
            None => match variable.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (variable, None),
            },
        };
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|character| character.is_ascii_alphanumeric() || character == '_');
        if !valid {
            return Err(format!(
                "${{{variable}}} is not a variable codemode knows (${{NAME}}, ${{NAME:-default}}, \
                 ${{env:NAME}}, ${{input:id}}, ${{workspaceFolder}}, ${{userHome}})"
            ));
        }
        match (self.environment.get(name), default) {
            (Some(value), _) => {
                record(Resolution::Set(value.chars().count()));
                Ok(value.clone())
            }
            (None, Some(default)) => {
                record(Resolution::Defaulted);
                Ok(default.to_owned())
            }
            (None, None) => {
                record(Resolution::Missing);
                Err(format!(
                    "${{{variable}}} is not set: set the environment variable {name}, or give a \
                     default as ${{{name}:-default}}"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variables() -> Variables {
        Variables {
            environment: BTreeMap::from([
                ("TOKEN".to_owned(), "s3cret".to_owned()),
                (
                    "CODEMODE_INPUT_GH_TOKEN".to_owned(),
                    "from-input".to_owned(),
                ),
            ]),
            workspace: Some("/work/project".into()),
            home: Some("/home/me".into()),
            inputs: vec!["gh-token".to_owned()],
        }
    }

    #[test]
    fn each_clients_syntax_expands_and_records_what_it_used() {
        let variables = variables();
        let mut used = Vec::new();
        let expand = |text: &str, used: &mut Vec<Used>| variables.expand(text, used).unwrap();
        assert_eq!(expand("Bearer ${TOKEN}", &mut used), "Bearer s3cret");
        assert_eq!(expand("${env:TOKEN}", &mut used), "s3cret");
        assert_eq!(expand("${REGION:-eu}-1", &mut used), "eu-1");
        assert_eq!(expand("${input:gh-token}", &mut used), "from-input");
        assert_eq!(
            expand("${workspaceFolder}/data:${userHome}", &mut used),
            "/work/project/data:/home/me"
        );
        assert_eq!(
            expand("no variables, $HOME stays", &mut used),
            "no variables, $HOME stays"
        );
        assert_eq!(
            used,
            [
                ("TOKEN".to_owned(), Resolution::Set(6)),
                ("env:TOKEN".to_owned(), Resolution::Set(6)),
                ("REGION:-eu".to_owned(), Resolution::Defaulted),
                ("input:gh-token".to_owned(), Resolution::Set(10)),
            ]
        );
    }

    #[test]
    fn what_cannot_be_resolved_is_an_error_naming_it() {
        let variables = variables();
        let error = |text: &str| variables.expand(text, &mut Vec::new()).unwrap_err();
        assert!(
            error("${GITHUB_TOKEN}")
                .contains("${GITHUB_TOKEN} is not set: set the environment variable GITHUB_TOKEN")
        );
        assert!(error("${env:NOPE}").contains("environment variable NOPE"));
        assert!(error("${input:other}").contains("declares no id \"other\""));
        assert!(error("${config:x.y}").contains("not a variable codemode knows"));
        assert!(error("Bearer ${TOKEN").contains("without a closing"));
        let undeclared = Variables {
            inputs: vec!["key".to_owned()],
            ..Variables::default()
        };
        assert!(
            undeclared
                .expand("${input:key}", &mut Vec::new())
                .unwrap_err()
                .contains("set the environment variable CODEMODE_INPUT_KEY")
        );
    }
}
