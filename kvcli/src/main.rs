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

/// `-x`: the `put` value from stdin, byte for byte.
fn read_stdin_value(cli: &mut Cli) -> Result<(), String> {
    if !cli.stdin_value {
        return Ok(());
    }
    let Some(args::Cmd::Put { stdin, .. }) = cli.cmd.as_mut() else {
        return Err("-x reads the value of a `put` from stdin".into());
    };
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
        .map_err(|e| format!("-x: reading stdin: {e}"))?;
    *stdin = Some(b);
    Ok(())
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
    let mut cli = cli;
    if let Err(msg) = read_stdin_value(&mut cli) {
        let o = commands::Outcome::fail("put", None, EXIT_ERROR, msg);
        o.print(cli.out);
        return o.code;
    }
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
            let mut worst = EXIT_OK;
            for i in 0..cli.repeat.max(1) {
                if i > 0 && cli.interval > 0.0 {
                    std::thread::sleep(std::time::Duration::from_secs_f64(cli.interval));
                }
                let o = commands::run(&mut kv, cmd, cli.out);
                o.print(cli.out);
                worst = worst.max(o.code);
            }
            worst
        }
        _ => interactive::run(&mut kv, cli.out),
    }
}
