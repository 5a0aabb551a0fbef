//! Command-line arguments (clap): where the server is, output options, commands.

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

/// Exit codes, shown in `--help` (docs/CLIENTS.md has the same table).
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success (also a CAS whose comparison failed: see its output)
  1  key not found (get, del, or an update of a missing key)
  2  error: server status, bad input, bad config, no permission, no such interface,
     usage error
  3  server unreachable: no ACCEPT within the connect timeout, or a request timed out

Keys and values are text, or hex with a 0x prefix (0x alone is empty; \\0x... is the
text 0x...). Integers are decimal, -decimal or 0x hex. Run without a command (or with
-i) for the interactive mode. Needs root or CAP_NET_RAW (raw socket). The protocol has no server-statistics
operation: `stats` shows this client's counters; `ctlplane` shows the server's.";

/// Success.
pub const EXIT_OK: i32 = 0;
/// Key not found.
pub const EXIT_NOT_FOUND: i32 = 1;
/// Any error but an unreachable server.
pub const EXIT_ERROR: i32 = 2;
/// Server unreachable or request timed out.
pub const EXIT_UNREACHABLE: i32 = 3;

/// kvcli: a KV-Direct client over a kernel raw socket.
#[derive(Debug, Parser)]
#[command(name = "kvcli", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Where the server is.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Output options.
    #[command(flatten)]
    pub out: OutArgs,
    /// Interactive mode (also the default without a command).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// `put`: read the value from stdin, byte for byte (any bytes; no text/hex
    /// parsing), as redis-cli's -x.
    #[arg(short = 'x')]
    pub stdin_value: bool,
    /// Run the command N times (redis-cli's -r); exits with the highest code.
    #[arg(short = 'r', long = "repeat", value_name = "N", default_value_t = 1)]
    pub repeat: u64,
    /// With -r: seconds between two runs (redis-cli's -i; may be fractional).
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub interval: f64,
    /// The command; none: interactive mode.
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
}

/// How to reach the server: a config file, or every address by hand.
#[derive(Debug, Args, Clone)]
pub struct ConnArgs {
    /// Topology config: server = its `dataplane` mac/ip, client = its `pktgen`
    /// mac/ip, QPs = its `clients`, partitions = the dataplane's lcores.
    #[arg(
        long,
        global = true,
        env = "KVCLI_CONFIG",
        default_value = "configs/tap.json"
    )]
    pub config: PathBuf,
    /// Network interface of the raw socket.
    #[arg(long, global = true, env = "KVCLI_IFACE", default_value = "kvtap0")]
    pub iface: String,
    /// Server IPv4 address (by-hand mode: needs --server-mac, --client-ip,
    /// --client-mac, --qpn/--rkey; the config file is not read).
    #[arg(long, global = true, value_name = "IP")]
    pub server: Option<String>,
    /// Server MAC (aa:bb:cc:dd:ee:ff).
    #[arg(long, global = true, value_name = "MAC")]
    pub server_mac: Option<String>,
    /// Client IPv4 address (one not configured on the host).
    #[arg(long, global = true, value_name = "IP")]
    pub client_ip: Option<String>,
    /// Client MAC.
    #[arg(long, global = true, value_name = "MAC")]
    pub client_mac: Option<String>,
    /// Client QPN (repeatable). With a config: use only these of its clients.
    #[arg(long, global = true, value_name = "N")]
    pub qpn: Vec<String>,
    /// R_Key of the --qpn at the same position (decimal or 0x hex).
    #[arg(long, global = true, value_name = "K")]
    pub rkey: Vec<String>,
    /// Server partitions (its worker lcores); default: from the config, or 1.
    #[arg(long, global = true, value_name = "P")]
    pub partitions: Option<String>,
    /// Another node of a replicated cluster (MAC,IP; repeatable), besides the
    /// config's `replication.client_nodes`: tried in turn when the server does not
    /// answer. Writes refused NOT_MASTER go to the master the
    /// answer names, whatever this says.
    #[arg(long, global = true, value_name = "MAC,IP")]
    pub node: Vec<String>,
    /// Connect timeout and per-request timeout in ms (default 1000 and 3000).
    #[arg(long, global = true, value_name = "T")]
    pub timeout_ms: Option<String>,
    /// The tenant credentials file (`{"tenant": ID, "secret": "HEX"}`, written by
    /// `ctlplane tenants add`): open the QPs as that tenant, keys in its namespace.
    #[arg(long, global = true, env = "KVD_TENANT_FILE", value_name = "FILE")]
    pub tenant_file: Option<std::path::PathBuf>,
}

/// Output options.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct OutArgs {
    /// One JSON object per command on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print values as hex even when they are printable text.
    #[arg(long, global = true)]
    pub hex: bool,
}

/// Options of the vector and scalar-update commands.
#[derive(Debug, Args, Clone)]
pub struct ElemArgs {
    /// Element width in bytes: 1, 2, 4 or 8.
    #[arg(long, short = 'w', default_value = "8")]
    pub width: String,
    /// Elements are signed (MIN/MAX/LT/… compare signed; printed signed).
    #[arg(long)]
    pub signed: bool,
}

