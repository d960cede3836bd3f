//! `codemode config check FILE`: what codemode reads from a configuration, as a user checks it
//! before trusting it to an agent. Each server with its transport as written, the names (never
//! the values) of the headers and variables it sets, each variable it uses and whether it
//! resolved, and whether it will start; then what was ignored. Secrets never appear: values come
//! from variables, and only their lengths are shown.

use std::fmt::Write;

use super::expand::Resolution;
use super::{ConfigServers, Outcome};

/// The report, ready to print.
pub fn render(path: &std::path::Path, config: &ConfigServers) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", path.display(), config.format.describe());
    for report in &config.reports {
        let state = match &report.outcome {
            Outcome::Ready => "ready".to_owned(),
            Outcome::Disabled => "disabled (skipped)".to_owned(),
            Outcome::Refused(why) => format!("will not start: {why}"),
        };
        let _ = writeln!(out, "\nserver \"{}\": {state}", report.name);
        let _ = writeln!(out, "  {}", report.transport);
        if !report.secrets.is_empty() {
            let _ = writeln!(
                out,
                "  sets (values not shown): {}",
                report.secrets.join(", ")
            );
        }
        for (variable, resolution) in &report.used {
            let resolved = match resolution {
                Resolution::Set(length) => format!("set ({length} characters)"),
                Resolution::Defaulted => "not set: its default is used".to_owned(),
                Resolution::Missing => "NOT SET".to_owned(),
            };
            let _ = writeln!(out, "  variable {variable}: {resolved}");
        }
    }
    if config.reports.is_empty() {
        let _ = writeln!(out, "\nno servers");
    }
    if !config.warnings.is_empty() {
        let _ = writeln!(out, "\nignored:");
        for warning in &config.warnings {
            let _ = writeln!(out, "  {warning}");
        }
    }
    out
}
