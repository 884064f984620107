//! Talking to the operator on the terminal: confirmations and progress, on stderr.

use std::io::{BufRead, IsTerminal, Write};

use idempotency_operations::Progress;

use crate::failure::Failure;

/// Asks `question` and waits for `y`; refuses (a usage failure, exit 2) when stdin is no
/// terminal, since a script must say `--yes`.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(Failure::Usage(format!(
            "{question}: not confirmed (stdin is not a terminal; pass --yes)"
        )));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|error| Failure::Other(format!("stdin: {error}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Failure::Usage("not confirmed".to_owned()))
    }
}

/// A progress line on stderr, rewritten after each batch, only when stderr is a terminal.
pub(crate) struct ProgressLine {
    shown: bool,
    verb: &'static str,
}

impl ProgressLine {
    /// A progress line for a scan whose found records are `verb` (`found`, `purged`).
    pub(crate) fn new(verb: &'static str) -> Self {
        Self {
            shown: std::io::stderr().is_terminal(),
            verb,
        }
    }

    /// Shows `progress`.
    pub(crate) fn show(&mut self, progress: &Progress) {
        if self.shown {
            let cursor = progress.cursor.as_ref().map(|c| c.to_string());
            eprint!(
                "\r\x1b[2Kexamined {}, {} {}{}",
                progress.examined,
                self.verb,
                progress.done,
                cursor.map(|c| format!(" (cursor {c})")).unwrap_or_default()
            );
        }
    }

    /// Ends the line.
    pub(crate) fn finish(&self) {
        if self.shown {
            eprintln!();
        }
    }
}
