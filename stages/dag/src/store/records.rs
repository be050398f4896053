//! Build records: the keys one build produced or used, the roots of gc.

use super::*;

impl Store {
    /// Record the keys of a finished build.
    pub fn put_build(&self, keys: Vec<Digest>) -> Result<()> {
        // Build records are gc roots only; a read-only store is not collected by this build.
        if self.read_only {
            return Ok(());
        }
        let time_ms = now_ms();
        let rec = BuildRecord { time_ms, keys };
        let bytes = serde_json::to_vec(&rec).unwrap_or_default();
        let tmp = self.tmp("build");
        std::fs::write(&tmp, bytes).map_err(|e| DagError::io("write", &tmp, e))?;
        let unique = tmp
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("build.tmp")
            .trim_end_matches(".tmp")
            .to_string();
        self.publish(
            &tmp,
            &self
                .root
                .join("builds")
                .join(format!("{time_ms:015}-{unique}.json")),
        )
    }
}
