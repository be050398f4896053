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
        // What `serde_json::to_vec(&BuildRecord { time_ms, keys })` writes, without a string
        // per key (a build of thousands of nodes records thousands of keys).
        let mut bytes = Vec::with_capacity(32 + keys.len() * 67);
        bytes.extend_from_slice(format!("{{\"time_ms\":{time_ms},\"keys\":[").as_bytes());
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                bytes.push(b',');
            }
            bytes.push(b'"');
            k.write_hex(&mut bytes);
            bytes.push(b'"');
        }
        bytes.extend_from_slice(b"]}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_records_are_the_json_of_their_struct() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let keys = vec![Digest::of(b"a"), Digest::of(b"b")];
        store.put_build(keys.clone()).unwrap();
        store.put_build(Vec::new()).unwrap();
        let mut recs: Vec<BuildRecord> = std::fs::read_dir(store.root().join("builds"))
            .unwrap()
            .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
            .collect();
        recs.sort_by_key(|r| r.keys.len());
        assert_eq!(recs[0].keys, Vec::<Digest>::new());
        assert_eq!(recs[1].keys, keys);
        let back = serde_json::to_vec(&recs[1]).unwrap();
        let mut again = Vec::new();
        again.extend_from_slice(format!("{{\"time_ms\":{},\"keys\":[", recs[1].time_ms).as_bytes());
        again.extend_from_slice(format!("\"{}\",\"{}\"]}}", keys[0], keys[1]).as_bytes());
        assert_eq!(back, again);
    }
}
