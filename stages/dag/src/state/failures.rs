//! `failures.json`: each node's failure in the last build that ran it (see [`crate::state`]).

use std::collections::BTreeMap;

use super::StatePaths;
use crate::failure::NodeFailure;

/// The last failure of each node that failed the last time it ran (see the module doc);
/// empty when there is none, or the file is missing or damaged.
pub fn load_failures(paths: &StatePaths) -> BTreeMap<String, NodeFailure> {
    sky_fs::read(&paths.failures(), sky_fs::STATE)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Write the failures (removing the file when there is none).
pub fn save_failures(
    paths: &StatePaths,
    failures: &BTreeMap<String, NodeFailure>,
) -> std::io::Result<()> {
    if failures.is_empty() {
        return match std::fs::remove_file(paths.failures()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let json = serde_json::to_vec_pretty(failures).map_err(std::io::Error::other)?;
    sky_fs::write(&paths.failures(), &json)
}
