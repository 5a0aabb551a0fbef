//! Which running dataplane a live command talks to.

use crate::telemetry::Telemetry;
use clap::Args;
use std::path::PathBuf;

/// `--file-prefix P`, or the dataplane file prefix of `--config FILE`.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// The dataplane's EAL file prefix (its telemetry socket lives under it).
    #[arg(long)]
    pub file_prefix: Option<String>,
    /// Take the file prefix from this config's `dataplane.file_prefix`.
    #[arg(long, default_value = "configs/memif.json")]
    pub config: PathBuf,
}

impl Target {
    /// The file prefix to use.
    pub fn prefix(&self) -> Result<String, String> {
        match &self.file_prefix {
            Some(p) => Ok(p.clone()),
            None => kvconf::Config::load(&self.config)
                .map(|c| c.dataplane.file_prefix)
                .map_err(|e| format!("{}: {e}", self.config.display())),
        }
    }

    /// Connects to the dataplane's telemetry socket.
    pub fn connect(&self) -> Result<Telemetry, String> {
        Telemetry::connect(&self.prefix()?)
    }
}
