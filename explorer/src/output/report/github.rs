//! Under GitHub Actions (`GITHUB_ACTIONS=true`): one `::error` annotation
//! per new bug (every bug, without `--baseline`), which GitHub shows on the
//! run and its pull request, and findings.md appended to the job's summary
//! page (`$GITHUB_STEP_SUMMARY`). The workflow-command syntax is GitHub's
//! ("Workflow commands for GitHub Actions").

use std::io::Write as _;
use std::path::Path;

use super::{Report, Status};

/// Whether this process runs as a GitHub Actions step.
pub fn active() -> bool {
    std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true")
}

/// The annotations for `report`: one line per new bug.
pub fn annotations(report: &Report) -> Vec<String> {
    let new = |id: &str| report.changes.as_ref().is_none_or(|c| c.status_of(id) == Some(Status::New));
    report
        .bugs
        .iter()
        .filter(|b| new(&b.id))
        .map(|b| {
            let title = format!("hvsim {}", b.id);
            let message =
                format!("{} ({}; blame: {})\nreplay: {}", b.summary, b.reproduction, b.blame.name(), b.replay_command);
            format!("::error title={}::{}", escape_property(&title), escape_data(&message))
        })
        .collect()
}

/// Appends `findings` (findings.md) to the job summary, if GitHub gave one.
pub fn append_summary(findings: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") else { return Ok(()) };
    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(Path::new(&path))?;
    writeln!(f, "{findings}")
}

fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_titles_are_escaped_as_github_reads_them() {
        assert_eq!(escape_data("50% lost\nreplay: x"), "50%25 lost%0Areplay: x");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }
}
