//! The interactive mode: a prompt with line editing, history in
//! `~/.kvcli_history` and completion of command names (rustyline). Works on a
//! pipe too (no prompt then): `printf 'put a 1\nget a\nquit\n' | kvcli`.

use crate::args::{Line, OutArgs, COMMANDS};
use crate::commands::{self, Kv};
use clap::{CommandFactory, Parser};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Completes the command name (the first word).
struct KvHelper;

impl Completer for KvHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let head = line.get(..pos).unwrap_or(line);
        let start = head.len() - head.trim_start().len();
        let word = &head[start..];
        if word.contains(char::is_whitespace) {
            return Ok((pos, Vec::new()));
        }
        let v = COMMANDS
            .iter()
            .filter(|c| c.starts_with(word))
            .map(|c| Pair {
                display: c.to_string(),
                replacement: format!("{c} "),
            })
            .collect();
        Ok((start, v))
    }
}

impl Hinter for KvHelper {
    type Hint = String;
}
impl Highlighter for KvHelper {}
impl Validator for KvHelper {}
impl Helper for KvHelper {}

/// `~/.kvcli_history`, if `$HOME` is set.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".kvcli_history"))
}

fn help_text() -> String {
    let mut c = Line::command()
        .override_usage("<command> [args] [--json] [--hex]   (also: help, quit)")
        .help_template("{usage-heading} {usage}\n\n{all-args}");
    format!(
        "{}\nValues: text or 0x hex. `<command> --help` for a command's arguments.",
        c.render_help()
    )
}

/// `help CMD`: that command's arguments (its `--help`), or what the commands are.
fn command_help(cmd: &str) -> String {
    let name = cmd.to_ascii_lowercase();
    match Line::command().find_subcommand_mut(&name) {
        Some(c) => c.render_help().to_string(),
        None => format!("no command {cmd:?}; `help` lists them"),
    }
}

/// Runs the interactive mode until `quit`, `exit` or end of input; returns the
/// exit code: at a terminal 0 (2 if the line editor could not start); over a pipe
/// the highest exit code of its lines (a script learns that a line failed).
pub fn run(kv: &mut Kv, out: OutArgs) -> i32 {
    let mut rl: Editor<KvHelper, DefaultHistory> = match Editor::new() {
        Ok(rl) => rl,
        Err(e) => {
            eprintln!("kvcli: cannot start the line editor: {e}");
            return crate::args::EXIT_ERROR;
        }
    };
    rl.set_helper(Some(KvHelper));
    let history = history_path();
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    let tty = std::io::stdin().is_terminal();
    let mut worst = crate::args::EXIT_OK;
    let prompt = if tty { "kvcli> " } else { "" };
    if tty && !out.json {
        println!("kvcli: connected; `help` lists the commands, `quit` leaves.");
    }
    loop {
        let line = match rl.readline(prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("kvcli: {e}");
                break;
            }
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if tty {
            let _ = rl.add_history_entry(line);
            if let Some(h) = &history {
                let _ = rl.save_history(h);
            }
        }
        let Some(mut words) = shlex::split(line) else {
            eprintln!("kvcli: unbalanced quotes in {line:?}");
            continue;
        };
        crate::args::fold_command_case(&mut words);
        match words.first().map(String::as_str) {
            Some("quit" | "exit" | "q") => break,
            Some("help" | "?") => {
                let text = match words.get(1) {
                    Some(cmd) => command_help(cmd),
                    None => help_text(),
                };
                let _ = writeln!(std::io::stdout(), "{text}");
                continue;
            }
            _ => {}
        }
        match Line::try_parse_from(&words) {
            Ok(l) => {
                let o = OutArgs {
                    json: out.json || l.out.json,
                    hex: out.hex || l.out.hex,
                };
                let outcome = commands::run(kv, &l.cmd, o);
                outcome.print(o);
                worst = worst.max(outcome.code);
            }
            Err(e) => {
                let _ = e.print();
                worst = worst.max(crate::args::EXIT_ERROR);
            }
        }
    }
    if tty {
        crate::args::EXIT_OK
    } else {
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustyline::history::DefaultHistory;

    #[test]
    fn completes_command_names() {
        let h = DefaultHistory::new();
        let ctx = Context::new(&h);
        let (start, v) = KvHelper.complete("v", 1, &ctx).unwrap();
        assert_eq!(start, 0);
        let names: Vec<&str> = v.iter().map(|p| p.display.as_str()).collect();
        assert_eq!(names, ["vput", "vget", "vadd", "vupdate", "vapply"]);
        let (_, v) = KvHelper.complete("get k", 5, &ctx).unwrap();
        assert!(v.is_empty(), "only the command name");
        let (start, v) = KvHelper.complete("  qu", 4, &ctx).unwrap();
        assert_eq!((start, v.len()), (2, 1));
        assert!(help_text().contains("incr"));
        assert!(
            command_help("GET").contains("<KEY>"),
            "{}",
            command_help("get")
        );
        assert!(command_help("nope").contains("no command"));
    }
}
