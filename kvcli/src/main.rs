//! kvcli: a KV-Direct command-line client over a kernel raw socket (no DPDK).
//!
//! `kvcli [--config F] [--iface IF] [--json] [--hex] [--timeout-ms T] COMMAND`, or
//! without a command (or with `-i`) an interactive prompt. docs/CLIENTS.md has the
//! commands, the JSON format and the exit codes (also in `kvcli --help`).

mod args;
mod commands;
mod connect;
mod interactive;
mod stats;
mod txn;
mod value;

use args::{Cli, EXIT_ERROR, EXIT_OK};
use clap::Parser;

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Command names are case-insensitive (arguments that are not UTF-8 are left
    // to the parser as they are).
    if let Some(mut words) = argv
        .iter()
        .skip(1)
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<Vec<String>>>()
    {
        args::fold_command_case(&mut words);
        argv.truncate(1);
        argv.extend(words.into_iter().map(Into::into));
    }
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // --help/--version: 0; usage errors: 2.
            return if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
        }
    };
    // Bad input is reported before connecting (exit 2, not 3, without a server).
    if let Some(cmd) = &cli.cmd {
        if let Err(msg) = commands::check(cmd) {
            let o = commands::Outcome::fail(cmd.name(), cmd.key(), EXIT_ERROR, msg);
            o.print(cli.out);
            return o.code;
        }
    }
    let mut kv = match connect::connect(&cli.conn) {
        Ok(kv) => kv,
        Err((code, msg)) => {
            let name = cli.cmd.as_ref().map_or("connect", |c| c.name());
            let key = cli.cmd.as_ref().and_then(|c| c.key());
            let o = commands::Outcome::fail(name, key, code, msg);
            o.print(cli.out);
            return o.code;
        }
    };
    match &cli.cmd {
        Some(cmd) if !cli.interactive => {
            let o = commands::run(&mut kv, cmd, cli.out);
            o.print(cli.out);
            o.code
        }
        _ => interactive::run(&mut kv, cli.out),
    }
}
