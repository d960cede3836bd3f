//! What is down behind a tool provider ([`Unavailable`]): a downstream server that failed to
//! start, to list its tools, or that died, and why. The session shows it where the model looks
//! (the `exec` description, the hint on a cell's error that calls one of its tools) and an
//! operator asks for it (`codemode servers`); the tools of a part that is down are left out of
//! the cell's view until it is back.

pub use codemode_protocol::Unavailable;

/// For a cell's error that calls a tool of a part that is down (`tools.x__y is not a function`),
/// the hint that says so and why; `None` otherwise.
pub fn down_hint(error_text: &str, unavailable: &[Unavailable]) -> Option<String> {
    let first_line = error_text.lines().next().unwrap_or_default();
    let start = first_line.find("tools.")? + "tools.".len();
    let name: String = first_line[start..]
        .chars()
        .take_while(|character| {
            character.is_alphanumeric() || *character == '_' || *character == '$'
        })
        .collect();
    let down = unavailable.iter().find(|down| down.owns(&name))?;
    Some(format!(
        "tools.{name} is not available: the server \"{}\" is down ({}); its tools are left out \
         until it is back, and it is retried in the background.",
        down.name, down.reason
    ))
}

/// The `exec` description's paragraph on parts that are down; empty when none is.
pub fn down_section(unavailable: &[Unavailable]) -> String {
    if unavailable.is_empty() {
        return String::new();
    }
    let mut section = String::from(
        "\n\nServers down now (their tools are left out until they are back; they are retried \
         in the background):",
    );
    for down in unavailable {
        section.push_str(&format!("\n- {}: {}", down.name, down.reason));
    }
    section
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_of_a_down_servers_tool_gets_a_hint_naming_the_server_and_why() {
        let down = [Unavailable::new("github", "HTTP 401 Unauthorized")];
        let hint = down_hint(
            "TypeError: tools.github__list_repos is not a function\n    at cell.js:1:7",
            &down,
        )
        .unwrap();
        assert!(
            hint.contains("tools.github__list_repos is not available"),
            "{hint}"
        );
        assert!(
            hint.contains("\"github\" is down (HTTP 401 Unauthorized)"),
            "{hint}"
        );
        assert_eq!(
            down_hint("TypeError: tools.githubx__a is not a function", &down),
            None
        );
        assert_eq!(
            down_hint("TypeError: tools.fs__read is not a function", &down),
            None
        );
        assert_eq!(down_section(&[]), "");
        assert!(down_section(&down).contains("\n- github: HTTP 401 Unauthorized"));
    }
}
