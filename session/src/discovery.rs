//! The tool part of the `exec` description, within a budget: the richest form that fits, so that
//! hundreds of tools do not cost thousands of tokens on every request.
//!
//! From richest to leanest: full TypeScript declarations; names with one-line descriptions;
//! names alone, grouped by namespace; namespaces with their tool counts. When a form leaner than
//! declarations is shown, the description tells the model how to read the rest from inside a
//! cell (`search_tools`, and each `ALL_TOOLS` entry's `declaration`).

use std::fmt::Write;

use codemode_protocol::limits::BYTES_PER_TOKEN;
use codemode_protocol::{
    MCP_TYPES_DECLARATION, ResultType, ToolDefinition, namespace_groups, tools_declaration,
};

/// How the description shows the tools, richest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolsShown {
    /// Every tool's TypeScript declaration.
    Declarations,
    /// Every tool's global name and the first line of its description.
    Summaries,
    /// Every tool's name, grouped by namespace.
    Names,
    /// Each namespace and how many tools it has.
    Namespaces,
}

/// The longest one-line description in the summaries form, in characters.
const SUMMARY_CHARACTERS: usize = 100;

/// The tools section for `tools` in at most `budget_tokens` (about 4 bytes each), and which form
/// it took. The leanest form is used even when it does not fit.
pub fn tools_section(tools: &[ToolDefinition], budget_tokens: u64) -> (String, ToolsShown) {
    let budget_bytes =
        usize::try_from(budget_tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX);
    let forms = [
        ToolsShown::Declarations,
        ToolsShown::Summaries,
        ToolsShown::Names,
        ToolsShown::Namespaces,
    ];
    let mut leanest = (String::new(), ToolsShown::Namespaces);
    for form in forms {
        let text = render(tools, form);
        if text.len() <= budget_bytes {
            return (text, form);
        }
        leanest = (text, form);
    }
    leanest
}

fn render(tools: &[ToolDefinition], form: ToolsShown) -> String {
    let discovery = "Not every tool is declared here. Inside a cell, `search_tools(\"words\")` returns the \
                     tools whose name or description has every word, and each `ALL_TOOLS` entry is \
                     `{ name, description, declaration }`: read the declarations you need with \
                     `text(search_tools(\"issue\").map((tool) => tool.declaration).join(\"\\n\\n\"))`, \
                     then call the tools in the next cell.";
    // The leaner forms still declare the shared MCP types once, as upstream does: the
    // declarations a cell reads from `ALL_TOOLS` name them.
    let discovery = if tools
        .iter()
        .any(|tool| tool.result_type == Some(ResultType::CallToolResult))
    {
        format!("{discovery}\n\n```ts\n{MCP_TYPES_DECLARATION}\n```")
    } else {
        discovery.to_owned()
    };
    match form {
        ToolsShown::Declarations => format!("```ts\n{}\n```", tools_declaration(tools)),
        ToolsShown::Summaries => {
            let mut out = String::from("Each line is `tools.<name>` and what it does.\n");
            for (namespace, members) in namespace_groups(tools) {
                if let Some(namespace) = namespace {
                    let _ = writeln!(out, "{namespace}:");
                }
                for tool in members {
                    let _ = writeln!(
                        out,
                        "- {}: {}",
                        tool.global_name(),
                        summary(&tool.description)
                    );
                }
            }
            format!("{out}\n{discovery}")
        }
        ToolsShown::Names => {
            let mut out =
                String::from("Tool names by namespace; call one as `tools.<namespace>__<name>`.\n");
            for (namespace, members) in namespace_groups(tools) {
                let names: Vec<&str> = members.iter().map(|tool| tool.name.name.as_str()).collect();
                let label = namespace.unwrap_or("(no namespace: `tools.<name>`)");
                let _ = writeln!(out, "- {label}: {}", names.join(", "));
            }
            format!("{out}\n{discovery}")
        }
        ToolsShown::Namespaces => {
            let mut out = String::from("Tool namespaces and how many tools each has.\n");
            for (namespace, members) in namespace_groups(tools) {
                let label = namespace.unwrap_or("(no namespace)");
                let _ = writeln!(out, "- {label}: {} tools", members.len());
            }
            format!("{out}\n{discovery}")
        }
    }
}

/// The first line of a description, cut to [`SUMMARY_CHARACTERS`].
fn summary(description: &str) -> String {
    let line = description.trim().lines().next().unwrap_or_default().trim();
    if line.chars().count() <= SUMMARY_CHARACTERS {
        return line.to_owned();
    }
    let cut: String = line.chars().take(SUMMARY_CHARACTERS - 1).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_protocol::ToolName;

    fn tools(count: usize) -> Vec<ToolDefinition> {
        (0..count)
            .map(|index| {
                ToolDefinition::function(
                    ToolName::namespaced(
                        if index % 2 == 0 { "a" } else { "b" },
                        format!("tool_{index}"),
                    ),
                    format!("Does thing {index}.\nMore detail that the summary leaves out."),
                )
            })
            .collect()
    }

    #[test]
    fn the_richest_form_that_fits_is_chosen() {
        let many = tools(40);
        let full = tools_section(&many, u64::MAX);
        assert_eq!(full.1, ToolsShown::Declarations);
        let summaries = render(&many, ToolsShown::Summaries);
        let names = render(&many, ToolsShown::Names);
        let namespaces = render(&many, ToolsShown::Namespaces);
        assert!(full.0.len() > summaries.len() && summaries.len() > names.len());
        assert!(names.len() > namespaces.len());
        let tokens = |text: &str| text.len() as u64 / BYTES_PER_TOKEN + 1;
        assert_eq!(
            tools_section(&many, tokens(&summaries)).1,
            ToolsShown::Summaries
        );
        assert_eq!(tools_section(&many, tokens(&names)).1, ToolsShown::Names);
        assert_eq!(
            tools_section(&many, tokens(&namespaces)).1,
            ToolsShown::Namespaces
        );
        assert_eq!(tools_section(&many, 1).1, ToolsShown::Namespaces);
    }

    #[test]
    fn summaries_keep_one_line_cut_to_a_hundred_characters() {
        assert_eq!(summary("One line.\nTwo."), "One line.");
        let long = "x".repeat(150);
        assert_eq!(summary(&long).chars().count(), SUMMARY_CHARACTERS);
        assert!(summary(&long).ends_with('…'));
    }
}