/// A command (also a line of the interactive mode).
#[derive(Debug, Subcommand, Clone)]
pub enum Cmd {
    /// GET: print the value (exit 1 if absent).
    Get {
        /// Key.
        key: String,
    },
    /// PUT a value.
    Put {
        /// Key.
        key: String,
        /// Value (text or 0x hex); omitted with -x (read from stdin).
        value: Option<String>,
        /// The value read from stdin (-x).
        #[arg(skip)]
        stdin: Option<Vec<u8>>,
    },
    /// DELETE (exit 1 if absent).
    #[command(alias = "delete")]
    Del {
        /// Key.
        key: String,
    },
    /// Compare-and-delete: deletes KEY only if it holds VALUE (releasing a lock only its
    /// owner holds); prints `deleted`, or the value it holds instead (exit 1).
    Cad {
        /// Key.
        key: String,
        /// The value the key must hold (text or 0x hex).
        value: String,
    },
    /// Fetch-and-add N (default 1) to a 64-bit counter (an 8-byte LE value); prints
    /// the new value.
    Incr {
        /// Key (its value must be 8 bytes, e.g. `put KEY 0x0000000000000000`).
        key: String,
        /// Amount (negative: decrement).
        #[arg(allow_negative_numbers = true)]
        n: Option<String>,
    },
    /// Compare-and-swap a 64-bit value: swaps to NEW iff it is EXPECTED; prints
    /// whether it swapped and the value before.
    Cas {
        /// Key.
        key: String,
        /// Expected value.
        #[arg(allow_negative_numbers = true)]
        expected: String,
        /// New value.
        #[arg(allow_negative_numbers = true)]
        new: String,
    },
    /// UPDATE_S2S: atomic FUNC on a scalar of --width bytes; prints the value before
    /// and after.
    Update {
        /// Key.
        key: String,
        /// add, sub, swap, cas, min, max, and, or, xor, or an id (user: 128-255).
        func: String,
        /// Parameter (CAS: expected).
        #[arg(allow_negative_numbers = true)]
        param: String,
        /// Second parameter (CAS: new; user functions).
        #[arg(allow_negative_numbers = true)]
        param2: Option<String>,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// PUT a vector: comma-separated integers of --width bytes, little-endian.
    Vput {
        /// Key.
        key: String,
        /// Elements, e.g. 1,2,3.
        #[arg(allow_hyphen_values = true)]
        elems: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// GET a vector: print its elements.
    Vget {
        /// Key.
        key: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// UPDATE_S2V fetch-add: add DELTA to every element; prints the vector before
    /// and after.
    Vadd {
        /// Key.
        key: String,
        /// Amount added to each element.
        #[arg(allow_negative_numbers = true)]
        delta: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// UPDATE_S2V: FUNC with a scalar on every element.
    Vupdate {
        /// Key.
        key: String,
        /// Function name or id (see `update`).
        func: String,
        /// Parameter.
        #[arg(allow_negative_numbers = true)]
        param: String,
        /// Second parameter (CAS: new).
        #[arg(allow_negative_numbers = true)]
        param2: Option<String>,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// UPDATE_V2V: FUNC element-wise with a Δ vector of the same length.
    Vapply {
        /// Key.
        key: String,
        /// Function name or id (not cas).
        func: String,
        /// Δ elements, e.g. 1,0,5.
        #[arg(allow_hyphen_values = true)]
        deltas: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// REDUCE: fold every element with FUNC from --init; prints Σ.
    Reduce {
        /// Key.
        key: String,
        /// add, sub, swap, min, max, and, or, xor, or a user id.
        func: String,
        /// Initial Σ (default 0; use e.g. the largest value with min).
        #[arg(long, default_value = "0", allow_negative_numbers = true)]
        init: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// FILTER: print the elements that pass `x PRED PARAM`.
    Filter {
        /// Key.
        key: String,
        /// eq, ne, lt, le, gt, ge, any (x & PARAM != 0), or an id.
        pred: String,
        /// Parameter.
        #[arg(allow_negative_numbers = true)]
        param: String,
        #[command(flatten)]
        elem: ElemArgs,
    },
    /// One transaction: ops separated by `,` — `get KEY [=VALUE|absent]`, `put KEY
    /// VALUE`, `del KEY`, `incr KEY [N]`; all or nothing (exit 1 when aborted).
    Tx {
        /// The ops, e.g. `get a =100 , get b =0 , put a 90 , put b 10`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        script: Vec<String>,
    },
    /// This client's transport counters and a measured round-trip time (the
    /// protocol has no server-statistics op: `ctlplane` shows the server's).
    Stats {
        /// Round trips measured (GETs of a probe key).
        #[arg(long, default_value = "100")]
        count: String,
    },
}

impl Cmd {
    /// The command's name (JSON `cmd` field).
    pub fn name(&self) -> &'static str {
        match self {
            Cmd::Get { .. } => "get",
            Cmd::Put { .. } => "put",
            Cmd::Del { .. } => "del",
            Cmd::Cad { .. } => "cad",
            Cmd::Incr { .. } => "incr",
            Cmd::Cas { .. } => "cas",
            Cmd::Update { .. } => "update",
            Cmd::Vput { .. } => "vput",
            Cmd::Vget { .. } => "vget",
            Cmd::Vadd { .. } => "vadd",
            Cmd::Vupdate { .. } => "vupdate",
            Cmd::Vapply { .. } => "vapply",
            Cmd::Reduce { .. } => "reduce",
            Cmd::Filter { .. } => "filter",
            Cmd::Stats { .. } => "stats",
            Cmd::Tx { .. } => "tx",
        }
    }

    /// The key argument, if the command has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Cmd::Get { key }
            | Cmd::Put { key, .. }
            | Cmd::Del { key }
            | Cmd::Cad { key, .. }
            | Cmd::Incr { key, .. }
            | Cmd::Cas { key, .. }
            | Cmd::Update { key, .. }
            | Cmd::Vput { key, .. }
            | Cmd::Vget { key, .. }
            | Cmd::Vadd { key, .. }
            | Cmd::Vupdate { key, .. }
            | Cmd::Vapply { key, .. }
            | Cmd::Reduce { key, .. }
            | Cmd::Filter { key, .. } => Some(key),
            Cmd::Stats { .. } | Cmd::Tx { .. } => None,
        }
    }
}

/// Command names for completion and `help` in the interactive mode.
pub const COMMANDS: &[&str] = &[
    "get", "put", "del", "cad", "incr", "cas", "update", "vput", "vget", "vadd", "vupdate",
    "vapply", "reduce", "filter", "stats", "tx", "help", "quit", "exit",
];

/// Lowercases the command word of `args` (the arguments after the binary name, or
/// the words of one interactive line): command names are case-insensitive, as in
/// redis-cli (`GET k` is `get k`); keys and values keep their case. The command word
/// is the first word that is neither an option nor the value of one (options that
/// take a value are found in the parser's own definition).
pub fn fold_command_case(args: &mut [String]) {
    let cli = Cli::command();
    let takes_value = |long: &str| {
        cli.get_arguments()
            .any(|a| a.get_long() == Some(long) && a.get_action().takes_values())
    };
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        if let Some(long) = w.strip_prefix("--") {
            i += if !long.contains('=') && takes_value(long) {
                2
            } else {
                1
            };
            continue;
        }
        if w.len() > 1 && w.starts_with('-') {
            i += 1;
            continue;
        }
        let lower = w.to_ascii_lowercase();
        if COMMANDS.contains(&lower.as_str()) {
            args[i] = lower;
        }
        return;
    }
}

/// One line of the interactive mode: a command and output options.
#[derive(Debug, Parser)]
#[command(name = "kvcli", no_binary_name = true, disable_version_flag = true)]
pub struct Line {
    /// Output options for this line.
    #[command(flatten)]
    pub out: OutArgs,
    /// The command.
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
        Line::command().debug_assert();
    }

    #[test]
    fn parses_commands_and_globals() {
        let c = Cli::try_parse_from(["kvcli", "get", "k", "--json", "--iface", "x"]).unwrap();
        assert!(c.out.json);
        assert_eq!(c.conn.iface, "x");
        assert!(matches!(c.cmd, Some(Cmd::Get { ref key }) if key == "k"));
        for (given, want) in [
            (&["GET", "Key"][..], &["get", "Key"][..]),
            (
                &["--config", "GET", "Put", "PUT", "x"],
                &["--config", "GET", "put", "PUT", "x"],
            ),
            (
                &["--json", "-i", "Vget", "K"],
                &["--json", "-i", "vget", "K"],
            ),
            (
                &["--timeout-ms=5", "INCR", "n"],
                &["--timeout-ms=5", "incr", "n"],
            ),
            (&["Frobnicate"], &["Frobnicate"]),
        ] {
            let mut v: Vec<String> = given.iter().map(|s| s.to_string()).collect();
            fold_command_case(&mut v);
            assert_eq!(v, want);
        }
        let c = Cli::try_parse_from(["kvcli", "incr", "k", "-5"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Incr { n: Some(ref n), .. }) if n == "-5"));
        let c = Cli::try_parse_from(["kvcli", "vput", "k", "-1,2", "-w", "2"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Vput { ref elems, .. }) if elems == "-1,2"));
        assert!(Cli::try_parse_from(["kvcli", "get"]).is_err());
        assert!(Cli::try_parse_from(["kvcli", "frobnicate"]).is_err());
        let l = Line::try_parse_from(["put", "a", "1"]).unwrap();
        assert_eq!(l.cmd.name(), "put");
        for name in COMMANDS {
            let kind = Line::try_parse_from([*name, "--help"]).unwrap_err().kind();
            let is_cmd = !matches!(*name, "help" | "quit" | "exit");
            assert_eq!(
                kind == clap::error::ErrorKind::DisplayHelp,
                is_cmd,
                "{name}"
            );
        }
    }
}
