//! Reading the workspace state ahead of a build.

use std::path::Path;

use super::{LastBuild, StatePaths};

/// What a build starts from in the workspace state (the last build and the stat cache), read
/// ahead of the build: a front end can load it on another thread while it parses its
/// manifest. [`Preloaded::current`] re-reads a file that changed in the meantime (another
/// build finished), so reading early never gives a stale state.
#[derive(Debug)]
pub struct Preloaded {
    last: LastBuild,
    last_id: (Option<FileId>, Option<FileId>),
    statcache: crate::statcache::StatCache,
    statcache_id: Option<FileId>,
}

/// Size, mtime and inode: a rewrite (temp file + rename) changes the inode.
type FileId = (u64, Option<std::time::SystemTime>, u64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).ok()?;
    Some((md.len(), md.modified().ok(), md.ino()))
}

impl Preloaded {
    /// Read the state under `paths`.
    pub fn load(paths: &StatePaths) -> Preloaded {
        let (last_path, stat_path) = (paths.last_build(), paths.statcache());
        let last_id = (file_id(&last_path), file_id(&paths.last_build_log()));
        let statcache_id = file_id(&stat_path);
        Preloaded {
            last: LastBuild::load(paths),
            last_id,
            statcache: crate::statcache::StatCache::load(&stat_path),
            statcache_id,
        }
    }

    /// The state as it is now (call with the workspace lock held).
    pub fn current(self, paths: &StatePaths) -> (LastBuild, crate::statcache::StatCache) {
        let (last_path, stat_path) = (paths.last_build(), paths.statcache());
        let now = (file_id(&last_path), file_id(&paths.last_build_log()));
        let last = if now == self.last_id {
            self.last
        } else {
            LastBuild::load(paths)
        };
        let statcache = if file_id(&stat_path) == self.statcache_id {
            self.statcache
        } else {
            crate::statcache::StatCache::load(&stat_path)
        };
        (last, statcache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoreStamp;

    #[test]
    fn preloaded_state_is_reread_when_another_build_replaced_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        let stamp = |id: &str| {
            let mut last = LastBuild::default();
            last.store = Some(StoreStamp {
                dir: "s".into(),
                id: id.into(),
            });
            last
        };
        stamp("first").save(&paths).unwrap();
        let early = Preloaded::load(&paths);
        let (last, _) = early.current(&paths);
        assert_eq!(last.store.unwrap().id, "first");
        let early = Preloaded::load(&paths);
        // Another build finishes between the read ahead and the lock.
        stamp("second").save(&paths).unwrap();
        let (last, _) = early.current(&paths);
        assert_eq!(last.store.unwrap().id, "second");
    }
}
